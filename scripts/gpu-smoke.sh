#!/usr/bin/env bash
# gpu-smoke.sh — on a real GPU host, run `nodeprep inspect` and `nodeprep
# selftest` with the real driver and keep what they said. Builds nothing.
#
#   scripts/gpu-smoke.sh OUTDIR [NODEPREP]
#
# NODEPREP (argument or environment; default ./bin/nodeprep) is the binary
# to run. VK_DRIVER_FILES, VK_ICD_FILENAMES, __EGL_VENDOR_LIBRARY_FILENAMES,
# __EGL_VENDOR_LIBRARY_DIRS and LD_LIBRARY_PATH pass through unchanged when
# set, so the real driver is found the way the host finds it (on NixOS, e.g.
# VK_DRIVER_FILES=/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json
# LD_LIBRARY_PATH=/run/opengl-driver/lib). Extra selftest flags go in
# SELFTEST_ARGS (e.g. "--vulkan-loader /nix/store/...-vulkan-loader/lib/libvulkan.so.1").
# The self-test runs the CUDA probe too (libcuda.so.1 by the dynamic
# linker's search, or CUDA_LIB, e.g. /run/opengl-driver/lib/libcuda.so.1,
# passed as --cuda-lib): cuInit, every GPU's context, memory round trip
# and PTX kernel.
#
# OUTDIR gets inspect.json, inspect.stderr, inspect.exit, selftest.json,
# selftest.stderr, selftest.exit, cuda.json (the self-test's CUDA report
# and per-GPU matches, when jq is installed) and env.txt (the driver
# variables used, and the fabric manager's state from nvidia-smi).
# The script exits 0 when both commands ran (whatever their verdict) and
# prints the two exit codes; a missing binary exits 2.
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTDIR [NODEPREP]" >&2
  exit 2
fi
out=$1
bin=${2:-${NODEPREP:-./bin/nodeprep}}
if [ ! -x "$bin" ]; then
  echo "gpu-smoke: $bin is not an executable nodeprep (build it elsewhere, or pass its path)" >&2
  exit 2
fi
mkdir -p "$out" || exit 2

{
  echo "nodeprep=$bin"
  "$bin" version 2>&1 | sed 's/^/version: /'
  for v in VK_DRIVER_FILES VK_ICD_FILENAMES VK_ADD_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES __EGL_VENDOR_LIBRARY_DIRS LD_LIBRARY_PATH XDG_DATA_DIRS; do
    if [ -n "${!v:-}" ]; then echo "$v=${!v}"; else echo "$v (unset)"; fi
  done
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | sed 's/^/nvidia-smi: /'
  # The fabric manager's registration, which CUDA (not NVML) waits for.
  command -v nvidia-smi >/dev/null && nvidia-smi -q 2>&1 | grep -A2 Fabric | sed 's/^/nvidia-smi fabric: /'
  ls -l /dev/nvidia-uvm /dev/nvidia-uvm-tools 2>&1 | sed 's/^/uvm: /'
} >"$out/env.txt"

run() { # name, then the command
  local name=$1; shift
  "$@" >"$out/$name.json" 2>"$out/$name.stderr"
  local rc=$?
  echo "$rc" >"$out/$name.exit"
  printf '%-9s exit %s  (%s)\n' "$name" "$rc" "$out/$name.json"
}

run inspect "$bin" -o json inspect
cuda_args=()
if [ -n "${CUDA_LIB:-}" ]; then cuda_args=(--cuda-lib "$CUDA_LIB"); fi
# shellcheck disable=SC2086 # SELFTEST_ARGS is a list of flags
run selftest "$bin" -o json selftest "${cuda_args[@]}" ${SELFTEST_ARGS:-}
if command -v jq >/dev/null; then
  jq '{cuda, matches: [.matches[] | {gpu, uuid, cuda, cudaDevice}]}' "$out/selftest.json" >"$out/cuda.json" 2>/dev/null &&
    jq -r '.cuda // empty | "cuda      \(.stage // "ok") cuInit \(.initMs) ms, devices \(.devicesMs) ms: \([.devices[] | select(.memory and .kernel)] | length)/\(.count) verified"' "$out/selftest.json"
fi
exit 0
