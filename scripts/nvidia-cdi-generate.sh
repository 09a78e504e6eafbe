#!/usr/bin/env bash
# nvidia-cdi-generate.sh TOOLKIT TREE UNIT — prints the CDI spec the real
# nvidia-ctk of tools module TOOLKIT (nvidia-container-toolkit-1.17 or -1.20,
# built by scripts/build-tools.sh) writes on the NixOS host tree TREE, run
# the way NixOS's generator unit runs it
# (nixos/modules/services/hardware/nvidia-container-toolkit in nixpkgs):
#
#   UNIT=old       the older unit: cdi generate --format json --ldconfig-path
#                  <glibc>/bin/ldconfig --library-search-path <nvidia-x11>/lib
#                  --nvidia-ctk-path <toolkit>/bin/nvidia-ctk
#   UNIT=new       the newer unit: --format json --discovery-mode auto
#                  --device-name-strategy index --disable-hook create-symlinks
#                  --ldconfig-path … --library-search-path …
#                  --nvidia-cdi-hook-path <toolkit-tools>/bin/nvidia-cdi-hook,
#                  plus extraArgs --device-name-strategy uuid (UUID names too)
#   UNIT=new-hooks the newer unit with disable-hooks = [ ] (no --disable-hook)
#   UNIT=no-all    the newer unit with --no-all-device added (extraArgs)
#   UNIT=index     the newer unit as NixOS's default runs it, without the
#                  extraArgs: --device-name-strategy index only
#   UNIT=uuid      the newer unit with --device-name-strategy uuid only (an
#                  earlier generation, with extraArgs that replaced it)
#   UNIT=plugin    the device plugin's own spec as the same library writes it
#                  for its vendor and class: --vendor k8s.device-plugin.nvidia.com
#                  --class gpu --device-name-strategy uuid, without the `all`
#                  device (the plugin names single GPUs only)
#   UNIT=dra OUTDIR  the specs NVIDIA's DRA driver's kubelet plugin writes
#                  (draspecs of the toolkit 1.20 tools module: the base spec,
#                  the VFIO spec of a passthrough GPU with IOMMU group 42 and
#                  the spec of claim DRA_CLAIM), written into OUTDIR as the
#                  driver names them; nothing is printed
#
# followed, for the units, by the module's jq mounts step (its default
# hardware.nvidia-container-toolkit.mounts, each added only when its host
# path exists on the host, as additionalMount does).
#
# nvidia-ctk's --driver-root/--dev-root prefix host paths but it still reads
# /sys, /proc and its library locator's paths from the machine, so it runs
# chrooted (needs root) into a throw-away copy of TREE in which:
#   - the device nodes listed in TREE/.devices are made with mknod;
#   - /sys/bus/pci/devices/<bus id>/drm/<card|renderD> mirror the tree's
#     /dev/dri/by-path links (where nvidia-ctk finds a GPU's DRM nodes);
#   - libnvidia-ml.so.<driver version> in the library search path is the fake
#     NVML of the simulated dgx-h200 (nodeprep/testenv/fakedriver/csrc/nvml-dgx-h200.c,
#     built here with cc; NP_COUNT GPUs, the number of /dev/nvidia<N> nodes);
#   - the toolkit's programs replace the stubs at their store paths, and this
#     machine's dynamic loader and libc sit at /lib64 and /.gen/lib.
# The copy is removed on exit. Tree layout it relies on: one
# /nix/store/*-nvidia-x11-* (the driver), one /nix/store/*-glibc-*-bin.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tk=${1:?usage: nvidia-cdi-generate.sh TOOLKIT TREE old|new|new-hooks|no-all|index|uuid|plugin|dra OUTDIR}
tree=$(cd "${2:?tree}" && pwd)
unit=${3:?unit}
[ "$(id -u)" = 0 ] || { echo "nvidia-cdi-generate: needs root (chroot, mknod)" >&2; exit 69; }
ver=$(awk '$1 == "github.com/NVIDIA/nvidia-container-toolkit" {print substr($2, 2)}' "$repo/testdata/tools/$tk/go.mod")
[ -n "$ver" ] || { echo "nvidia-cdi-generate: no toolkit pin in testdata/tools/$tk/go.mod" >&2; exit 2; }
bin=$("$repo/scripts/build-tools.sh" "$tk")

