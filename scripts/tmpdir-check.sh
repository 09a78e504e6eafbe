#!/usr/bin/env bash
# tmpdir-check: run a command (the Go tests) with a private, empty TMPDIR
# and fail when it leaves anything there. `make unit` runs `go test`
# through it, so a test that forgets t.TempDir or a cleanup fails CI
# instead of filling the runner's /tmp. The private directory is made
# under the caller's TMPDIR and always removed; the exit status is the
# command's, or 1 when it passed but left something behind.
#
#   scripts/tmpdir-check.sh go test ./...
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
outer=${TMPDIR:-/tmp}
private=$(mktemp -d "$outer/nodeprep-tmpdir-check.XXXXXX") || exit 1
trap 'rm -rf "$private"' EXIT
TMPDIR=$private "$@"
rc=$?
left=$(cd "$private" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | sort)
if [ -n "$left" ]; then
  echo "tmpdir-check: the run left $(du -sh "$private" | cut -f1) in \$TMPDIR (tests must clean up: t.TempDir, t.Cleanup, testkit.Main):" >&2
  while IFS= read -r name; do
    echo "  $(du -sh "$private/$name" | cut -f1)	$name" >&2
  done <<<"$left"
  [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
