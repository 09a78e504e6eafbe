#!/usr/bin/env bash
# The demo (`make demo`): the whole boot pipeline on a real host tree with no
# GPU. It copies testdata/hosts/nixos-h200 (a NixOS DGX H200 node: the
# /run/opengl-driver link farm and the CDI spec nvidia-ctk generates) to a
# temporary root and runs
#   nodeprep up --root <tmp> --simulate dgx-h200 --allow-cpu-adapter
# with Mesa's lavapipe (Vulkan) and Mesa EGL standing in for the NVIDIA
# driver, then prints the report and every file it wrote. The temporary root
# is removed on exit unless DEMO_KEEP=1 (or DEMO_ROOT names one to keep).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NODEPREP:-bin/nodeprep}
[ -x "$bin" ] || { echo "demo: $bin not built (make build)" >&2; exit 1; }
# Mesa's lavapipe ICD and EGL vendor manifest: Debian's paths, unless the
# environment already names them (the Nix build's tests do).
icd=${VK_DRIVER_FILES:-$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -1)}
egl=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/share/glvnd/egl_vendor.d/50_mesa.json}
[ -n "$icd" ] && [ -f "$egl" ] || { echo "demo: Mesa's lavapipe/EGL missing (make deps)" >&2; exit 1; }

keep=${DEMO_KEEP:-0}
if [ -n "${DEMO_ROOT:-}" ]; then
  root=$DEMO_ROOT; keep=1
else
  root=$(mktemp -d "${TMPDIR:-/tmp}/nodeprep-demo.XXXXXX")
fi
cleanup() {
  if [ "$keep" = 1 ]; then
    echo "kept the host root $root (remove it with: rm -rf $root)"
  else
    rm -rf "$root"
    echo "removed the host root $root (DEMO_KEEP=1 make demo keeps it)"
  fi
}
trap cleanup EXIT
rm -rf "$root"; mkdir -p "$root"
cp -a testdata/hosts/nixos-h200/. "$root/"
echo "host root: $root (a copy of testdata/hosts/nixos-h200)"
echo "\$ VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=$egl \\"
echo "    $bin up --root $root --simulate dgx-h200 --allow-cpu-adapter --metrics-file /run/nodeprep/nodeprep.prom"
echo
set +e
VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=$egl \
  "$bin" up --root "$root" --simulate dgx-h200 --allow-cpu-adapter --metrics-file /run/nodeprep/nodeprep.prom
rc=$?
set -e
echo
echo "exit status: $rc"
echo "files written under $root:"
# run/cdi, not var/run/cdi: var/run is an absolute link, which only
# nodeprep re-roots; the shell would follow it to this machine's /run.
for f in run/cdi/nvidia-container-toolkit.json etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml \
         run/nodeprep/status.json run/nodeprep/nodeprep.prom; do
  [ -e "$root/$f" ] && printf '  %s  (%s bytes)\n' "$root/$f" "$(stat -L -c %s "$root/$f")"
done
echo
echo "the k3s drop-in:"
sed 's/^/  /' "$root/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml" 2>/dev/null || echo "  (none: the node is not ready)"
exit $rc
