#!/usr/bin/env bash
# Regenerates the host trees under testdata/hosts/ (committed; run this only
# to change them, as root: the CDI specs of the NixOS trees are written by
# the real nvidia-ctk, chrooted, see scripts/nvidia-cdi-generate.sh).
# HOSTS_DIR=DIR writes the trees into DIR instead (TestRealTestHosts
# regenerates them there and wants no difference). Each tree is a host
# root for --root: NixOS's /run/opengl-driver link farm into /nix/store with
# absolute symlinks, the spec NixOS's generator unit writes there, device
# nodes as empty files with their real type and numbers in the tree's
# .devices (path, type, major, minor, mode; git cannot store device nodes,
# testkit.HostCopy makes them when the tests run as root). Driver libraries
# are tiny real ELF shared objects carrying their DT_SONAME (made with gcc),
# so soname checks and the generator read real ELF. Store hashes are
# placeholders; the driver is 550.54.15, the GPUs those of --simulate
# dgx-h200 (the fake NVML nodeprep/testenv/fakedriver/csrc/nvml-dgx-h200.c).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
gen=$repo/scripts/nvidia-cdi-generate.sh
mkdir -p "${HOSTS_DIR:=$repo/testdata/hosts}"
cd "$HOSTS_DIR"
VER=550.54.15
NVH=4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6  # nvidia-x11
GLH=8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z  # libglvnd
GDH=2a3b4c5d6f7g8h9j0k1l2m3n4p5q6r7s  # graphics-drivers (hardware.graphics buildEnv)
MSH=9z8y7x6w5v4s3r2q1p0n9m8l7k6j5h4g  # mesa
CTH=5d6f7g8h9j0k1l2m3n4p5q6r7s8a9b0c  # nvidia-container-toolkit
CTTH=6f7g8h9j0k1l2m3n4p5q6r7s8a9b0c1d # nvidia-container-toolkit's tools output (nvidia-cdi-hook)
LCH=3c4d5f6g7h8j9k0l1m2n3p4q5r6s7a8b  # glibc-bin (ldconfig)
LBH=1b2c3d4f5g6h7j8k9l0m1n2p3q4r5s6a  # glibc (lib)
BUSES=(18 2a 3a 5d 9a ab ba db)      # the simulated dgx-h200's PCI buses
tmpc=$(mktemp -d); trap 'rm -rf "$tmpc"' EXIT
echo 'int nodeprep_stub;' > "$tmpc/stub.c"

# elfstub FILE SONAME: a minimal x86-64 shared object with DT_SONAME.
# Each soname is compiled once and copied after.
elfstub() {
  mkdir -p "$(dirname "$1")" "$tmpc/so"
  [ -e "$tmpc/so/$2" ] || gcc -shared -nostdlib -s -Wl,-soname,"$2" -Wl,--build-id=none -Wl,-z,max-page-size=4096 \
    -Wl,-z,noseparate-code -o "$tmpc/so/$2" "$tmpc/stub.c"
  cp "$tmpc/so/$2" "$1"
}
stub() { mkdir -p "$(dirname "$1")"; : > "$1"; }
lnk() { mkdir -p "$(dirname "$2")"; ln -sfn "$1" "$2"; }
json() { mkdir -p "$(dirname "$1")"; cat > "$1"; }

