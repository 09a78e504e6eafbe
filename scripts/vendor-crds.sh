#!/usr/bin/env bash
# vendor-crds.sh — copies the CRDs of the objects `cluster render` writes
# from the projects' Go modules (through the Go module proxy) into
# testdata/cluster/crds/, unchanged: Karpenter's module embeds its CRDs
# (sigs.k8s.io/karpenter pkg/apis/crds, go:embed), KEDA's carries
# config/crd/bases. The real API server test installs them. To move a
# pin, change it here, run the script and commit the files.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/testdata/cluster/crds
karpenter=sigs.k8s.io/karpenter@v1.14.0
keda=github.com/kedacore/keda/v2@v2.21.0
dir() { (cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$1") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
kd=$(dir "$karpenter"); [ -n "$kd" ] || { echo "vendor-crds: downloading $karpenter failed" >&2; exit 1; }
ked=$(dir "$keda"); [ -n "$ked" ] || { echo "vendor-crds: downloading $keda failed" >&2; exit 1; }
mkdir -p "$out"
install -m 0644 "$kd/pkg/apis/crds/karpenter.sh_nodepools.yaml" "$out/"
install -m 0644 "$ked/config/crd/bases/keda.sh_scaledjobs.yaml" "$ked/config/crd/bases/keda.sh_scaledobjects.yaml" "$out/"
cat >"$out/README.md" <<EOR
# The CRDs render's objects need

Copied unchanged by \`scripts/vendor-crds.sh\` from the Go modules:

| file | from |
|---|---|
| \`karpenter.sh_nodepools.yaml\` | \`$karpenter\` \`pkg/apis/crds/\` (embedded by \`pkg/apis\`) |
| \`keda.sh_scaledjobs.yaml\`, \`keda.sh_scaledobjects.yaml\` | \`$keda\` \`config/crd/bases/\` |

\`TestRealClusterRenderAndLiveCheck\` installs them in a real kube-apiserver. Both projects are Apache-2.0.
EOR
echo "vendor-crds: $(ls "$out" | wc -l) files in testdata/cluster/crds"
