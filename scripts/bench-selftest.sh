#!/usr/bin/env bash
# Times the whole `nodeprep selftest --simulate dgx-h200 --allow-cpu-adapter`
# process (parent; the Vulkan instance and compute dispatch, then the EGL
# context, in one child, and the CUDA probe in another) on Mesa's
# lavapipe and Mesa EGL against these comparators, in one alternating
# hyperfine run:
#   - `vulkaninfo --summary` alone            (target: nodeprep <= 1.0x)
#   - `vulkaninfo --summary; eglinfo -B`      (target: nodeprep <= 0.6x)
#   - the wgpu probe under Deno               (target: nodeprep <= 0.7x)
#     (testdata/wgpu-oracle/probe.js on wgpu's Vulkan backend: adapter,
#     device, a verified dispatch; Deno from scripts/build-tools.sh deno)
# the same two APIs without a dispatch, and real wgpu, all alternating (see below).
# Medians are reported. A cold variant empties nodeprep's shader cache
# (under --root, where nodeprep keeps it) before each of its runs, as at
# boot (/run is tmpfs).
# Build first (`make build`); NODEPREP overrides the binary (nodeprep-probe
# must sit beside it), RUNS the count.
# Optional comparators, in the same alternating run:
#   BASELINE=/path/to/other/nodeprep   another build (nodeprep-probe beside
#                                      it), e.g. main's, for before/after
#   DENO_PROBE_CMD='deno run ... probe.js'  the Deno (wgpu) WebGPU probe,
#                                      target: nodeprep <= 0.7x; see
#                                      deno_probe_command below
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

# Two references without the nodeprep parent, for the floor of this
# design (docs/faults.md, "Self-test speed"): the two probe children
# nodeprep starts, with the same requests and environment (the malloc
# tunables of nodeprep/selftest/run.go included), started in parallel by a
# shell ("children alone": the Vulkan and EGL probes in turn in one, the
# CUDA probe in the other, which on a host without libcuda.so.1 ends at its
# dlopen); and the Vulkan-and-EGL child alone ("one child").
probe=$(dirname "$bin")/nodeprep-probe
[ -x "$probe" ] || { echo "bench-selftest: $probe not built (make build)" >&2; exit 1; }
tunables=$(sed -n 's/^const mallocTunables = "\(.*\)"$/\1/p' nodeprep/selftest/run.go)
[ -n "$tunables" ] || { echo "bench-selftest: no mallocTunables in nodeprep/selftest/run.go" >&2; exit 1; }
vkreq=$(jq -cn --arg icd "$icd" '{api: "vulkan", library: "libvulkan.so.1", fenceTimeoutMs: 22500, icdPaths: [$icd]}')
eglreq='{"api":"egl","library":"libEGL.so.1"}'
cudareq='{"api":"cuda","library":"libcuda.so.1"}'
childenv="MESA_SHADER_CACHE_DIR=$cache __GL_SHADER_DISK_CACHE_PATH=$cache VK_LOADER_DEBUG=error,warn GLIBC_TUNABLES=$tunables"
cat >"$root/children.sh" <<EOS
#!/bin/sh
exec 3>/dev/null >/dev/null 2>&1
env $childenv $probe __probe --report-pipe '$vkreq' '$eglreq' &
env $childenv $probe __probe --report-pipe '$cudareq' &
wait
EOS
cat >"$root/onechild.sh" <<EOS
#!/bin/sh
exec 3>/dev/null >/dev/null 2>&1
exec env $childenv $probe __probe --report-pipe '$vkreq' '$eglreq'
EOS
chmod +x "$root/children.sh" "$root/onechild.sh"

# hyperfine runs one command's runs back to back; on a shared machine the
# load drifts between them. So the run alternates: ROUNDS rounds of one
# hyperfine call timing each command twice (-N: no shell; the pair runs
# under sh -c, which it needs anyway), and the medians are taken over
# every round's times.
extra=()
if [ -n "${BASELINE:-}" ]; then
  [ -x "$BASELINE" ] || { echo "bench-selftest: BASELINE $BASELINE is not executable" >&2; exit 1; }
  baseline=("$BASELINE" --root "$root" -q selftest --simulate dgx-h200 --allow-cpu-adapter)
  "${baseline[@]}" >/dev/null || { echo "bench-selftest: the baseline's self-test fails" >&2; exit 1; }
  extra+=(-n "baseline nodeprep selftest" "${baseline[*]}")