# nixos HOST MACHINE NGPUS TOOLKIT UNIT: a NixOS host with the NVIDIA
# driver, whose spec the real nvidia-ctk of tools module TOOLKIT writes as
# NixOS's generator UNIT runs it (scripts/nvidia-cdi-generate.sh).
nixos() {
  local h=$1 mach=$2 n=$3 tk=$4 unit=$5
  rm -rf "$h"; mkdir -p "$h"
  local tkver
  tkver=$(awk '$1 == "github.com/NVIDIA/nvidia-container-toolkit" {print substr($2, 2)}' "$repo/testdata/tools/$tk/go.mod")
  local NV=/nix/store/$NVH-nvidia-x11-$VER-6.6.30 GL=/nix/store/$GLH-libglvnd-1.7.0
  local GD=/nix/store/$GDH-graphics-drivers MS=/nix/store/$MSH-mesa-24.0.7
  local CT=/nix/store/$CTH-nvidia-container-toolkit-$tkver/bin/nvidia-ctk
  local HK=/nix/store/$CTTH-nvidia-container-toolkit-$tkver-tools/bin/nvidia-cdi-hook
  local LC=/nix/store/$LCH-glibc-2.39-52-bin/bin/ldconfig LB=/nix/store/$LBH-glibc-2.39-52
  # the driver package
  elfstub "$h$NV/lib/libEGL_nvidia.so.$VER" libEGL_nvidia.so.0
  elfstub "$h$NV/lib/libGLX_nvidia.so.$VER" libGLX_nvidia.so.0
  elfstub "$h$NV/lib/libGLESv2_nvidia.so.$VER" libGLESv2_nvidia.so.2
  elfstub "$h$NV/lib/libnvidia-egl-wayland.so.1.1.13" libnvidia-egl-wayland.so.1
  elfstub "$h$NV/lib/libnvidia-egl-gbm.so.1.1.1" libnvidia-egl-gbm.so.1
  elfstub "$h$NV/lib/libnvidia-present.so.$VER" libnvidia-present.so.$VER
  for l in libnvidia-eglcore libnvidia-glcore libnvidia-glsi libnvidia-tls libnvidia-gpucomp libnvidia-glvkspirv; do
    elfstub "$h$NV/lib/$l.so.$VER" "$l.so.$VER"
  done
  for l in libnvidia-allocator libcuda libnvidia-ml libnvidia-ptxjitcompiler; do elfstub "$h$NV/lib/$l.so.$VER" "$l.so.1"; done
  lnk libnvidia-allocator.so.$VER "$h$NV/lib/libnvidia-allocator.so.1"
  lnk libnvidia-ptxjitcompiler.so.$VER "$h$NV/lib/libnvidia-ptxjitcompiler.so.1"
  lnk libEGL_nvidia.so.$VER "$h$NV/lib/libEGL_nvidia.so.0"
  lnk libGLX_nvidia.so.$VER "$h$NV/lib/libGLX_nvidia.so.0"
  lnk libGLESv2_nvidia.so.$VER "$h$NV/lib/libGLESv2_nvidia.so.2"
  lnk libcuda.so.$VER "$h$NV/lib/libcuda.so.1"
  lnk libnvidia-ml.so.$VER "$h$NV/lib/libnvidia-ml.so.1"
  lnk libnvidia-egl-wayland.so.1.1.13 "$h$NV/lib/libnvidia-egl-wayland.so.1"
  lnk libnvidia-egl-gbm.so.1.1.1 "$h$NV/lib/libnvidia-egl-gbm.so.1"
  lnk ../libnvidia-allocator.so.$VER "$h$NV/lib/gbm/nvidia-drm_gbm.so"
  for b in nvidia-smi nvidia-cuda-mps-control nvidia-cuda-mps-server nvidia-debugdump nvidia-powerd; do stub "$h$NV/bin/$b"; done
  json "$h$NV/share/vulkan/icd.d/nvidia_icd.$mach.json" <<EOF
{
    "file_format_version" : "1.0.1",
    "ICD": {
        "library_path": "$NV/lib/libGLX_nvidia.so.0",
        "api_version" : "1.3.277"
    }
}
EOF
  json "$h$NV/share/vulkan/implicit_layer.d/nvidia_layers.json" <<EOF
{
    "file_format_version" : "1.0.1",
    "layers": [{
        "name": "VK_LAYER_NV_optimus",
        "type": "INSTANCE",
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.3.277",
        "implementation_version" : "1",
        "description" : "NVIDIA Optimus layer",
        "functions": { "vkGetInstanceProcAddr": "vk_optimusGetInstanceProcAddr" },
        "enable_environment": { "__NV_PRIME_RENDER_OFFLOAD": "1" },
        "disable_environment": { "DISABLE_LAYER_NV_OPTIMUS_1": "" }
    }, {
        "name": "VK_LAYER_NV_present",
        "type": "INSTANCE",
        "library_path": "libnvidia-present.so.$VER",
        "api_version" : "1.3.277",
        "implementation_version" : "1",
        "description" : "NVIDIA GR2608 layer",
        "disable_environment": { "DISABLE_LAYER_NV_GR2608_1": "" }
    }]
}
EOF
  json "$h$NV/share/glvnd/egl_vendor.d/10_nvidia.json" <<'EOF'
{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libEGL_nvidia.so.0"
    }
}
EOF
  json "$h$NV/share/egl/egl_external_platform.d/10_nvidia_wayland.json" <<'EOF'
{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libnvidia-egl-wayland.so.1"
    }
}
EOF
  json "$h$NV/share/egl/egl_external_platform.d/15_nvidia_gbm.json" <<'EOF'
{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libnvidia-egl-gbm.so.1"
    }
}
EOF
  # libglvnd
  elfstub "$h$GL/lib/libEGL.so.1.1.0" libEGL.so.1
  elfstub "$h$GL/lib/libGLX.so.0.0.0" libGLX.so.0
  elfstub "$h$GL/lib/libOpenGL.so.0.0.0" libOpenGL.so.0
  elfstub "$h$GL/lib/libGLdispatch.so.0.0.0" libGLdispatch.so.0
  for l in libEGL.so.1:libEGL.so.1.1.0 libGLX.so.0:libGLX.so.0.0.0 libOpenGL.so.0:libOpenGL.so.0.0.0 libGLdispatch.so.0:libGLdispatch.so.0.0.0; do
    lnk "${l#*:}" "$h$GL/lib/${l%%:*}"
  done
  # mesa, also in the link farm (its ICDs must not be picked)
  stub "$h$MS/lib/libvulkan_lvp.so"
  json "$h$MS/share/vulkan/icd.d/lvp_icd.$mach.json" <<EOF
{"ICD": {"api_version": "1.3.278", "library_path": "$MS/lib/libvulkan_lvp.so"}, "file_format_version": "1.0.0"}
EOF
  json "$h$MS/share/glvnd/egl_vendor.d/50_mesa.json" <<'EOF'
{"file_format_version" : "1.0.0", "ICD" : {"library_path" : "libEGL_mesa.so.0"}}
EOF
  # graphics-drivers: the buildEnv /run/opengl-driver points at (absolute links)
  for f in $(cd "$h$NV/lib" && find . -maxdepth 1 -name '*.so*' | sort); do lnk "$NV/lib/${f#./}" "$h$GD/lib/${f#./}"; done
  for f in libEGL.so.1 libEGL.so.1.1.0 libGLX.so.0 libGLX.so.0.0.0 libOpenGL.so.0 libOpenGL.so.0.0.0 libGLdispatch.so.0 libGLdispatch.so.0.0.0; do
    lnk "$GL/lib/$f" "$h$GD/lib/$f"
  done
  lnk "$NV/lib/gbm" "$h$GD/lib/gbm"
  lnk "$MS/lib/libvulkan_lvp.so" "$h$GD/lib/libvulkan_lvp.so"
  lnk "$NV/share/vulkan/icd.d/nvidia_icd.$mach.json" "$h$GD/share/vulkan/icd.d/nvidia_icd.$mach.json"
  lnk "$MS/share/vulkan/icd.d/lvp_icd.$mach.json" "$h$GD/share/vulkan/icd.d/lvp_icd.$mach.json"
  lnk "$NV/share/vulkan/implicit_layer.d/nvidia_layers.json" "$h$GD/share/vulkan/implicit_layer.d/nvidia_layers.json"
  lnk "$NV/share/glvnd/egl_vendor.d/10_nvidia.json" "$h$GD/share/glvnd/egl_vendor.d/10_nvidia.json"
  lnk "$MS/share/glvnd/egl_vendor.d/50_mesa.json" "$h$GD/share/glvnd/egl_vendor.d/50_mesa.json"
  for f in 10_nvidia_wayland.json 15_nvidia_gbm.json; do
    lnk "$NV/share/egl/egl_external_platform.d/$f" "$h$GD/share/egl/egl_external_platform.d/$f"
  done
  lnk "$GD" "$h/run/opengl-driver"
  lnk /run "$h/var/run"
  stub "$h$CT"; stub "$h$HK"; stub "$h$LC"
  elfstub "$h$LB/lib/libc.so.6" libc.so.6; lnk lib "$h$LB/lib64"
  # Device nodes: empty files here, their type and numbers in .devices
  # (char 195/<minor> for the GPUs, 195/254 modeset, 195/255 ctl, 508/*
  # uvm as the nvidia-uvm module's dynamic major often is, 226/* DRM).
  {
    echo "# path type major minor mode: the device nodes of this host (testkit.HostCopy makes them as root)"
    echo "/dev/null c 1 3 0666"
    for ((i = 0; i < n; i++)); do echo "/dev/nvidia$i c 195 $i 0666"; done
    echo "/dev/nvidia-modeset c 195 254 0666"
    echo "/dev/nvidiactl c 195 255 0666"
    echo "/dev/nvidia-uvm c 508 0 0666"
    echo "/dev/nvidia-uvm-tools c 508 1 0666"
    for ((i = 0; i < n; i++)); do echo "/dev/dri/card$((i + 1)) c 226 $((i + 1)) 0660"; echo "/dev/dri/renderD$((128 + i)) c 226 $((128 + i)) 0666"; done
  } > "$h/.devices"
  awk '$1 ~ /^\// {print $1}' "$h/.devices" | while read -r d; do stub "$h$d"; done
  for ((i = 0; i < n; i++)); do
    lnk ../card$((i + 1)) "$h/dev/dri/by-path/pci-0000:${BUSES[i]}:00.0-card"
    lnk ../renderD$((128 + i)) "$h/dev/dri/by-path/pci-0000:${BUSES[i]}:00.0-render"
  done
  mkdir -p "$h/run/cdi"
  "$gen" "$tk" "$h" "$unit" > "$h/run/cdi/nvidia-container-toolkit.json"
}

