#!/usr/bin/env bash
# Nix checks that need no nixpkgs: every .nix file parses, the
# builtins-only tests in nix/tests.nix evaluate to true, and so does the
# evaluation of nix/module.nix with the example configuration and the
# stand-in nixpkgs modules in nix/module-stub-eval.nix, whose facts equal
# testdata/fleet/example-facts.json.
#
#   scripts/nix-check.sh            check
#   scripts/nix-check.sh --update   rewrite testdata/fleet/example-facts.json first
set -euo pipefail
cd "$(dirname "$0")/.."
update=false
[ "${1:-}" = "--update" ] && update=true
command -v nix-instantiate >/dev/null || { echo "nix-check: nix-instantiate not found (apt-get install nix-bin)" >&2; exit 1; }
files=$(git ls-files '*.nix')
[ -n "$files" ] || { echo "nix-check: no .nix files"; exit 0; }
for f in $files; do
  nix-instantiate --parse "$f" >/dev/null
done
echo "nix-check: parsed $(echo "$files" | wc -w) files"
if [ -f nix/tests.nix ]; then
  out=$(nix-instantiate --eval --strict nix/tests.nix)
  [ "$out" = "true" ] || { echo "nix-check: nix/tests.nix: $out" >&2; exit 1; }
  echo "nix-check: nix/tests.nix passed"
fi
# nix/module.nix with the example configuration and the stand-ins for the
# nixpkgs modules it composes with (nix/stub/).
facts=testdata/fleet/example-facts.json
if $update; then
  tmp=$(mktemp "$facts.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  nix-instantiate --eval --strict --json -E 'import ./nix/module-stub-eval.nix { what = "facts"; }' |
    python3 -c 'import json, sys; json.dump(json.load(sys.stdin), sys.stdout, indent=2, sort_keys=True); print()' >"$tmp"
  mv "$tmp" "$facts"
  echo "nix-check: wrote $facts"
fi
out=$(nix-instantiate --eval --strict -E 'import ./nix/module-stub-eval.nix { }')
[ "$out" = "true" ] || { echo "nix-check: nix/module-stub-eval.nix: $out" >&2; exit 1; }
echo "nix-check: nix/module-stub-eval.nix passed (the example with stand-in k3s and toolkit modules; its facts equal $facts)"
# docs/nixos.md quotes nix/example-configuration.nix in full; keep them equal.
doc=docs/nixos.md
doc_example=$(awk '/^This is `nix\/example-configuration.nix`/ {f=1} f && /^```nix$/ {getline; p=1} p && /^```$/ {exit} p {print}' "$doc")
if [ "$doc_example" != "$(cat nix/example-configuration.nix)" ]; then
  echo "nix-check: $doc's copy of nix/example-configuration.nix differs from the file" >&2
  exit 1
fi
echo "nix-check: $doc's example configuration matches nix/example-configuration.nix"
