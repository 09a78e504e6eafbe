#!/usr/bin/env bash
# Times the whole `nodeprep selftest --simulate dgx-h200 --allow-cpu-adapter`
# process (parent, two probe children, Vulkan instance, compute dispatch,
# EGL context) on Mesa's lavapipe and Mesa EGL against two comparators, in
# one hyperfine run (hyperfine runs each command's runs in turn; the three
# are measured under the same load):
#   - `vulkaninfo --summary` alone            (target: nodeprep <= 1.0x)
#   - `vulkaninfo --summary; eglinfo -B`      (target: nodeprep <= 0.6x)
# the same two APIs without a dispatch. Medians are reported. A second
# run empties nodeprep's shader cache (under --root, where nodeprep keeps
# it) before every run, as at boot (/run is tmpfs).
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
# Debian's mesa-utils-bin installs eglinfo under its multiarch name.
eglinfo=$(command -v eglinfo || ls /usr/bin/eglinfo.* 2>/dev/null | head -n1 || true)
[ -n "$eglinfo" ] || { echo "bench-selftest: eglinfo not found (apt-get install mesa-utils-bin)" >&2; exit 1; }
command -v hyperfine >/dev/null && command -v jq >/dev/null || { echo "bench-selftest: hyperfine and jq needed (make deps-bench)" >&2; exit 1; }
export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=$egl
root=$(mktemp -d); trap 'rm -rf "$root"' EXIT   # no config file: defaults
cache=$root/run/nodeprep/shader-cache            # where nodeprep keeps it, under --root

selftest=("$bin" --root "$root" -q selftest --simulate dgx-h200 --allow-cpu-adapter)
"${selftest[@]}" >/dev/null || { echo "bench-selftest: the self-test itself fails:" >&2; "${selftest[@]}" >&2; exit 1; }
# eglinfo exits non-zero on a headless host (its X11, Wayland and GBM
# platforms fail) after it has loaded EGL and Mesa: the comparator ignores
# that status, and checks only that it ran.
eglout=$("$eglinfo" -B 2>&1 || true)
grep -q "EGL client extensions" <<<"$eglout" || { echo "bench-selftest: $eglinfo -B does not run" >&2; exit 1; }
[ -d "$cache" ] || { echo "bench-selftest: no shader cache at $cache" >&2; exit 1; }

hyperfine --warmup 3 --runs "$runs" --export-json "$out/selftest.json" \
  -n "nodeprep selftest" "${selftest[*]}" \
  -n "vulkaninfo --summary" "vulkaninfo --summary" \
  -n "vulkaninfo --summary; eglinfo -B" "vulkaninfo --summary >/dev/null; $eglinfo -B >/dev/null 2>&1 || true" >/dev/null
# Cold: the cache emptied before each run (hyperfine's --prepare).
hyperfine --warmup 1 --runs "$runs" --export-json "$out/selftest-cold.json" \
  --prepare "rm -rf '$cache'" \
  -n "nodeprep selftest, cold" "${selftest[*]}" >/dev/null
jq -r --slurpfile c "$out/selftest-cold.json" '
  def ms: . * 1000 * 100 | round / 100;
  (.results[0].median) as $n | (.results[1].median) as $v | (.results[2].median) as $ve |
  ($c[0].results[0].median) as $cold |
  "nodeprep selftest (dgx-h200, lavapipe stand-in, dispatch verified): median \($n | ms) ms",
  "vulkaninfo --summary:                       median \($v | ms) ms",
  "vulkaninfo --summary; eglinfo -B:           median \($ve | ms) ms",
  "ratio to vulkaninfo alone:      \($n / $v * 100 | round / 100)x (target <= 1.0x)",
  "ratio to vulkaninfo + eglinfo:  \($n / $ve * 100 | round / 100)x (target <= 0.6x)",
  "nodeprep selftest, shader cache emptied before each run: median \($cold | ms) ms (\($cold / $v * 100 | round / 100)x vulkaninfo)"' "$out/selftest.json"