# fhs-ubuntu: an FHS host whose generated spec already carries the graphics
# files; nodeprep's config points the driver root at /usr.
fhs_ubuntu() {
  local h=fhs-ubuntu L=/usr/lib/x86_64-linux-gnu
  rm -rf "$h"; mkdir -p "$h"
  elfstub "$h$L/libEGL_nvidia.so.$VER" libEGL_nvidia.so.0
  elfstub "$h$L/libGLX_nvidia.so.$VER" libGLX_nvidia.so.0
  elfstub "$h$L/libnvidia-egl-wayland.so.1.1.13" libnvidia-egl-wayland.so.1
  stub "$h$L/libcuda.so.$VER"; stub "$h/usr/bin/nvidia-ctk"; stub "$h/sbin/ldconfig.real"
  json "$h/usr/share/vulkan/icd.d/nvidia_icd.json" <<'EOF'
{"file_format_version": "1.0.1", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3.277"}}
EOF
  json "$h/usr/share/glvnd/egl_vendor.d/10_nvidia.json" <<'EOF'
{"file_format_version": "1.0.0", "ICD": {"library_path": "libEGL_nvidia.so.0"}}
EOF
  json "$h/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json" <<'EOF'
{"file_format_version": "1.0.0", "ICD": {"library_path": "libnvidia-egl-wayland.so.1"}}
EOF
  json "$h/etc/nodeprep/config.yaml" <<'EOF'
# An FHS host: the driver's graphics files are under /usr.
cdi:
  driverRoot: /usr
EOF
  stub "$h/dev/nvidia0"; stub "$h/dev/nvidiactl"; stub "$h/dev/nvidia-modeset"
  stub "$h/dev/nvidia-uvm"; stub "$h/dev/nvidia-uvm-tools"
  mkdir -p "$h/var/run/cdi"
  jq -n --arg L "$L" --arg ver "$VER" '
    def ro: ["ro", "nosuid", "nodev", "bind"];
    {
      cdiVersion: "0.5.0",
      kind: "nvidia.com/gpu",
      devices: [{name: "0", containerEdits: {deviceNodes: [{path: "/dev/nvidia0"}]}},
                {name: "all", containerEdits: {deviceNodes: [{path: "/dev/nvidia0"}]}}],
      containerEdits: {
        deviceNodes: [{path: "/dev/nvidiactl"}, {path: "/dev/nvidia-modeset"},
                      {path: "/dev/nvidia-uvm-tools"}, {path: "/dev/nvidia-uvm"}],
        hooks: [{hookName: "createContainer", path: "/usr/bin/nvidia-ctk",
                 args: ["nvidia-ctk", "hook", "update-ldcache", "--folder", $L]}],
        mounts: ((["libcuda", "libEGL_nvidia", "libGLX_nvidia"] | map("\($L)/\(.).so.\($ver)"))
                 + ["\($L)/libnvidia-egl-wayland.so.1.1.13",
                    "/usr/share/vulkan/icd.d/nvidia_icd.json", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
                    "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json"]
                 | map({hostPath: ., containerPath: ., options: ro}))
      }
    }' > "$h/var/run/cdi/nvidia-container-toolkit.json"
}

TK117=nvidia-container-toolkit-1.17 TK120=nvidia-container-toolkit-1.20
nixos nixos-h200 x86_64 8 $TK120 new
nixos nixos-h200-hooks x86_64 8 $TK120 new-hooks
nixos nixos-h200-ctk117 x86_64 8 $TK117 old
nixos nixos-gh200 aarch64 1 $TK120 new
fhs_ubuntu

# Broken trees: copies of nixos-h200 with one fault each.
broken() { rm -rf "$1"; cp -a nixos-h200 "$1"; }
broken broken-no-icd
rm "broken-no-icd/nix/store/$GDH-graphics-drivers/share/vulkan/icd.d/nvidia_icd.x86_64.json"
broken broken-dangling-icd
rm -r "broken-dangling-icd/nix/store/$NVH-nvidia-x11-$VER-6.6.30/share/vulkan"
broken broken-malformed-spec
head -c 300 nixos-h200/run/cdi/nvidia-container-toolkit.json > broken-malformed-spec/run/cdi/nvidia-container-toolkit.json
broken broken-low-version
jq '.cdiVersion = "0.4.0" | .containerEdits.deviceNodes[0].hostPath = "/dev/nvidiactl"' \
  nixos-h200/run/cdi/nvidia-container-toolkit.json > broken-low-version/run/cdi/nvidia-container-toolkit.json
broken broken-index-names
jq '.devices |= map(select(.name | startswith("GPU-") | not))' \
  nixos-h200/run/cdi/nvidia-container-toolkit.json > broken-index-names/run/cdi/nvidia-container-toolkit.json
broken broken-empty-device
jq '.devices += [{name: "demo1", containerEdits: {}}]' \
  nixos-h200/run/cdi/nvidia-container-toolkit.json > broken-empty-device/run/cdi/nvidia-container-toolkit.json

# The runtime's view (issue 11): trees that need every spec in the CDI
# directories, or the container's own file view, to be judged right.
S=nixos-h200/run/cdi/nvidia-container-toolkit.json
NVL=/nix/store/$NVH-nvidia-x11-$VER-6.6.30/lib
broken dup-spec-copy
cp "$S" dup-spec-copy/run/cdi/nvidia.yaml   # JSON is YAML: the same spec under a second name
plugin_spec() { "$gen" $TK120 nixos-h200 plugin; }
broken plugin-kind
plugin_spec > plugin-kind/run/cdi/k8s.device-plugin.nvidia.com-gpu.json
broken plugin-kind-store
PDP=nix/store/6e7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c-nvidia-device-plugin-cdi
mkdir -p "plugin-kind-store/$PDP" plugin-kind-store/etc/cdi
plugin_spec > "plugin-kind-store/$PDP/k8s.device-plugin.nvidia.com-gpu.json"
lnk "../../$PDP/k8s.device-plugin.nvidia.com-gpu.json" plugin-kind-store/etc/cdi/k8s.device-plugin.nvidia.com-gpu.json
broken coherent-sibling
jq '.kind = "nvidia.com/gpu.coherent" | .cdiVersion = "0.6.0" | .devices |= map(select(.name == "all"))' "$S" \
  > coherent-sibling/run/cdi/nvidia-container-toolkit.coherent.json
broken dangling-dir-mount
icd=dangling-dir-mount/nix/store/$NVH-nvidia-x11-$VER-6.6.30/share/vulkan/icd.d/nvidia_icd.x86_64.json
jq '.ICD.library_path = "/run/opengl-driver/lib/libGLX_nvidia.so.0"' "$icd" > "$icd.new" && mv "$icd.new" "$icd"
jq '.containerEdits.mounts += [{hostPath: "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json",
      containerPath: "/etc/vulkan/icd.d/nvidia_icd.json", options: ["ro", "nosuid", "nodev", "bind"]}]' "$S" \
  > dangling-dir-mount/run/cdi/nvidia-container-toolkit.json