fi
# deno_probe: sets deno_cmd (the wgpu probe's hyperfine arguments, empty
# when Deno cannot be installed: the comparison is then left out with a
# note) and exports what the probe reads: wgpu's Vulkan backend only, a
# private Deno cache.
deno_probe() {
  deno_cmd=()
  local dir
  if ! dir=$(scripts/build-tools.sh deno 2>"$root/deno.err"); then
    echo "bench-selftest: no Deno (scripts/build-tools.sh deno: $(tail -n1 "$root/deno.err")): the wgpu comparison is left out" >&2
    return 0
  fi
  export DENO_WEBGPU_BACKEND=vulkan DENO_DIR=$root/deno-dir
  local probe=(./testdata/wgpu-oracle/probe.js)
  local run=("$dir/deno" run --quiet --no-config --no-lock --allow-env=DENO_WEBGPU_BACKEND "${probe[@]}")
  "${run[@]}" 2>/dev/null | jq -e '.stage == ""' >/dev/null || { echo "bench-selftest: the wgpu probe fails on lavapipe:" >&2; "${run[@]}" >&2; exit 1; }
  deno_cmd=(-n "wgpu probe (Deno)" "${run[*]}")
}
deno_probe
extra+=("${deno_cmd[@]}")

rounds=$(( (runs + 1) / 2 ))
pair="vulkaninfo --summary >/dev/null; $eglinfo -B >/dev/null 2>&1; true"
rm -f "$out"/round-*.json "$out"/cold-*.json
for i in $(seq "$rounds"); do
  hyperfine -N --warmup 1 --runs 2 --export-json "$out/round-$i.json" \
    -n "nodeprep selftest" "${selftest[*]}" \
    -n "vulkaninfo --summary" "vulkaninfo --summary" \
    -n "vulkaninfo --summary; eglinfo -B" "sh -c '$pair'" \
    -n "the two probe children alone" "$root/children.sh" \
    -n "the Vulkan and EGL child alone" "$root/onechild.sh" "${extra[@]}" >/dev/null 2>&1
  # Cold: the cache emptied before the run (hyperfine's --prepare), as at
  # boot (/run is tmpfs).
  hyperfine -N --runs 2 --export-json "$out/cold-$i.json" --prepare "rm -rf '$cache'" \
    -n "nodeprep selftest, cold" "${selftest[*]}" >/dev/null 2>&1
done
jq -s '[.[].results] | transpose | map({command: .[0].command, times: (map(.times) | add)})' "$out"/round-*.json >"$out/selftest.json"
jq -s '[.[].results[0].times] | add' "$out"/cold-*.json >"$out/selftest-cold.json"
jq -r --slurpfile c "$out/selftest-cold.json" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def ms: . * 1000 * 100 | round / 100;
  (.[0].times | median) as $n | (.[1].times | median) as $v | (.[2].times | median) as $ve |
  (.[3].times | median) as $floor | (.[4].times | median) as $one |
  ($c[0] | median) as $cold |
  "medians over \(.[0].times | length) alternating runs each:",
  "nodeprep selftest (dgx-h200, lavapipe stand-in, dispatch verified): \($n | ms) ms",
  "vulkaninfo --summary:                                               \($v | ms) ms",
  "vulkaninfo --summary; eglinfo -B:                                   \($ve | ms) ms",
  "ratio to vulkaninfo alone:      \($n / $v * 100 | round / 100)x (target <= 1.0x)",
  "ratio to vulkaninfo + eglinfo:  \($n / $ve * 100 | round / 100)x (target <= 0.6x)",
  "nodeprep selftest, shader cache emptied before each run: \($cold | ms) ms (\($cold / $v * 100 | round / 100)x vulkaninfo)",
  "the floor, without the nodeprep parent:",
  "  the two probe children alone, in parallel:  \($floor | ms) ms (\($floor / $v * 100 | round / 100)x vulkaninfo, \($floor / $ve * 100 | round / 100)x vulkaninfo + eglinfo)",
  "  the Vulkan and EGL child alone:            \($one | ms) ms (\($one / $v * 100 | round / 100)x vulkaninfo, \($one / $ve * 100 | round / 100)x vulkaninfo + eglinfo)",
  (.[5:][] | (.times | median) as $x |
    if .command == "wgpu probe (Deno)" then
      "wgpu probe under Deno (Vulkan backend, dispatch verified): \($x | ms) ms; nodeprep / deno: \($n / $x * 100 | round / 100)x (target <= 0.7x)"
    else
      "\(.command): \($x | ms) ms (\($x / $v * 100 | round / 100)x vulkaninfo); nodeprep / baseline: \($n / $x * 100 | round / 100)x"
    end)' "$out/selftest.json"
