#!/usr/bin/env bash
# faults.sh [--update FILE] — runs nodeprep against fake drivers that hang,
# abort, segfault, flood stderr (1 GiB), start a daemon in its own session,
# or complain, and prints the fault table: fault → exit code, reason kind,
# time to fail, nodeprep's own peak RSS (VmHWM of the parent process, not
# of the probe children), and processes left behind. The fakes are the C
# sources the Go fault tests build (nodeprep/testenv/fakedriver/csrc). With
# --update FILE the table replaces the lines between
# <!-- faults:begin --> and <!-- faults:end --> in FILE, and the host
# fault table (hosttable: a FIFO at the lock, links planted in the shader
# cache, full file systems, two outputs at one path, derived labels, NVML
# UUIDs and reports, huge sparse files; --host prints only it) those
# between <!-- hostfaults:begin --> and <!-- hostfaults:end --> (--update-host FILE:
# only that one).
# Needs: gcc, jq, Mesa's lavapipe and EGL (`make deps`), bin/nodeprep.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${NODEPREP:-bin/nodeprep}
[ -x "$bin" ] || { echo "faults: $bin not built (make build)" >&2; exit 1; }
command -v jq >/dev/null || { echo "faults: jq not found (apt-get install jq)" >&2; exit 1; }
lvp=${VK_DRIVER_FILES:-$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json 2>/dev/null | head -n1)}
mesa=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/share/glvnd/egl_vendor.d/50_mesa.json}
unset VK_DRIVER_FILES VK_ICD_FILENAMES __EGL_VENDOR_LIBRARY_FILENAMES
work=$(mktemp -d)
cleanup() {
  for m in "$work/hroot/run/nodeprep" "$work/hroot/var/lib/node_exporter"; do
    mountpoint -q "$m" 2>/dev/null && umount "$m"
  done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root"
src=nodeprep/testenv/fakedriver/csrc
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

# hrun NAME PREPARE ENV... -- ARGS...: runs nodeprep on a fresh copy of
# the nixos-h200 host tree that the shell function PREPARE (given the
# root) has changed, and prints one row of the host-fault table: exit
# code, the first line of the error or the verdict, wall time, nodeprep's
# peak RSS, and the files written under $work but outside the root
# (planted links point into $work/outside).
hrun() {
  local name=$1 prep=$2; shift 2
  local envs=() root="$work/hroot" out="$work/out" err="$work/err" pid hwm=0 h code start end
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  mountpoint -q "$root/run/nodeprep" 2>/dev/null && umount "$root/run/nodeprep"
  mountpoint -q "$root/var/lib/node_exporter" 2>/dev/null && umount "$root/var/lib/node_exporter"
  rm -rf "$root" "$work/outside"; mkdir -p "$work/outside"
  cp -a testdata/hosts/nixos-h200 "$root"
  "$prep" "$root"
  touch "$work/mark"; sleep 0.01
  start=$(date +%s%N)
  env "${envs[@]}" "$bin" --root "$root" "$@" >"$out" 2>"$err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    h=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$h" ] && [ "$h" -gt "$hwm" ] && hwm=$h
    sleep 0.005
  done
  wait "$pid" && code=0 || code=$?
  end=$(date +%s%N)
  local why=""
  # PICK (a grep pattern) picks the line that says it, for output with
  # no verdict line (a lint list, an inventory, the self-test's JSON).
  [ -n "${PICK:-}" ] && why=$(cat "$out" "$err" | grep -m1 -o -- "$PICK.*" || true)
  [ -z "$why" ] && why=$(jq -r '.verdict // empty' "$out" 2>/dev/null || true)
  [ -z "$why" ] && why=$(grep -m1 -o 'error: .*' "$err" | cut -c8- || true)
  [ -z "$why" ] && why=$(grep -m1 . "$out" || true)
  why=${why//$root/<root>}; why=${why//$work/<work>}; why=${why//|/∣}
  [ ${#why} -gt 220 ] && why="${why:0:220}…"
  local outside
  outside=$(find "$work" -newer "$work/mark" -type f -not -path "$root/*" -not -path "$work/out" -not -path "$work/err" | wc -l)
  printf '| %s | %s | %s | %s ms | %s MiB | %s |\n' "$name" "$code" "$why" "$(( (end - start) / 1000000 ))" "$((hwm / 1024))" "$outside"
}

# The host faults' preparations.
p_none() { :; }
p_lockfifo() { mkdir -p "$1/run/nodeprep"; mkfifo "$1/run/nodeprep/lock"; }
p_cachelink() { mkdir -p -m 0700 "$1/run/nodeprep/shader-cache"; chmod 0755 "$1/run/nodeprep"; ln -s "$work/outside" "$1/run/nodeprep/shader-cache/mesa_shader_cache"; }
p_full() { mkdir -p "$1/$2"; mount -t tmpfs -o size=64k tmpfs "$1/$2"; dd if=/dev/zero of="$1/$2/.filler" bs=4k 2>/dev/null || true; }
p_fullmetrics() { p_full "$1" var/lib/node_exporter; }
p_fullcache() { p_full "$1" run/nodeprep; mkdir -m 0700 "$1/run/nodeprep/shader-cache"; }
p_notutf8() { sed -i '0,/"env": \[/s//"env": [\n      "NODEPREP_BAD=\xff\xfe\xc3",/' "$1/run/cdi/nvidia-container-toolkit.json"; }
p_bigconfig() { mkdir -p "$1/etc/nodeprep"; truncate -s 1G "$1/etc/nodeprep/config.yaml"; }
p_bigstatus() { mkdir -p "$1/run/nodeprep"; truncate -s 1G "$1/run/nodeprep/status.json"; }
p_bigicd() { local f; f=$1$(readlink "$1/run/opengl-driver")/share/vulkan/icd.d/nvidia_icd.x86_64.json; rm -f "$f"; truncate -s 1G "$f"; }
p_bigcontainerd() { mkdir -p "$1/var/lib/rancher/k3s/agent/etc/containerd"; truncate -s 1G "$1/var/lib/rancher/k3s/agent/etc/containerd/config.toml"; }
p_dropinfile() { mkdir -p "$1/etc/rancher/k3s"; echo x >"$1/etc/rancher/k3s/config.yaml.d"; }
p_deepcontainerd() { mkdir -p "$1/var/lib/rancher/k3s/agent/etc/containerd"; { printf 'version = 3\na = '; head -c 2000000 /dev/zero | tr '\0' '['; } >"$1/var/lib/rancher/k3s/agent/etc/containerd/config.toml"; }
p_dottedcontainerd() { mkdir -p "$1/var/lib/rancher/k3s/agent/etc/containerd"; { printf 'version = 3\nx'; for _ in $(seq 20000); do printf .a; done; echo ' = 1'; } >"$1/var/lib/rancher/k3s/agent/etc/containerd/config.toml"; }
p_fifocontainerd() { "$bin" --root "$1" cdi patch >/dev/null; p_deepcontainerd "$1"; echo 'version = 3' >"$1/var/lib/rancher/k3s/agent/etc/containerd/config.toml"; mkdir -p "$1/var/lib/rancher/k3s/data/current/bin"; mkfifo "$1/var/lib/rancher/k3s/data/current/bin/containerd"; }

hosttable() {
  local mesaenv=(VK_DRIVER_FILES="$lvp" __EGL_VENDOR_LIBRARY_FILENAMES="$mesa")
  local up=(up -o json --simulate dgx-h200 --allow-cpu-adapter)
  echo "| fault | exit | reason | time | nodeprep peak RSS | files written outside the root |"
  echo "|---|---|---|---|---|---|"
  hrun "FIFO at /run/nodeprep/lock (cdi patch --wait 3s)" p_lockfifo -- cdi patch --wait 3s
  hrun "mesa_shader_cache -> outside the root (up)" p_cachelink "${mesaenv[@]}" -- "${up[@]}"
  PICK='self-test passed' hrun "mesa_shader_cache -> outside the root (selftest: cache emptied)" p_cachelink "${mesaenv[@]}" -- selftest --simulate dgx-h200 --allow-cpu-adapter
  if [ "$(id -u)" = 0 ]; then
    hrun "metrics file system full (up --metrics-file)" p_fullmetrics "${mesaenv[@]}" -- "${up[@]}" --metrics-file /var/lib/node_exporter/nodeprep.prom
    hrun "Vulkan ICD maps its shader cache on a full /run (sigbus)" p_fullcache FAKE_FAULT=sigbus VK_DRIVER_FILES="$work/icd.json" __EGL_VENDOR_LIBRARY_FILENAMES="$mesa" -- selftest -o json --simulate dgx-h200 --allow-cpu-adapter
  fi
  hrun "--metrics-file equal to the status file" p_none "${mesaenv[@]}" -- "${up[@]}" --metrics-file /run/nodeprep/status.json
  hrun "--status-file /run/nodeprep/ (a directory)" p_none "${mesaenv[@]}" -- "${up[@]}" --status-file /run/nodeprep/
  hrun "--label nvidia.com/gpu.count=99" p_none "${mesaenv[@]}" -- "${up[@]}" --label nvidia.com/gpu.count=99
  hrun "--label nodeprep.dev/selftest=passed, policy taint" p_none "${mesaenv[@]}" -- "${up[@]}" --on-selftest-failure taint --label nodeprep.dev/selftest=passed
  PICK='NVML reported no UUID' hrun "NVML: success with an empty UUID (inspect)" p_none FAKE_NVML_UUID= -- inspect -o json --nvml-lib "$work/libnvidia-ml.so.1"
  hrun "NVML: 30,000 GPUs, a report over 8 MiB (inspect)" p_none FAKE_NVML_COUNT=30000 -- inspect --nvml-lib "$work/libnvidia-ml.so.1" --nvml-timeout 1m
  hrun "cdi patch: containerEdits.env not UTF-8" p_notutf8 -- cdi patch
  hrun "1 GiB sparse config.yaml (cdi check)" p_bigconfig -- cdi check --simulate dgx-h200
  PICK='the GPUs the node booted with' hrun "1 GiB sparse status.json (health)" p_bigstatus "${mesaenv[@]}" -- health --simulate dgx-h200 --allow-cpu-adapter
  PICK='bad-manifest' hrun "1 GiB sparse ICD manifest (cdi check)" p_bigicd -- cdi check --simulate dgx-h200
  PICK='containerd-bad-config' hrun "1 GiB sparse containerd config.toml (cdi check)" p_bigcontainerd -- cdi check --simulate dgx-h200
  hrun "config.yaml.d is a regular file (join)" p_dropinfile -- join --simulate dgx-h200
  PICK='containerd-bad-config' hrun "containerd config.toml nested 2,000,000 arrays deep (cdi check)" p_deepcontainerd -- cdi check --simulate dgx-h200
  PICK='containerd-bad-config' hrun "containerd config.toml with a 20,000-part dotted key, 40 KB (cdi check)" p_dottedcontainerd -- cdi check --simulate dgx-h200
  PICK='/var/run/cdi/nvidia-container-toolkit.json: ' hrun "FIFO where k3s keeps containerd's binary (patched spec; cdi check)" p_fifocontainerd -- cdi check --simulate dgx-h200
  mountpoint -q "$work/hroot/run/nodeprep" 2>/dev/null && umount "$work/hroot/run/nodeprep"
  mountpoint -q "$work/hroot/var/lib/node_exporter" 2>/dev/null && umount "$work/hroot/var/lib/node_exporter"
  return 0
}

# replace BEGIN END FILE TABLE: the lines between the markers become TABLE.
replace() {
  awk -v t="$4" -v b="$1" -v e="$2" '
    index($0, b) { print; while ((getline l < t) > 0) print l; skip = 1; next }
    index($0, e) { skip = 0 }
    !skip' "$3" >"$work/doc" && cat "$work/doc" >"$3"
}

if [ "${1:-}" = --update ]; then
  file=$2
  table >"$work/table"
  cat "$work/table"
  replace '<!-- faults:begin -->' '<!-- faults:end -->' "$file" "$work/table"
  hosttable >"$work/htable"
  cat "$work/htable"
  replace '<!-- hostfaults:begin -->' '<!-- hostfaults:end -->' "$file" "$work/htable"
elif [ "${1:-}" = --update-host ]; then
  hosttable >"$work/htable"
  cat "$work/htable"
  replace '<!-- hostfaults:begin -->' '<!-- hostfaults:end -->' "$2" "$work/htable"
elif [ "${1:-}" = --host ]; then
  hosttable
else
  table
  echo
  hosttable
fi