broken missing-companion
jq --arg l "$NVL/libnvidia-" --arg v ".so.$VER" '.containerEdits.mounts |= map(select(.hostPath as $p
      | [$l + "gpucomp" + $v, $l + "glvkspirv" + $v, $l + "allocator" + $v] | index($p) | not))' "$S" \
  > missing-companion/run/cdi/nvidia-container-toolkit.json
elfstub "missing-companion$NVL/libnvidia-allocator.so.$VER" "libnvidia-allocator.so.$VER"
gcc -shared -nostdlib -s -Wl,-soname,libGLX_nvidia.so.0 -Wl,--build-id=none -Wl,-z,max-page-size=4096 \
  -Wl,-z,noseparate-code -Wl,--no-as-needed -o "missing-companion$NVL/libGLX_nvidia.so.$VER" "$tmpc/stub.c" \
  "missing-companion$NVL/libnvidia-allocator.so.$VER"
broken mixed-driver-version
OLD=/nix/store/7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c2d-nvidia-x11-550.54.14-6.6.30/lib
stub "mixed-driver-version$OLD/libnvidia-glcore.so.550.54.14"
jq --arg new "$NVL/libnvidia-glcore.so.$VER" --arg old "$OLD/libnvidia-glcore.so.550.54.14" \
  '.containerEdits.mounts |= map(if .hostPath == $new then .hostPath = $old | .containerPath = $old else . end)' "$S" \
  > mixed-driver-version/run/cdi/nvidia-container-toolkit.json
