#!/usr/bin/env bash
# test.sh — what `make test` runs once `make deps` has installed the Debian
# packages: the Makefile's steps, each one `make STEP`, in this order:
#
#   tools      in the background, from the start until `unit` needs it:
#              scripts/build-tools.sh builds the real upstream components
#              (kube-apiserver and kine, containerd and crictl, two NVIDIA
#              container toolkits, ...) and installs Deno from npm, the
#              longest part of a cold run; its
#              lines come prefixed "[tools] "
#   build      the three binaries          \
#   lint       gofmt, go vet, staticcheck   } in the foreground meanwhile
#   rootfs     the self-test's rootfs      /
#   unit       go test ./..., after waiting for tools (its TestReal… tests
#              run those components)
#   nix-check, docs-check
#
# Why this order: measured cold on 2 cores, the steps run one after
# another kept on average less than one core busy (module downloads, one
# link at a time, tests waiting on processes), and the tools build is the
# longest of them and needed only by unit, so it runs beside the others.
# The foreground then pairs its steps with the other kind of work: build
# (CPU) starts while the tools download their modules (network), and
# rootfs (apt-get download and dpkg-deb: network and disk) comes last,
# when the tools build is compiling. build before lint, as before: go vet
# reuses what build compiled, and gofmt and vet still fail early. Two Go
# builds at once need more memory than one (a few GiB at the peak).
#
# A failing step fails the run at once, the tools build included (it is
# checked after each step); a failure or Ctrl-C stops a tools build still
# running. At the end it prints each step's time. GO (the go command) and
# make's command-line variables reach each `make STEP` as they are.
set -uo pipefail
cd "$(dirname "$0")/.."
make=(make --no-print-directory)
state=$(mktemp "${TMPDIR:-/tmp}/nodeprep-test-tools.XXXXXX") || exit 1
tools=
times=()

# group_alive PGID: whether a process of that group still runs (zombies,
# which only wait for their parent to collect them, do not count).
group_alive() {
  local f l st pgrp
  for f in /proc/[0-9]*/stat; do
    { read -r l <"$f"; } 2>/dev/null || continue
    l=${l##*) } # state ppid pgrp ...
    st=${l%% *} l=${l#* } l=${l#* } pgrp=${l%% *}
    [ "$pgrp" = "$1" ] && [ "$st" != Z ] && return 0
  done
  return 1
}
stop_tools() {
  if [ -n "$tools" ]; then
    # The whole process group: build-tools.sh (which then removes its
    # half-done build), go build and the compilers; what still runs after
    # 10 s is killed.
    kill -TERM -- "-$tools" 2>/dev/null && echo "test: stopping the tools build" >&2
    for _ in {1..100}; do
      group_alive "$tools" || break
      sleep 0.1
    done
    group_alive "$tools" && kill -KILL -- "-$tools" 2>/dev/null
    wait "$tools" 2>/dev/null
    tools=
  fi
}
trap 'stop_tools; rm -f "$state"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "test: $*" >&2
  exit 1
}
# tools_done [wait]: when the tools build has ended (with wait: once it
# has), fails the run if it failed, else adds its time.
tools_done() {
  local rc= s=? w=0
  if [ "${1:-}" = wait ]; then
    wait "$tools"
    w=$?
  fi
  read -r rc s <"$state" 2>/dev/null
  if [ -z "$rc" ]; then
    [ "${1:-}" = wait ] || return 0 # still running
    rc=$w                           # ended before it could say
  fi
  wait "$tools" 2>/dev/null
  tools=
  [ "$rc" = 0 ] || fail "make tools failed (exit $rc; its output above, prefixed [tools])"
  times+=("tools $s s")
}
step() {
  local start=$SECONDS
  "${make[@]}" "$1" || fail "make $1 failed"
  times+=("$1 $((SECONDS - start)) s")
  [ -z "$tools" ] || tools_done
}

if ! ./scripts/build-tools.sh --print >/dev/null 2>&1; then
  echo "test: the real components are not built yet: the tools build runs in the background, prefixed [tools]; it is the longest part of a cold run (docs/development.md)"
fi
# setsid: a process group of its own, so stop_tools ends it whole. The
# state file gets its exit status and time once it ends. Its own stderr
# (bash's "Terminated" when it is stopped) is dropped; make's goes through
# the prefix.
export STATE=$state
setsid bash -c '
  trap "exit 143" TERM
  set -o pipefail
  SECONDS=0
  "$@" tools 2>&1 | {
    trap "" TERM # read to the end: a writer stopped by SIGPIPE would not clean up
    while IFS= read -r l || [ -n "$l" ]; do printf "[tools] %s\n" "$l"; done
  }
  echo "$? $SECONDS" >"$STATE"
' tools "${make[@]}" 2>/dev/null &
tools=$!
SECONDS=0

step build
step lint
step rootfs
if [ -n "$tools" ]; then
  echo "test: waiting for the tools build (make tools) before unit"
  tools_done wait
fi
step unit
step nix-check
step docs-check
echo "test: passed in $SECONDS s ($(printf '%s, ' "${times[@]}" | sed 's/, $//'))"