# The store paths of the toolkit (bin/nvidia-ctk) and of its tools output
# (bin/nvidia-cdi-hook), as the tree names them (gen-testhosts.sh).
ctk=$(cd "$tree" && ls -d nix/store/*-nvidia-container-toolkit-"$ver" | head -1)
tools=$(cd "$tree" && ls -d nix/store/*-nvidia-container-toolkit-"$ver"-tools | head -1)
nv=/$(cd "$tree" && ls -d nix/store/*-nvidia-x11-* | head -1)
ldc=/$(cd "$tree" && ls -d nix/store/*-glibc-*-bin | head -1)/bin/ldconfig
[ -n "$ctk" ] && [ -n "$tools" ] || { echo "nvidia-cdi-generate: $tree has no nvidia-container-toolkit-$ver store paths" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/nvidia-cdi-generate.XXXXXX")
trap 'rm -rf "$work"' EXIT
r=$work/root
cp -a "$tree" "$r"
while read -r path type major minor mode; do
  case $path in ''|'#'*) continue ;; esac
  rm -f "$r$path"; mkdir -p "$(dirname "$r$path")"
  mknod -m "$mode" "$r$path" "$type" "$major" "$minor"
done < "$tree/.devices"
if [ -d "$r/dev/dri/by-path" ]; then
  for l in "$r"/dev/dri/by-path/pci-*; do
    n=$(basename "$l"); bus=${n#pci-}; bus=${bus%-*}
    mkdir -p "$r/sys/bus/pci/devices/$bus/drm/$(basename "$(readlink "$l")")"
  done
fi
ngpu=$(awk '$1 ~ /^\/dev\/nvidia[0-9]+$/' "$tree/.devices" | wc -l)
cc -shared -fPIC -O1 -DNP_COUNT="$ngpu" -o "$r$nv/lib/libnvidia-ml.so.$(readlink "$r$nv/lib/libnvidia-ml.so.1" | sed 's/^libnvidia-ml\.so\.//')" \
  "$repo/nodeprep/testenv/fakedriver/csrc/nvml-dgx-h200.c"
install -m 0755 "$bin/nvidia-ctk" "$r/$ctk/bin/nvidia-ctk"
[ -x "$bin/nvidia-cdi-hook" ] && install -m 0755 "$bin/nvidia-cdi-hook" "$r/$tools/bin/nvidia-cdi-hook"
mkdir -p "$r/lib64" "$r/.gen/lib" "$r/tmp" "$r/proc"
cp -L /lib64/ld-linux-x86-64.so.2 "$r/lib64/"
cp -L "$(ldd "$bin/nvidia-ctk" | awk '$1 == "libc.so.6" {print $3}')" "$r/.gen/lib/"
cp -L /usr/bin/test "$r/.gen/test"
if [ -x "$bin/draspecs" ]; then install -m 0755 "$bin/draspecs" "$r/.gen/draspecs"; fi
# A clean environment: nothing of the caller (TMPDIR, ...) leaks into the chroot.
chroot=$(command -v chroot)
inroot() { env -i PATH=/usr/bin:/bin TMPDIR=/tmp LD_LIBRARY_PATH=/.gen/lib "$chroot" "$r" "$@"; }

common=(--format json --ldconfig-path "$ldc" --library-search-path "$nv/lib")
new=(--discovery-mode auto --device-name-strategy index --device-name-strategy uuid
     --nvidia-cdi-hook-path "/$tools/bin/nvidia-cdi-hook")
hook=(--nvidia-cdi-hook-path "/$tools/bin/nvidia-cdi-hook")
case $unit in
  old) args=("${common[@]}" --nvidia-ctk-path "/$ctk/bin/nvidia-ctk") ;;
  new) args=("${common[@]}" "${new[@]}" --disable-hook create-symlinks) ;;
  new-hooks) args=("${common[@]}" "${new[@]}") ;;
  no-all) args=("${common[@]}" "${new[@]}" --disable-hook create-symlinks --no-all-device) ;;
  index|uuid) args=("${common[@]}" --discovery-mode auto --device-name-strategy "$unit" "${hook[@]}" --disable-hook create-symlinks) ;;
  dra)
    out=${4:?nvidia-cdi-generate: dra needs OUTDIR}
    [ -x "$r/.gen/draspecs" ] || { echo "nvidia-cdi-generate: $tk has no draspecs" >&2; exit 2; }
    mkdir -p "$r/.gen/cdi"
    inroot /.gen/draspecs -cdi-root /.gen/cdi "${hook[@]}" -library-search-path "$nv/lib" \
      -claim "${DRA_CLAIM:?nvidia-cdi-generate: dra needs DRA_CLAIM, a claim UID}" -vfio 0:42 2> "$work/log" ||
      { cat "$work/log" >&2; exit 1; }
    mkdir -p "$out"
    cp "$r"/.gen/cdi/*.yaml "$out"/
    exit 0 ;;
  plugin) args=("${common[@]}" --discovery-mode auto --device-name-strategy uuid
                --nvidia-cdi-hook-path "/$tools/bin/nvidia-cdi-hook"
                --vendor k8s.device-plugin.nvidia.com --class gpu) ;;
  *) echo "nvidia-cdi-generate: unknown unit $unit" >&2; exit 2 ;;
esac
inroot "/$ctk/bin/nvidia-ctk" cdi generate "${args[@]}" > "$work/spec.json" 2> "$work/log" ||
  { cat "$work/log" >&2; exit 1; }
if [ "$unit" = plugin ]; then
  jq '.devices |= map(select(.name != "all"))' "$work/spec.json"
  exit 0
fi
# The module's default mounts (driverLink, glibc's lib and lib64, the
# driver's executables, the nvidia-docker 1 directories), in its order.
glibc=/$(cd "$tree" && ls -d nix/store/*-glibc-* | grep -v -- '-bin$' | head -1)
mounts=(
  "/run/opengl-driver:/run/opengl-driver"
  "$glibc/lib:$glibc/lib" "$glibc/lib64:$glibc/lib64"
  "$nv/bin/nvidia-cuda-mps-control:/usr/bin/nvidia-cuda-mps-control"
  "$nv/bin/nvidia-cuda-mps-server:/usr/bin/nvidia-cuda-mps-server"
  "$nv/bin/nvidia-debugdump:/usr/bin/nvidia-debugdump"
  "$nv/bin/nvidia-powerd:/usr/bin/nvidia-powerd"
  "$nv/bin/nvidia-smi:/usr/bin/nvidia-smi"
  "$nv/lib:/usr/local/nvidia/lib" "$nv/lib:/usr/local/nvidia/lib64"
)
spec=$(cat "$work/spec.json")
for m in "${mounts[@]}"; do
  host=${m%%:*} ctr=${m#*:}
  if inroot /.gen/test -e "$host"; then
    spec=$(jq --arg h "$host" --arg c "$ctr" \
      '.containerEdits.mounts[.containerEdits.mounts | length] = {hostPath: $h, containerPath: $c, options: ["ro", "nosuid", "nodev", "bind"]}' <<< "$spec")
  fi
done
printf '%s\n' "$spec"
