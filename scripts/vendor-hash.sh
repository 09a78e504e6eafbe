#!/usr/bin/env bash
# vendor-hash.sh [--check|--update] — the vendorHash of nix/package.nix.
#
# buildGoModule's vendor derivation runs `go mod vendor` and keeps the
# vendor directory; its hash is the NAR hash of that directory. This script
# does the same in a temporary copy of go.mod/go.sum and the Go packages
# (modules come from the module cache, missing ones from the module proxy)
# and prints the SRI hash. With --check it exits 1 when nix/package.nix
# carries another one (a stale hash after go.mod changed); with --update it
# writes the new one into nix/package.nix.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-print}
command -v nix >/dev/null || { echo "vendor-hash: nix not found (apt-get install nix-bin)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/nodeprep-vendor.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# Tracked and new files as they are in the work tree (a deleted one is gone).
git ls-files -z --cached --others --exclude-standard --deduplicate -- go.mod go.sum '*.go' |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  xargs -0 cp --parents -t "$tmp"
(cd "$tmp" && GOFLAGS=-mod=mod go mod vendor)
got=$(nix --extra-experimental-features nix-command hash path "$tmp/vendor")
have=$(sed -n 's/^ *vendorHash = "\(sha256-[^"]*\)";.*/\1/p' nix/package.nix)

case $mode in
  print) echo "$got" ;;
  --check)
    if [ "$got" != "$have" ]; then
      echo "vendor-hash: nix/package.nix has vendorHash $have, go.mod/go.sum vendor to $got (run scripts/vendor-hash.sh --update)" >&2
      exit 1
    fi
    echo "vendor-hash: nix/package.nix's vendorHash matches go.mod/go.sum ($got)" ;;
  --update)
    sed -i "s|^\( *vendorHash = \)\"sha256-[^\"]*\";|\1\"$got\";|" nix/package.nix
    echo "vendor-hash: nix/package.nix vendorHash = $got" ;;
  *) echo "usage: $0 [--check|--update]" >&2; exit 2 ;;
esac
