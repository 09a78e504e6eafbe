#!/usr/bin/env bash
# The huge spec (issue 14): `nodeprep cdi patch` on a 10,000-device, ≈ 53 MiB
# spec, whole process: median time (hyperfine) and peak RSS, as a multiple of
# the file's size. Target: peak RSS under 4x the file. The spec is made by
# the cdi package's generator (hugeSpec in cdi/hugespec_test.go), never
# checked in.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NODEPREP:-bin/nodeprep}
out=${BENCH_OUT:-.bench}
mkdir -p "$out"
work=$(mktemp -d -p "${BENCH_TMP:-/dev/shm}"); trap 'rm -rf "$work"' EXIT
cp -a testdata/hosts/nixos-h200 "$work/host"
spec="$work/host/run/cdi/nvidia-container-toolkit.json"
go test ./cdi -count=1 -run '^TestHugeSpecGenerator$' -args -hugespec-out="$work/huge.json" >/dev/null
size=$(stat -c %s "$work/huge.json")

hyperfine -N --warmup 1 --runs ${RUNS_HUGE:-5} --export-json "$out/cdi-patch-huge.json" \
  --prepare "cp $work/huge.json $spec" \
  -n "nodeprep cdi patch (10,000 devices)" "$bin --root $work/host cdi patch -q" >/dev/null

cp "$work/huge.json" "$spec"
rss=$( { /usr/bin/time -v "$bin" --root "$work/host" cdi patch -q >/dev/null; } 2>&1 | awk -F': ' '/Maximum resident/ {print $2}')
jq -r --arg rss "$rss" --arg size "$size" '
  (.results[0].median) as $t | ($rss | tonumber) as $kib | ($size | tonumber) as $b |
  "cdi patch, 10,000-device spec (\($b / 1048576 | . * 10 | round / 10) MiB): median \($t | . * 100 | round / 100) s",
  "  peak RSS \($kib / 1024 | . * 10 | round / 10) MiB = \($kib * 1024 / $b | . * 100 | round / 100)x the file (target < 4x)"' "$out/cdi-patch-huge.json"
