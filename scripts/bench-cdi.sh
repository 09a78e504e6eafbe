#!/usr/bin/env bash
# Times the whole `nodeprep cdi patch` process on the 8-GPU NixOS host tree
# against the jq pipeline NixOS users run as a workaround (one jq call per
# mount, 10 mounts), side by side with hyperfine, and reports nodeprep's
# peak RSS. Targets (issue 2): < 30 ms, >= 5x faster than jq, < 40 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NODEPREP:-bin/nodeprep}
out=${BENCH_OUT:-.bench}
mkdir -p "$out"
# The spec lives in /run (tmpfs) on a real node: benchmark there by default
# (BENCH_TMP=/some/disk/dir measures the cost of fsync on a disk).
work=$(mktemp -d -p "${BENCH_TMP:-/dev/shm}"); trap 'rm -rf "$work"' EXIT
cp -a testdata/hosts/nixos-h200 "$work/host"
spec="$work/host/run/cdi/nvidia-container-toolkit.json"
cp "$spec" "$work/orig.json"

# The jq workaround: the same 10 graphics mounts nodeprep adds first.
cat > "$work/jq-patch.sh" <<JQ
#!/usr/bin/env bash
set -e
s="$spec"
add() { jq --arg h "\$1" --arg c "\$2" '.containerEdits.mounts += [{hostPath: \$h, containerPath: \$c, options: ["ro","nosuid","nodev","bind"]}]' "\$s" > "\$s.tmp" && mv "\$s.tmp" "\$s"; }
d=/run/opengl-driver; l=/usr/lib/x86_64-linux-gnu
add \$d/share/vulkan/icd.d/nvidia_icd.x86_64.json /etc/vulkan/icd.d/nvidia_icd.json
add \$d/share/vulkan/implicit_layer.d/nvidia_layers.json /etc/vulkan/implicit_layer.d/nvidia_layers.json
add \$d/share/glvnd/egl_vendor.d/10_nvidia.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json
add \$d/share/egl/egl_external_platform.d/10_nvidia_wayland.json /usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json
add \$d/share/egl/egl_external_platform.d/15_nvidia_gbm.json /usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json
add \$d/lib/gbm/nvidia-drm_gbm.so \$l/gbm/nvidia-drm_gbm.so
add \$d/lib/libEGL.so.1 \$l/libEGL.so.1
add \$d/lib/libGLX.so.0 \$l/libGLX.so.0
add \$d/lib/libOpenGL.so.0 \$l/libOpenGL.so.0
add \$d/lib/libGLdispatch.so.0 \$l/libGLdispatch.so.0
JQ
chmod +x "$work/jq-patch.sh"

hyperfine --warmup 3 --runs ${RUNS:-30} -N --export-json "$out/cdi-patch.json" \
  --prepare "cp $work/orig.json $spec" \
  -n "nodeprep cdi patch" "$bin --root $work/host cdi patch -q" \
  -n "jq pipeline (10 calls)" "$work/jq-patch.sh" >/dev/null 2>&1 || \
hyperfine --warmup 3 --runs ${RUNS:-30} --export-json "$out/cdi-patch.json" \
  --prepare "cp $work/orig.json $spec" \
  -n "nodeprep cdi patch" "$bin --root $work/host cdi patch -q" \
  -n "jq pipeline (10 calls)" "$work/jq-patch.sh" >/dev/null

cp "$work/orig.json" "$spec"
rss=$( { /usr/bin/time -v "$bin" --root "$work/host" cdi patch -q >/dev/null; } 2>&1 | awk -F': ' '/Maximum resident/ {print $2}')
jq -r --arg rss "$rss" '
  (.results[0].median * 1000) as $n | (.results[1].median * 1000) as $j |
  "cdi patch, whole process (8-GPU NixOS spec): median \($n | . * 100 | round / 100) ms",
  "jq pipeline, 10 calls:                      median \($j | . * 100 | round / 100) ms",
  "speed-up: \($j / $n | . * 10 | round / 10)x   peak RSS: \(($rss | tonumber) / 1024 | . * 10 | round / 10) MiB"' "$out/cdi-patch.json"
