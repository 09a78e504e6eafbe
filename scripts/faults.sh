#!/usr/bin/env bash
# faults.sh [--update FILE] — runs nodeprep against fake drivers that hang,
# abort, segfault, flood stderr (1 GiB), start a daemon in its own session,
# or complain, and prints the fault table: fault → exit code, reason kind,
# time to fail, nodeprep's own peak RSS (VmHWM of the parent process, not
# of the probe children), and processes left behind. The fakes are the C
# sources the Go fault tests build (nodeprep/drivertest/csrc). With
# --update FILE the table replaces the lines between
# <!-- faults:begin --> and <!-- faults:end --> in FILE.
# Needs: gcc, jq, Mesa's lavapipe and EGL (`make deps`), bin/nodeprep.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NODEPREP:-bin/nodeprep}
[ -x "$bin" ] || { echo "faults: $bin not built (make build)" >&2; exit 1; }
command -v jq >/dev/null || { echo "faults: jq not found (apt-get install jq)" >&2; exit 1; }
lvp=${VK_DRIVER_FILES:-$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -n1)}
mesa=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/share/glvnd/egl_vendor.d/50_mesa.json}
unset VK_DRIVER_FILES VK_ICD_FILENAMES __EGL_VENDOR_LIBRARY_FILENAMES
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root"
src=nodeprep/drivertest/csrc
cc=${CC:-gcc}
for k in icd egl nvml; do "$cc" -shared -fPIC -O1 -o "$work/libfake_$k.so" "$src/$k.c"; done
cp "$work/libfake_nvml.so" "$work/libnvidia-ml.so.1"
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$work/libfake_icd.so" >"$work/icd.json"
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s"}}\n' "$work/libfake_egl.so" >"$work/egl.json"

# run NAME SIGTERM_AFTER_S ENV... -- ARGS...: runs nodeprep, polls its peak
# RSS, optionally sends SIGTERM, and prints one table row.
run() {
  local name=$1 term=$2; shift 2
  local envs=() mark="FAKE_MARK=$RANDOM$RANDOM"
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local out="$work/out" err="$work/err" start end pid hwm=0 h code
  start=$(date +%s%N)
  env "${envs[@]}" "$mark" "$bin" --root "$work/root" "$@" >"$out" 2>"$err" &
  pid=$!
  local sent=0
  while kill -0 "$pid" 2>/dev/null; do
    h=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
    if [ "$term" != 0 ] && [ $sent = 0 ] && [ $(( ($(date +%s%N) - start) / 1000000 )) -ge $((term * 1000)) ]; then
      kill -TERM "$pid"; sent=$(date +%s%N)
    fi
    sleep 0.005
  done
  wait "$pid" && code=0 || code=$?
  end=$(date +%s%N)
  local took=$(( (end - start) / 1000000 ))
  took="$took ms"
  [ $sent != 0 ] && took="$(( (end - sent) / 1000000 )) ms after SIGTERM"
  local kind sig
  if [ -s "$out" ] && jq -e '.reasons' "$out" >/dev/null 2>&1; then
    kind=$(jq -r '[.reasons[]?.kind] | join(", ")' "$out")
    sig=$(jq -r '.reasons[0].message' "$out" | grep -o 'SIG[A-Z]* in [^ ;]*' | head -n1 || true)
    [ -n "$sig" ] && kind="$kind: ${sig%% in *} in ${sig##*/}"
    jq -r '[.warnings[]?] | join("; ")' "$out" | grep -q "left .* process" && kind="$kind; daemon killed"
  else
    kind=$(grep -o 'NVML did not answer in time\|NVML crashed\|cancelled while reading NVML' "$err" | head -n1 || true)
    sig=$(grep -o 'SIG[A-Z]* in [^ ;]*' "$err" | head -n1 || true)
    [ -n "$sig" ] && kind="$kind: ${sig%% in *} in ${sig##*/}"
    if [ -z "$kind" ] && [ "$code" = 0 ]; then
      kind="inventory: $(jq -r '.gpus | length' "$out") GPU, brand/PCI/memory absent"
    fi
  fi
  local left
  left=$(grep -l -a "$mark" /proc/[0-9]*/environ 2>/dev/null | wc -l || true)
  printf '| %s | %s | %s | %s | %s MiB | %s |\n' "$name" "$code" "${kind//$work\//}" "$took" "$((hwm / 1024))" "$left"
}

nvml=(inspect -o json --nvml-lib "$work/libnvidia-ml.so.1" --nvml-timeout 2s)
st=(selftest -o json --simulate dgx-h200 --allow-cpu-adapter --timeout 5s)
table() {
  echo "| fault | exit | reason kind | time to fail | nodeprep peak RSS | leftovers |"
  echo "|---|---|---|---|---|---|"
  run "NVML: nvmlInit_v2 hangs (--nvml-timeout 2s)" 0 FAKE_FAULT=hang FAKE_NVML_AT=init -- "${nvml[@]}"
  run "NVML: nvmlDeviceGetName hangs" 0 FAKE_FAULT=hang FAKE_NVML_AT=query -- "${nvml[@]}"
  run "NVML: nvmlInit_v2 hangs, SIGTERM at 1 s" 1 FAKE_FAULT=hang FAKE_NVML_AT=init -- inspect --nvml-lib "$work/libnvidia-ml.so.1" --nvml-timeout 1m
  run "NVML: nvmlInit_v2 aborts" 0 FAKE_FAULT=abort FAKE_NVML_AT=init -- "${nvml[@]}"
  run "NVML: nvmlDeviceGetName segfaults" 0 FAKE_FAULT=segv FAKE_NVML_AT=query -- "${nvml[@]}"
  run "NVML: lacks brand, PCI, memory… symbols" 0 -- "${nvml[@]}"
  for f in hang abort segv flood daemon message; do
    run "Vulkan ICD: $f" 0 FAKE_FAULT=$f VK_DRIVER_FILES="$work/icd.json" __EGL_VENDOR_LIBRARY_FILENAMES="$mesa" -- "${st[@]}"
  done
  run "Vulkan ICD: hang, SIGTERM at 1 s" 1 FAKE_FAULT=hang VK_DRIVER_FILES="$work/icd.json" __EGL_VENDOR_LIBRARY_FILENAMES="$mesa" -- selftest -o json --simulate dgx-h200 --allow-cpu-adapter --timeout 1m
  for f in hang abort segv flood daemon message; do
    run "EGL vendor: $f" 0 FAKE_FAULT=$f VK_DRIVER_FILES="$lvp" __EGL_VENDOR_LIBRARY_FILENAMES="$work/egl.json" -- "${st[@]}"
  done
}

if [ "${1:-}" = --update ]; then
  file=$2
  table >"$work/table"
  cat "$work/table"
  awk -v t="$work/table" '
    /<!-- faults:begin -->/ { print; while ((getline l < t) > 0) print l; skip = 1; next }
    /<!-- faults:end -->/ { skip = 0 }
    !skip' "$file" >"$work/doc" && cat "$work/doc" >"$file"
else
  table
fi
