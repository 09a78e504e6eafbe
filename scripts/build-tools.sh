#!/usr/bin/env bash
# build-tools.sh [--print] COMPONENT... — builds the real upstream components
# the tests run (the NVIDIA container toolkit, containerd, ...) from their
# pinned tools modules under testdata/tools/<COMPONENT>/, through the Go
# module proxy, into .cache/tools/<COMPONENT>/<key>/, and prints that
# directory, one line a component. <key> hashes the module's go.mod and
# go.sum, its own Go files, its ldflags file and the Go version, so a pin that changes builds anew and a warm
# run builds nothing (envtest keeps its binaries the same way). A
# component pinned through npm instead (a package.json and its
# package-lock.json, whose integrity hashes npm checks: Deno) is installed
# with `npm ci` and its programs linked at the top of its directory; its
# <key> hashes those two files. With no COMPONENT it builds every tools
# module. --print only prints the
# directories of the components already built and fails for the others.
# Concurrent runs (parallel test binaries) wait on one lock per component.
# The wait on the lock and each build run under scripts/heartbeat.sh, so
# a build that takes minutes (docs/development.md lists what each costs
# cold) says every 30 s on stderr that it is still running.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hb=$repo/scripts/heartbeat.sh
# A signal ends the script through its EXIT trap, which removes a
# half-done build.
trap 'exit 130' INT
trap 'exit 143' TERM
tools=$repo/testdata/tools
cache=${NODEPREP_TOOLS_CACHE:-$repo/.cache/tools}
print_only=0
if [ "${1:-}" = --print ]; then print_only=1; shift; fi
if [ $# = 0 ]; then
  set -- $(cd "$tools" && shopt -s nullglob && for d in */go.mod */package-lock.json; do printf '%s\n' "${d%/*}"; done | LC_ALL=C sort -u)
fi
gov=$(go env GOVERSION GOOS GOARCH | paste -sd-)

# npm_install COMPONENT MODULE DIR: installs the npm-pinned component
# exactly as its package-lock.json says (`npm ci` checks every package's
# integrity hash and fails on a lock that does not match package.json;
# --ignore-scripts: no install script of a package runs) into DIR, then
# links each program its packages declare in "bin", or, for a package
# with no "bin" (the @deno/<platform> packages ship the bare executable),
# each executable file at its top, at the top of DIR.
npm_install() {
  local c=$1 mod=$2 dir=$3 f
  command -v npm >/dev/null || { echo "build-tools: $c needs npm (scripts/install-deps.sh test installs it)" >&2; return 1; }
  cp "$mod/package.json" "$mod/package-lock.json" "$dir/"
  (cd "$dir" && "$hb" "build-tools ($c)" npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
    --cache "$dir/.npm-cache" >&2)
  rm -rf "$dir/.npm-cache"
  for f in "$dir"/node_modules/*/*/* "$dir"/node_modules/*/*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    ln -sfn "${f#"$dir"/}" "$dir/$(basename "$f")"
  done
}
for c in "$@"; do
  mod=$tools/$c
  if [ -f "$mod/package-lock.json" ]; then
    kind=npm
    key=$(cat "$mod/package.json" "$mod/package-lock.json" | sha256sum | cut -c1-16)
  elif [ -f "$mod/go.mod" ]; then
    kind=go
    # An optional ldflags file sets what upstream's own Makefile sets with
    # -X (the version the programs print and log).
    ldflags=$(cat "$mod/ldflags" 2>/dev/null || true)
    # Go files of the tools module itself (a test tool of nodeprep's built
    # with the upstream libraries, such as draspecs) are part of the key.
    mapfile -t own < <(find "$mod" -name '*.go' | LC_ALL=C sort)
    key=$(cat "$mod/go.mod" "$mod/go.sum" "${own[@]}" <(printf '%s\n%s' "$gov" "$ldflags") | sha256sum | cut -c1-16)
  else
    echo "build-tools: no tools module testdata/tools/$c" >&2; exit 2
  fi
  out=$cache/$c/$key
  if [ ! -e "$out/.complete" ]; then
    if [ $print_only = 1 ]; then echo "build-tools: $c is not built (run scripts/build-tools.sh $c)" >&2; exit 1; fi
    mkdir -p "$cache/$c"
    exec 9>"$cache/$c/.lock"
    "$hb" "build-tools ($c): waiting for another build of it" flock 9
    if [ ! -e "$out/.complete" ]; then
      start=$(date +%s)
      echo "build-tools: building $c (pinned in testdata/tools/$c; what a cold build costs: docs/development.md)" >&2
      tmp=$(mktemp -d "$cache/$c/.build.XXXXXX")
      trap 'rm -rf "$tmp"' EXIT
      if [ $kind = npm ]; then
        npm_install "$c" "$mod" "$tmp"
      else
        # CGO for the NVIDIA tools (go-nvml dlopens libnvidia-ml); -trimpath
        # keeps the build reproducible across checkouts, so the build cache
        # serves every worktree and CI clone.
        (cd "$mod" && CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" \
          "$hb" "build-tools ($c)" go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/" tool)
      fi
      touch "$tmp/.complete"
      rm -rf "$out"
      mv "$tmp" "$out"
      trap - EXIT
      echo "build-tools: built $c in $(( $(date +%s) - start )) s" >&2
      # Older keys of this component are stale pins.
      find "$cache/$c" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build.*' -exec rm -rf {} +
    fi
    exec 9>&-
  fi
  printf '%s\n' "$out"
done
