# scripts/hardening/20-yaml.sh — YAML that expands through its aliases, and
# the inputs read whole before they were refused (issue 32, items 3 and
# 10). Each row runs under a 2 GiB address-space cap (ulimit -v), so that a
# binary without the bound fails its row instead of taking the machine:
# before the bound, the 212 KB k3s config took 1.2 GiB and died at the
# cap (exit 2), the 650 KB one ran out of memory, the kubeconfig and the
# manifest bombs took 0.8 and 1.6 GiB.

# CAPPED runs the command after it under the address-space cap.
CAPPED=(bash -c 'ulimit -v 2097152; exec "$@"' capped)

# yaml_bomb SCALAR_BYTES ALIASES HEAD INDENT: HEAD, then "x: &a <string>"
# and "y: [*a, …]" at INDENT.
yaml_bomb() {
  python3 - "$@" <<'PY'
import sys
size, n, head, indent = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
sys.stdout.write(head + indent + 'x: &a "' + "x" * size + '"\n' + indent + "y: [" + ", ".join(["*a"] * n) + "]\n")
PY
}

cp -a testdata/hosts/nixos-h200/. "$HROOT/"
mkdir -p "$HROOT/etc/rancher/k3s" "$WORK/in"
yaml_bomb 200000 4000 "" "" | sed 's/^x:/node-name:/; s/^y:/node-label:/' >"$WORK/in/k3s-212k.yaml"
yaml_bomb 600000 12000 "" "" | sed 's/^x:/node-name:/; s/^y:/node-label:/' >"$WORK/in/k3s-650k.yaml"

cp "$WORK/in/k3s-212k.yaml" "$HROOT/etc/rancher/k3s/config.yaml"
row "k3s config.yaml of a 200 KB string aliased 4,000 times (212 KB): \`join\`" 65 -- "${CAPPED[@]}" "$NODEPREP" --root "$HROOT" join --simulate dgx-h200
row "the same k3s config.yaml: \`cdi check\` (a k3s-config finding)" 1 -- "${CAPPED[@]}" "$NODEPREP" --root "$HROOT" cdi check --simulate dgx-h200
cp "$WORK/in/k3s-650k.yaml" "$HROOT/etc/rancher/k3s/config.yaml"
row "k3s config.yaml of a 600 KB string aliased 12,000 times (650 KB): \`up\`" 65 -- "${CAPPED[@]}" "$NODEPREP" --root "$HROOT" up --simulate dgx-h200
rm "$HROOT/etc/rancher/k3s/config.yaml"

yaml_bomb 200000 4000 $'apiVersion: v1\nkind: Config\ncurrent-context: c\n' "" >"$WORK/in/kubeconfig"
row "kubeconfig of a 200 KB string aliased 4,000 times: \`cluster check --kubeconfig\`" 65 -- "${CAPPED[@]}" "$NODEPREP_CLUSTER" cluster check --pool-label a=b --kubeconfig "$WORK/in/kubeconfig"
yaml_bomb 200000 1000 $'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n' "  " >"$WORK/in/bomb.yaml"
row "manifest of a 200 KB string aliased 1,000 times: \`cluster check\`" 65 -- "${CAPPED[@]}" "$NODEPREP_CLUSTER" cluster check --pool-label a=b "$WORK/in/bomb.yaml"
truncate -s 200M "$WORK/in/nul.yaml"
row "200 MB all-NUL (sparse) manifest: \`cluster check\`" 65 -- "${CAPPED[@]}" "$NODEPREP_CLUSTER" cluster check --pool-label a=b "$WORK/in/nul.yaml"
rm "$WORK/in/nul.yaml"

# The NVIDIA runtime's config is read where containerd has an nvidia
# handler: fhs-ubuntu with nvruntime-mode-cdi laid over it, as the tests do.
NV=$HROOT/nv
mkdir -p "$NV"
cp -a testdata/hosts/fhs-ubuntu/. "$NV/"
cp -a testdata/hosts/nvruntime-mode-cdi/. "$NV/"
python3 -c 'import sys; sys.stdout.write("x = [" + "1," * (20 << 20) + "1]\n")' >"$NV/etc/nvidia-container-runtime/config.toml"
row "NVIDIA runtime config.toml of a 40 MB array: \`cdi check\` (an nvidia-runtime-config finding)" 1 -- "${CAPPED[@]}" "$NODEPREP" --root "$NV" cdi check --simulate dgx-h200
rm -rf "$NV"

mkdir -p "$WORK/in/target"
echo keep >"$WORK/in/target/job.yaml"
ln -s "$WORK/in/target" "$WORK/in/out-link"
row "\`render --out\` a symlink to a directory (job.yaml there kept)" 73 -- "${CAPPED[@]}" bash -c '"$1" cluster render --pool-label a=b --out "$2"; rc=$?; [ "$(cat "$3")" = keep ] || rc=99; exit $rc' _ "$NODEPREP_CLUSTER" "$WORK/in/out-link" "$WORK/in/target/job.yaml"
