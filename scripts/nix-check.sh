#!/usr/bin/env bash
# Nix checks that need no nixpkgs: every .nix file parses, the
# builtins-only tests in nix/tests.nix evaluate to true, and so does the
# evaluation of nix/module.nix in nix/module-stub-eval.nix.
set -euo pipefail
cd "$(dirname "$0")/.."
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
# nix/module.nix itself, with the few nixpkgs lib functions it calls
# stood in for: the re-patch's path unit and service.
out=$(nix-instantiate --eval --strict nix/module-stub-eval.nix)
[ "$out" = "true" ] || { echo "nix-check: nix/module-stub-eval.nix: $out" >&2; exit 1; }
echo "nix-check: nix/module-stub-eval.nix passed (module.nix's re-patch units)"
# docs/nixos.md quotes nix/example-configuration.nix in full; keep them equal.
doc=docs/nixos.md
doc_example=$(awk '/^This is `nix\/example-configuration.nix`/ {f=1} f && /^```nix$/ {getline; p=1} p && /^```$/ {exit} p {print}' "$doc")
if [ "$doc_example" != "$(cat nix/example-configuration.nix)" ]; then
  echo "nix-check: $doc's copy of nix/example-configuration.nix differs from the file" >&2
  exit 1
fi
echo "nix-check: $doc's example configuration matches nix/example-configuration.nix"
