#!/usr/bin/env bash
# hardening.sh [--update FILE] — runs nodeprep against hostile inputs (the
# kinds an adversarial pass found: redirecting API servers, YAML that
# expands, directories swapped under the watcher, junk spec floods, huge
# lists, unbounded files) and prints the hardening table: exit code, time,
# peak RSS, files written outside --root, secrets seen in any output. Each
# scripts/hardening/*.sh case file (sourced, in name order) prints its
# rows with `row` from scripts/hardening/lib.sh. With --update FILE the
# table replaces the lines between <!-- hardening:begin --> and
# <!-- hardening:end --> in FILE. Exits 1 when any row is not as expected.
# Needs: bin/nodeprep and bin/nodeprep-cluster (make build), jq, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
export NODEPREP=${NODEPREP:-$PWD/bin/nodeprep} NODEPREP_CLUSTER=${NODEPREP_CLUSTER:-$PWD/bin/nodeprep-cluster}
[ -x "$NODEPREP" ] || { echo "hardening: $NODEPREP not built (make build)" >&2; exit 1; }
. scripts/hardening/lib.sh
update=""
[ "${1:-}" = "--update" ] && update=$2
# Every row's $WORK is made under one base directory, removed however the
# script ends: the table is computed in a subshell, whose last $WORK the
# script itself never sees.
HARDENING_BASE=$(mktemp -d "${TMPDIR:-/tmp}/nodeprep-hardening.XXXXXX")
export HARDENING_BASE
trap 'rm -rf "$HARDENING_BASE"' EXIT
trap 'exit 130' INT TERM
table=$(
  echo "| hostile input | exit | time | peak RSS | files outside root | secrets seen |"
  echo "|---|---|---|---|---|---|"
  for f in scripts/hardening/[0-9]*.sh; do
    fresh_work
    . "$f"
  done
  [ "$HARDENING_FAILED" = 0 ] || echo "HARDENING_FAILED"
)
echo "$table"
if [ -n "$update" ]; then
  python3 - "$update" "$table" <<'PY'
import sys, re
path, table = sys.argv[1], sys.argv[2]
table = "\n".join(l for l in table.splitlines() if l != "HARDENING_FAILED")
text = open(path).read()
new, n = re.subn(r"(<!-- hardening:begin -->\n).*?(<!-- hardening:end -->)", lambda m: m.group(1) + table + "\n" + m.group(2), text, flags=re.S)
if n != 1:
    sys.exit(f"hardening: {path} has no <!-- hardening:begin/end --> block")
open(path, "w").write(new)
PY
fi
case "$table" in *HARDENING_FAILED*) exit 1 ;; esac