broken optional-platform-missing
XCB=nix/store/$NVH-nvidia-x11-$VER-6.6.30/share/egl/egl_external_platform.d/20_nvidia_xcb.json
echo '{"file_format_version": "1.0.0", "ICD": {"library_path": "libnvidia-egl-xcb.so.1"}}' | json "optional-platform-missing/$XCB"
lnk "/$XCB" "optional-platform-missing/nix/store/$GDH-graphics-drivers/share/egl/egl_external_platform.d/20_nvidia_xcb.json"
broken modeset-not-in-spec
jq '.containerEdits.deviceNodes |= map(select(.path != "/dev/nvidia-modeset"))' "$S" > modeset-not-in-spec/run/cdi/nvidia-container-toolkit.json
broken modeset-absent
cp modeset-not-in-spec/run/cdi/nvidia-container-toolkit.json modeset-absent/run/cdi/
rm modeset-absent/dev/nvidia-modeset
sed -i '\|^/dev/nvidia-modeset |d' modeset-absent/.devices
# Every NVIDIA spec kind and the names consumers ask for (issue 19).
broken no-all-device
"$gen" $TK120 no-all-device no-all > no-all-device/run/cdi/nvidia-container-toolkit.json
broken stale-etc-cdi
"$gen" $TK120 stale-etc-cdi index > stale-etc-cdi/run/cdi/nvidia-container-toolkit.json
mkdir -p stale-etc-cdi/etc/cdi
"$gen" $TK120 stale-etc-cdi uuid > stale-etc-cdi/etc/cdi/nvidia.json
broken dra-driver
printf '%s\n' "/dev/vfio/vfio c 10 196 0666" "/dev/vfio/42 c 243 0 0600" >> dra-driver/.devices
stub dra-driver/dev/vfio/vfio; stub dra-driver/dev/vfio/42
DRA_CLAIM=3f2a9c1e-7b4d-4e8a-9c2f-1d5e6b7a8c90 "$gen" $TK120 dra-driver dra dra-driver/run/cdi
# Field faults named right (issue 32): the driver's OpenGL/EGL core libraries
# missing from the spec (nvidia-container-toolkit#1908), and the Nix glibc
# in a folder the update-ldcache hook adds (NVIDIA/k8s-device-plugin#1182),
# the folder mounted or only its libc.so.6.
broken missing-eglcore
jq --arg l "$NVL/libnvidia-" --arg v ".so.$VER" '.containerEdits.mounts |= map(select(.hostPath as $p
      | [$l + "eglcore" + $v, $l + "glcore" + $v, $l + "glsi" + $v, $l + "tls" + $v] | index($p) | not))' "$S" \
  > missing-eglcore/run/cdi/nvidia-container-toolkit.json
