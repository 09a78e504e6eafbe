#!/usr/bin/env bash
# docs-check: the README stays a newcomer's page and the docs stay user
# docs. README.md is at most 250 lines and shows `make demo` / `make test`
# near the top; README and docs/ name no file outside the repository
# (design notes, field-report numbers), nor do code comments cite
# DESIGN.md; the NixOS pages no RuntimeClass the module
# does not provide; every relative link resolves.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
err() { echo "docs-check: $*" >&2; fail=1; }

lines=$(wc -l < README.md)
[ "$lines" -le 250 ] || err "README.md has $lines lines, want at most 250 (move reference to docs/)"
head -20 README.md | grep -q '^make demo' || err "README.md: 'make demo' is not in its first 20 lines"
head -20 README.md | grep -q '^make test' || err "README.md: 'make test' is not in its first 20 lines"

pages=$(ls README.md docs/*.md)
if grep -nE '\bF[0-9]{1,2}\b|DESIGN\.md|FIELD-REPORTS' $pages; then
  err "the lines above name files outside the repository"
fi
# Code comments point at the repository's own pages (docs/exit-codes.md,
# docs/development.md, …), not at design notes that are not in it.
if grep -rnE 'DESIGN\.md' --include='*.go' --include='*.nix' --include='*.sh' --exclude-dir=.git . | grep -v '^\./scripts/docs-check\.sh:'; then
  err "the lines above cite DESIGN.md, which is not in the repository: name the page under docs/ that says it"
fi
# A GPU pod on a NixOS node runs on the nvidia-cdi RuntimeClass (the
# envvar strategy cluster render writes; docs/cluster.md): a page's pod
# example must use that one, never the plain nvidia class, which bypasses the
# patched spec. (TestNixOSPageWorkload runs docs/nixos.md's through cluster check.)
if grep -nE 'runtimeClassName: *"?nvidia"? *($|#)' README.md docs/*.md; then
  err "the lines above use the nvidia RuntimeClass, whose runtime mode auto never reads the patched spec: use nvidia-cdi"
fi

# Pages other branches add (remove a name once its page is merged): a link
# to one is reported, not failed.
pending=""
for page in $pages; do
  dir=$(dirname "$page")
  for link in $(grep -oE '\]\([^)#]+' "$page" | sed 's/^](//' | grep -v '^https\?:' || true); do
    target=$dir/$link
    [ -e "$target" ] && continue
    case " $pending " in
      *" ${target#./} "*) echo "docs-check: $page links $link, which another branch adds" ;;
      *) err "$page links $link, which does not exist" ;;
    esac
  done
done
[ "$fail" = 0 ] && echo "docs-check: README.md ($lines lines) and docs/ ok"
exit "$fail"
