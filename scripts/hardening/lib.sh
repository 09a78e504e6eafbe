# scripts/hardening/lib.sh — sourced by scripts/hardening.sh and by each
# scripts/hardening/*.sh case file. It measures one hostile input per row:
# exit code, wall time, peak RSS of the whole process tree that was waited
# for (GNU time's %M: the largest of nodeprep and its waited children),
# files written outside the run's --root, and secrets seen in any output.
#
#   row "description" EXPECTED_EXIT[,ALT...] -- command args...
#
# runs the command with $HROOT as the host root convention (the case file
# passes --root "$HROOT" itself), in $WORK (fresh per row), and prints a
# Markdown table row. A row whose exit code is not one of those expected
# is marked FAIL and makes the whole script exit 1 at the end.
# SECRET is a token the case files plant in kubeconfigs, environments and
# bodies; any output that contains it counts as a secret seen.
SECRET=${SECRET:-nodeprep-hardening-secret-0f3c9a}
HARDENING_FAILED=0

# fresh_work makes a new $WORK (under $HARDENING_BASE, which
# scripts/hardening.sh removes at its end) with $WORK/root ($HROOT) and an
# outside sentinel directory, $WORK/outside, that no row may write into.
fresh_work() {
  [ -n "${WORK:-}" ] && rm -rf "$WORK"
  WORK=$(mktemp -d "${HARDENING_BASE:-${TMPDIR:-/tmp}}/row.XXXXXX")
  HROOT=$WORK/root
  mkdir -p "$HROOT" "$WORK/outside"
}

# files_outside counts regular files under $WORK that are neither under
# $HROOT nor the row's own captured outputs.
files_outside() {
  find "$WORK" -path "$HROOT" -prune -o -path "$WORK/.row" -prune -o -type f -print | wc -l
}

row() {
  local desc=$1 expect=$2; shift 3
  mkdir -p "$WORK/.row"
  local before after start end rc rss secret
  before=$(files_outside)
  start=$(date +%s%N)
  set +e
  /usr/bin/time -f '%M' -o "$WORK/.row/time" "$@" >"$WORK/.row/out" 2>"$WORK/.row/err"
  rc=$?
  set -e
  end=$(date +%s%N)
  after=$(files_outside)
  rss=$(( $(tail -n1 "$WORK/.row/time" 2>/dev/null || echo 0) / 1024 ))
  secret=0
  if grep -qF "$SECRET" "$WORK/.row/out" "$WORK/.row/err" 2>/dev/null; then secret=1; fi
  local mark=""
  case ",$expect," in *",$rc,"*) ;; *) mark=" FAIL (wanted $expect)"; HARDENING_FAILED=1 ;; esac
  if [ "$secret" != 0 ] || [ "$after" != "$before" ]; then mark="$mark FAIL"; HARDENING_FAILED=1; fi
  printf '| %s | %s%s | %d ms | %d MiB | %d | %d |\n' "$desc" "$rc" "$mark" $(( (end - start) / 1000000 )) "$rss" $(( after - before )) "$secret"
  if [ -n "$mark" ] && [ -n "${HARDENING_VERBOSE:-}" ]; then
    echo "--- stderr of: $desc" >&2; head -c 2000 "$WORK/.row/err" >&2; echo >&2
  fi
}
