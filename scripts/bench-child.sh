#!/usr/bin/env bash
# The lean child (docs/faults.md, "A lean child"): nodeprep-probe against a
# re-exec of nodeprep for the driver-calling children.
#   1. package init (GODEBUG=inittrace=1): inits, init clock, allocations;
#   2. child start alone (`__probe` without a request: start, init, exit 2)
#      and its peak RSS;
#   3. the whole `selftest --simulate dgx-h200 --allow-cpu-adapter` on
#      lavapipe with nodeprep-probe beside nodeprep, and with a copy of
#      nodeprep alone (the re-exec fallback), alternating; medians.
# Build first (`make build`); RUNS sets the count.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/nodeprep probe=bin/nodeprep-probe
runs=${RUNS:-40}
out=${BENCH_OUT:-.bench}
mkdir -p "$out"
[ -x "$bin" ] && [ -x "$probe" ] || { echo "bench-child: $bin and $probe not built (make build)" >&2; exit 1; }
command -v hyperfine >/dev/null && command -v jq >/dev/null || { echo "bench-child: hyperfine and jq needed (make deps-bench)" >&2; exit 1; }
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json | head -n1)}
export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/share/glvnd/egl_vendor.d/50_mesa.json}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cp "$bin" "$work/nodeprep"   # alone: no nodeprep-probe beside it

for b in "$bin" "$probe"; do
  # exit 2 (no request) after the inits: the status is not the point.
  { GODEBUG=inittrace=1 "$b" __probe 2>&1 || true; } | awk -v b="$(basename "$b")" '/^init / {n++; ms+=$5; a+=$(NF-1)}
    END {printf "inittrace %s: %d package inits, %.2f ms init clock, %d allocs\n", b, n, ms, a}'
done
hyperfine -N -i --warmup 10 --runs $((runs * 5)) --export-json "$out/child-start.json" \
  -n "nodeprep __probe" "$bin __probe" -n "nodeprep-probe __probe" "$probe __probe" >/dev/null 2>&1
jq -r '.results[] | "child start, \(.command): median \(.median * 1000 | . * 100 | round / 100) ms"' "$out/child-start.json"
for b in "$bin" "$probe"; do
  /usr/bin/time -f "child start, $(basename "$b") __probe: peak RSS %M KiB" "$b" __probe 2>&1 >/dev/null | tail -n1 || true
done

root=$(mktemp -d -p "$work")
st="--root $root -q selftest --simulate dgx-h200 --allow-cpu-adapter"
rm -f "$out"/child-round-*.json
for i in $(seq $(( (runs + 1) / 2 ))); do
  hyperfine -N --warmup 1 --runs 2 --export-json "$out/child-round-$i.json" \
    -n "selftest, nodeprep-probe beside" "$bin $st" -n "selftest, nodeprep alone (re-exec)" "$work/nodeprep $st" >/dev/null 2>&1
done
jq -rs '[.[].results] | transpose | .[] | {c: .[0].command, t: (map(.times) | add | sort)}
  | "\(.c): median \(.t[(.t | length) / 2 | floor] * 1000 | . * 10 | round / 10) ms"' "$out"/child-round-*.json
