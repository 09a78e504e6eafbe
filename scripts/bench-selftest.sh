#!/usr/bin/env bash
# Times the whole `nodeprep selftest --simulate dgx-h200 --allow-cpu-adapter`
# process (parent, two probe children, Vulkan instance, compute dispatch,
# EGL context) against `vulkaninfo --summary`, both on Mesa's lavapipe, side
# by side in one hyperfine run (a loop over `date +%s%N` when hyperfine is
# missing). Target (issue 5): nodeprep's median <= 1.0x vulkaninfo's.
# Build first (`make build`); NODEPREP overrides the binary, RUNS the count.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NODEPREP:-bin/nodeprep}
runs=${RUNS:-30}
out=${BENCH_OUT:-.bench}
mkdir -p "$out"
icd=${VK_DRIVER_FILES:-$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -n1)}
egl=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/share/glvnd/egl_vendor.d/50_mesa.json}
[ -x "$bin" ] || { echo "bench-selftest: $bin not built (make build)" >&2; exit 1; }
[ -n "$icd" ] && [ -f "$icd" ] || { echo "bench-selftest: lavapipe ICD manifest not found (apt-get install mesa-vulkan-drivers)" >&2; exit 1; }
command -v vulkaninfo >/dev/null || { echo "bench-selftest: vulkaninfo not found (apt-get install vulkan-tools)" >&2; exit 1; }
export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=$egl
root=$(mktemp -d); trap 'rm -rf "$root"' EXIT   # no config file: defaults

selftest=("$bin" --root "$root" -q selftest --simulate dgx-h200 --allow-cpu-adapter)
"${selftest[@]}" >/dev/null || { echo "bench-selftest: the self-test itself fails:" >&2; "${selftest[@]}" >&2; exit 1; }

if command -v hyperfine >/dev/null && command -v jq >/dev/null; then
  hyperfine --warmup 3 --runs "$runs" -N --export-json "$out/selftest.json" \
    -n "nodeprep selftest" "${selftest[*]}" \
    -n "vulkaninfo --summary" "vulkaninfo --summary" >/dev/null
  jq -r '
    (.results[0].median * 1000) as $n | (.results[1].median * 1000) as $v |
    "nodeprep selftest (dgx-h200, lavapipe stand-in): median \($n * 100 | round / 100) ms",
    "vulkaninfo --summary (lavapipe):                  median \($v * 100 | round / 100) ms",
    "ratio nodeprep/vulkaninfo: \($n / $v * 100 | round / 100)x (target <= 1.0x), shader cache warm"' "$out/selftest.json"
  # Cold: the shader cache emptied before every run, as at boot (/run is
  # tmpfs); lavapipe then compiles the dispatch shader with LLVM each time.
  hyperfine --warmup 3 --runs "$runs" -N --export-json "$out/selftest-cold.json" \
    --prepare "rm -rf /run/nodeprep/shader-cache" \
    -n "nodeprep selftest, cold" "${selftest[*]}" >/dev/null
  jq -r --slurpfile w "$out/selftest.json" '
    (.results[0].median * 1000) as $n | ($w[0].results[1].median * 1000) as $v |
    "nodeprep selftest, shader cache cold:            median \($n * 100 | round / 100) ms, ratio \($n / $v * 100 | round / 100)x"' "$out/selftest-cold.json"
  exit 0
fi

# Fallback: a plain loop, medians in ms.
median() { sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.2f", m/1e6}'; }
time_runs() {
  for _ in 1 2 3; do "$@" >/dev/null 2>&1; done
  for _ in $(seq "$runs"); do
    s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $((e - s))
  done | median
}
n=$(time_runs "${selftest[@]}")
v=$(time_runs vulkaninfo --summary)
echo "nodeprep selftest (dgx-h200, lavapipe stand-in): median $n ms"
echo "vulkaninfo --summary (lavapipe):                  median $v ms"
awk -v n="$n" -v v="$v" 'BEGIN {printf "ratio nodeprep/vulkaninfo: %.2fx (target <= 1.0x)\n", n / v}'
