#!/usr/bin/env bash
# `make bench`: every performance number nodeprep reports, in one run.
#  1. Go benchmarks (in-process): CDI patch (8-GPU and 64-device MIG specs),
#     inventory of the simulated DGX H200, k3s merge, self-test matching.
#  2. Whole `nodeprep cdi patch` process vs the jq pipeline (bench-cdi.sh),
#     and on a generated 10,000-device spec: time and peak RSS
#     (bench-hugespec.sh).
#  3. Whole `nodeprep selftest` process vs `vulkaninfo --summary` and
#     `vulkaninfo --summary; eglinfo -B` on lavapipe, alternating
#     (bench-selftest.sh).
#  4. The `up` demo: whole-process time, peak RSS, and each stage's time.
#  5. The lean child, nodeprep-probe, against a re-exec of nodeprep
#     (bench-child.sh).
#  6. Start-up: `nodeprep version` against hello-world programs
#     (bench-startup.sh).
# Results also land in .bench/ (JSON from hyperfine).
set -euo pipefail
cd "$(dirname "$0")/.."
export NODEPREP=${NODEPREP:-bin/nodeprep}
mkdir -p .bench
icd=$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json | head -1)
egl=/usr/share/glvnd/egl_vendor.d/50_mesa.json
export VK_DRIVER_FILES=$icd __EGL_VENDOR_LIBRARY_FILENAMES=$egl

echo "== Go benchmarks"
go test -run '^$' -bench . -benchmem -count 1 ./cdi ./nodeprep/gpu ./nodeprep/k3s ./nodeprep/selftest 2>/dev/null \
  | grep -E '^(Benchmark|ok|FAIL)' | tee .bench/go.txt

echo; echo "== cdi patch, whole process"
./scripts/bench-cdi.sh

echo; echo "== cdi patch, the 10,000-device spec"
./scripts/bench-hugespec.sh

if [ -x scripts/bench-selftest.sh ]; then
  echo; echo "== selftest, whole process"
  ./scripts/bench-selftest.sh
fi

echo; echo "== up demo, whole process"
work=$(mktemp -d -p /dev/shm); trap 'rm -rf "$work"' EXIT
prep="rm -rf $work/root && cp -a testdata/hosts/nixos-h200 $work/root"
hyperfine -N --warmup 2 --runs ${RUNS:-20} --prepare "bash -c '$prep'" --export-json .bench/up.json \
  "$NODEPREP up --root $work/root --simulate dgx-h200 --allow-cpu-adapter -q -o json" >/dev/null
eval "$prep"
rss=$( { /usr/bin/time -v "$NODEPREP" up --root "$work/root" --simulate dgx-h200 --allow-cpu-adapter -q -o json >"$work/up.json"; } 2>&1 \
  | awk -F': ' '/Maximum resident/ {print $2}')
jq -r --arg rss "$rss" --slurpfile h .bench/up.json '
  "up (first run on a fresh tree): median \($h[0].results[0].median * 1000 | . * 10 | round / 10) ms",
  "  peak RSS: nodeprep \(.peakRSSMiB | . * 10 | round / 10) MiB; with the probe children (Vulkan/EGL driver loaded) \(($rss | tonumber) / 1024 | . * 10 | round / 10) MiB",
  (.stages[] | "  \(.name): \(.durationMs) ms"),
  "  all stages but selftest: \([.stages[] | select(.name != "selftest") | .durationMs] | add | . * 10 | round / 10) ms"' "$work/up.json"

echo; echo "== the probe children: nodeprep-probe vs a re-exec of nodeprep"
./scripts/bench-child.sh

echo; echo "== start-up: nodeprep version vs hello world"
./scripts/bench-startup.sh