GLIBC=/nix/store/$LBH-glibc-2.39-52
ldcache_glibc() { jq --arg g "$GLIBC/lib" '(.containerEdits.hooks[] | select(.args[1] == "update-ldcache") | .args) += ["--folder", $g]' "$S"; }
broken ldcache-glibc-folder
ldcache_glibc > ldcache-glibc-folder/run/cdi/nvidia-container-toolkit.json
broken ldcache-glibc-libc
ldcache_glibc | jq --arg g "$GLIBC" '.containerEdits.mounts |= map(select(.hostPath | startswith($g + "/") | not))
  | .containerEdits.mounts += [{hostPath: ($g + "/lib/libc.so.6"), containerPath: ($g + "/lib/libc.so.6"), options: ["ro", "nosuid", "nodev", "bind"]}]' \
  > ldcache-glibc-libc/run/cdi/nvidia-container-toolkit.json
# readme TREE TEXT: each tree says what it is.
readme() { printf '%s\n' "$2" > "$1/README.md"; }
readme nixos-h200 "# nixos-h200
A NixOS DGX H200 node (x86_64, 8 GPUs, driver $VER): /run/opengl-driver is an absolute link to
the hardware.graphics buildEnv in /nix/store, which links into the nvidia-x11, libglvnd and mesa
store paths; /var/run links to /run. .devices lists the device nodes (char 195/<minor> per GPU,
modeset, ctl, uvm, DRM card/renderD, /dev/null); /dev/dri/by-path links each GPU's bus id to its
DRM nodes. run/cdi/nvidia-container-toolkit.json is written by the real nvidia-ctk 1.20.2, run
chrooted as NixOS's newer generator unit runs it (--discovery-mode auto --device-name-strategy
index --disable-hook create-symlinks --nvidia-cdi-hook-path …, plus --device-name-strategy uuid
through extraArgs) against a fake NVML reporting --simulate dgx-h200, then the module's jq step
adds its default mounts (/run/opengl-driver, glibc, the driver's executables at /usr/bin, the
nvidia-docker 1 folders): see scripts/nvidia-cdi-generate.sh. The spec has index and UUID device
names with their /dev/nvidia<N> and DRM nodes, the driver libraries in the nvidia-x11 store path
(rbind, rprivate) and the update-ldcache, enable-cuda-compat, disable-device-node-modification and
update-application-profile hooks, a /dev/null mount at /var/run/nvidia-container-devices/void, but
no graphics manifest: nvidia-ctk looks for them under /etc and /usr/share only (F1). The ICD
names libGLX_nvidia.so.0 by absolute store path, which no mount provides (F2). Libraries are tiny
x86-64 ELF files carrying their DT_SONAME. nodeprep cdi patch adds 11 mounts; the demo runs
nodeprep up on a copy of this tree."
readme nixos-h200-hooks "# nixos-h200-hooks
nixos-h200 whose spec nvidia-ctk 1.20.2 wrote as the newer unit does with
hardware.nvidia-container-toolkit.disable-hooks = [ ] (no --disable-hook): besides nixos-h200's
hooks it has create-symlinks hooks for the driver sonames (libGLX_nvidia.so.0, libEGL_nvidia.so.0,
libcuda.so, ... inside the nvidia-x11 store path's lib folder), libGLX_indirect.so.0, the GBM
backend and each GPU's /dev/dri/by-path links. The hook creates
<nvidia-x11>/lib/libGLX_nvidia.so.0 in the container, the path where cdi patch mounts the ICD's
library."
readme nixos-h200-ctk117 "# nixos-h200-ctk117
nixos-h200 whose spec nvidia-ctk 1.17.8 wrote as NixOS's older generator unit runs it (--format
json --ldconfig-path … --library-search-path <nvidia-x11>/lib --nvidia-ctk-path <toolkit>/bin/nvidia-ctk,
then the jq mounts step): index and UUID device names (1.17's default), hooks run through
\`nvidia-ctk hook\` (create-symlinks, enable-cuda-compat, update-ldcache), no
disable-device-node-modification. The toolkit's store paths are 1.17.8's."
readme nixos-gh200 "# nixos-gh200
A NixOS GH200 node (aarch64, 1 GPU): like nixos-h200, but the ICD is nvidia_icd.aarch64.json, the
GPU is the simulated dgx-h200's first (the fake NVML built with NP_COUNT=1) and the spec is the
one nvidia-ctk 1.20.2 writes for it with the newer unit's flags. Use --arch arm64. (The ELF stubs
are x86-64; only their DT_SONAME is read.)"
readme fhs-ubuntu "# fhs-ubuntu
An FHS (Ubuntu-like) host whose generated spec already mounts the ICD, EGL vendor and EGL
platform manifests where the loaders look. etc/nodeprep/config.yaml sets cdi.driverRoot: /usr.
nodeprep cdi patch must change nothing."
readme broken-no-icd "# broken-no-icd
nixos-h200 with the ICD manifest link removed from /run/opengl-driver/share/vulkan/icd.d:
cdi patch and up must fail (no-icd-on-host) and write nothing."
readme broken-dangling-icd "# broken-dangling-icd
nixos-h200 with the nvidia-x11 store path's share/vulkan removed: the ICD and implicit layer links
in /run/opengl-driver dangle (dangling-host-file)."
readme broken-malformed-spec "# broken-malformed-spec
nixos-h200 with the CDI spec cut off after 300 bytes: exit 65 naming the file, nothing written."
readme broken-low-version "# broken-low-version
nixos-h200 with cdiVersion 0.4.0 although a device node has hostPath (needs 0.5.0, F7):
cdi check reports it; cdi patch raises it to 0.5.0."
readme broken-index-names "# broken-index-names
nixos-h200 with index device names only (the NixOS default device-name-strategy): pods asking for
nvidia.com/gpu=GPU-<uuid> fail (F6); cdi check and up report each missing name."
readme broken-empty-device "# broken-empty-device
nixos-h200 with a device demo1 that has no container edits (F8): cdi check names it, cdi patch
exits 65 and writes nothing."
readme dup-spec-copy "# dup-spec-copy
nixos-h200 with a copy of the generated spec beside it: /var/run/cdi/nvidia.yaml (an earlier
\`nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml\`) holds the same kind, nvidia.com/gpu,
and the same device names as nvidia-container-toolkit.json. The CDI library drops every device the
two declare (\"conflicting device\"), so every nvidia.com/gpu=… is unresolvable. cdi check and
cdi patch report conflicting-specs naming both files; nothing is written; up exits 1 with it."
readme plugin-kind "# plugin-kind
nixos-h200 with the NVIDIA device plugin in a CDI device list strategy (cdi-annotations or
cdi-cri): it has written its own spec, /var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json, kind
k8s.device-plugin.nvidia.com/gpu, one device per GPU named GPU-<uuid>. It is what nvidia-ctk 1.20.2
writes with --vendor k8s.device-plugin.nvidia.com --class gpu --device-name-strategy uuid (the
device plugin's library and vendor), cdiVersion 0.3.0, without the \`all\` device, no jq mounts
and no graphics mounts. Pods get that spec's edits. cdi check reports the graphics files missing
from both specs; cdi patch patches both and warns device-plugin-spec (the plugin rewrites its
spec when it starts)."
readme plugin-kind-store "# plugin-kind-store
nixos-h200 where the configuration ships a device plugin spec through environment.etc:
/etc/cdi/k8s.device-plugin.nvidia.com-gpu.json links into a read-only /nix/store path (the link is
relative here so that the CDI library, reading the tree on this machine, stays inside it). Pods
asking for k8s.device-plugin.nvidia.com/gpu=GPU-… get that spec, which nodeprep cannot patch:
cdi check and cdi patch report unpatchable-spec naming the file, the store path and the device;
nothing is written; up exits 1 with it."
readme coherent-sibling "# coherent-sibling
nixos-h200 with a sibling spec the generator wrote next to the named one:
/var/run/cdi/nvidia-container-toolkit.coherent.json, kind nvidia.com/gpu.coherent (cdiVersion
0.6.0, which a dotted class needs), device all, the same edits and no graphics mounts. cdi check
reports its missing graphics files under its path; cdi patch patches it too. Its device names are
its own: the inventory's GPU-<uuid> names are not required of it."
readme dangling-dir-mount "# dangling-dir-mount
nixos-h200 whose ICD manifest names its library through the driver root,
/run/opengl-driver/lib/libGLX_nvidia.so.0, and whose spec already mounts that ICD manifest at
/etc/vulkan/icd.d/nvidia_icd.json. The spec mounts /run/opengl-driver as a directory, so the path is
covered, but in the container that entry is a link to
/nix/store/<h>-nvidia-x11-$VER/lib/libGLX_nvidia.so.0, which no mount provides: dangling in
the container although it exists on the host. cdi check reports dangling-in-container; cdi patch
mounts the real file where the link leads."
readme missing-companion "# missing-companion
nixos-h200 whose spec lost the generator's mounts of libnvidia-gpucomp.so.$VER and
libnvidia-glvkspirv.so.$VER (both opened by the Vulkan driver with dlopen) and of
libnvidia-allocator.so.$VER, on which this tree's libGLX_nvidia.so.$VER has a DT_NEEDED. cdi
check names all three (missing-driver-library); cdi patch mounts them next to libGLX_nvidia in the
folder the ldcache hook covers."
readme mixed-driver-version "# mixed-driver-version
nixos-h200 whose spec mounts libnvidia-glcore.so.550.54.14 from an old nvidia-x11 store path still
present after the upgrade, and every other driver library at $VER (the version NVML reports).
cdi check and cdi patch report mixed-driver-version naming both versions; nothing is written; up
exits 1 with it."
readme optional-platform-missing "# optional-platform-missing
nixos-h200 whose driver ships an xcb EGL external platform manifest, 20_nvidia_xcb.json, naming
libnvidia-egl-xcb.so.1, which the host does not have. An external platform is optional: cdi check
and cdi patch warn optional-left-out and leave it out; the rest is patched and the node is ready."
readme modeset-not-in-spec "# modeset-not-in-spec
nixos-h200 whose spec lacks /dev/nvidia-modeset, which the host has (the Vulkan driver opens it,
also without a display). cdi check reports missing-device-node; cdi patch adds it to the spec's
top-level deviceNodes."
readme modeset-absent "# modeset-absent
nixos-h200 with /dev/nvidia-modeset neither in the spec nor on the host (nvidia-modeset not
loaded). cdi check and cdi patch report missing-device-node: the Vulkan driver fails without it."
readme no-all-device "# no-all-device
nixos-h200 whose spec nvidia-ctk 1.20.2 wrote with the newer unit's flags and --no-all-device
(through extraArgs): the same index and UUID devices, no \`all\` device. Pods through the device
plugin ask for each GPU's name and work; \`docker run --device nvidia.com/gpu=all\`, podman and the
NixOS manual's examples ask for \`nvidia.com/gpu=all\`, which the CDI library cannot resolve. cdi
check and cdi patch warn missing-all-device (not an error: the node's pods are served); up ends
ready with that warning."
readme stale-etc-cdi "# stale-etc-cdi
nixos-h200 where the generator unit now runs with NixOS's default --device-name-strategy index
(no extraArgs) and writes index names only to /var/run/cdi/nvidia-container-toolkit.json, while
/etc/cdi/nvidia.json is a stale spec of the same kind, nvidia.com/gpu, from an earlier generation
with --device-name-strategy uuid (both written by nvidia-ctk 1.20.2 with the module's jq mounts,
both without graphics mounts, both with the \`all\` device, which /var/run/cdi's wins). The CDI
library resolves nvidia.com/gpu=GPU-<uuid>, which the device plugin asks for, from /etc/cdi: the
names are served, so cdi check must not call them \"not in the spec … unresolvable\". It reports
the graphics files missing from both specs; cdi patch patches both; after it cdi check has no error
and up ends ready."
readme dra-driver "# dra-driver
nixos-h200 with NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu, kubelet plugin) running. Its
specs in /var/run/cdi are written by draspecs (testdata/tools/nvidia-container-toolkit-1.20), which
makes the kubelet plugin's calls with the pinned toolkit's CDI generator (mode nvml, vendor
k8s.gpu.nvidia.com) and the CDI library's WriteSpec (YAML, \`<vendor>-<class>_<id>.yaml\`), chrooted
against the fake NVML as nvidia-ctk is:
- \`k8s.gpu.nvidia.com-device_base.yaml\`, kind \`k8s.gpu.nvidia.com/device\`: one device per GPU named
  \`gpu-<minor>\` with the generator's per-GPU edits, and the generator's common edits plus
  \`NVIDIA_VISIBLE_DEVICES=void\`; no graphics mounts. A pod's ResourceClaim gets these devices.
- \`k8s.gpu.nvidia.com-claim_<claim UID>.yaml\`, kind \`k8s.gpu.nvidia.com/claim\`, written at claim
  time: device \`<claim UID>-gpu-0\` with only the claim's MPS sharing edits (CUDA_MPS_PIPE_DIRECTORY,
  the control daemon's /dev/shm and pipe folders, read-write).
- \`k8s.gpu.nvidia.com-device_vfio.yaml\`, kind \`k8s.gpu.nvidia.com/device\`: a VFIO passthrough
  device \`gpu-vfio-0\` (/dev/vfio/42, and /dev/vfio/vfio) for a virtual machine.
cdi check reports the graphics files missing from the generator's spec and the base spec and names
the claim and VFIO specs it leaves as they are, with the reason; cdi patch patches the first two
and leaves the claim spec (its devices always come with the base spec's) and the VFIO spec (no
NVIDIA driver in the container) as they are; up ends ready."
readme missing-eglcore "# missing-eglcore
nixos-h200 whose spec lost the generator's mounts of the driver's OpenGL/EGL core libraries,
libnvidia-eglcore, libnvidia-glcore, libnvidia-glsi and libnvidia-tls (.so.$VER), as
nvidia-ctk wrote it where it looked for them only in libcuda.so's folder
(nvidia-container-toolkit#1908): EGL then falls back to Mesa without an error. This tree's
libEGL_nvidia and libGLX_nvidia name none of them in DT_NEEDED. cdi check names all four
(missing-driver-library, with the issue and the file cdi patch mounts); cdi patch mounts them
next to libEGL_nvidia, in the folder the ldcache hook covers."
readme ldcache-glibc-folder "# ldcache-glibc-folder
nixos-h200 whose update-ldcache hook also adds the Nix glibc's lib folder
(/nix/store/<h>-glibc-2.39-52/lib, --folder) to the container's linker cache, while the module's
jq step mounts that folder at its own path: the host's libc.so.6 then shadows the image's and
every program in the image fails with \"undefined symbol: __tunable_is_initialized\"
(NVIDIA/k8s-device-plugin#1182). cdi check, cdi patch and up report ldcache-glibc naming the
hook, the folder and the issue, not a hook conflict; nothing is written."
readme ldcache-glibc-libc "# ldcache-glibc-libc
ldcache-glibc-folder without the module's glibc mounts: only /nix/store/<h>-glibc-2.39-52/lib/libc.so.6
is mounted, into the folder the update-ldcache hook adds. The linker cache shadows the image's
libc.so.6 all the same (NVIDIA/k8s-device-plugin#1182): cdi check, cdi patch and up report
ldcache-glibc; nothing is written."
echo "generated: $(ls -d */ | tr -d / | tr '\n' ' ')"
