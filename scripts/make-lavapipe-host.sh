#!/usr/bin/env bash
# make-lavapipe-host.sh DIR UUID...
# Builds a NixOS-like host tree in DIR whose "driver" is Mesa's lavapipe,
# for the in-container self-test: the real lavapipe library cannot be
# committed, so tests build the tree at run time.
#
#   /nix/store/<h>-mesa-lvp/lib/libvulkan_lvp.so            copy of this machine's lavapipe
#   /nix/store/<h>-mesa-lvp/share/vulkan/icd.d/nvidia_icd.<machine>.json
#                                                            names that library by store path
#   /run/opengl-driver -> /nix/store/<h>-mesa-lvp            (absolute link, as on NixOS)
#   /var/run -> /run
#   /run/cdi/nvidia-container-toolkit.json                   the generated spec, without the ICD mount
#
# The manifest is called nvidia_icd so that `cdi patch` discovery, which looks
# for NVIDIA's manifest names only, picks it up. The spec names one device per
# UUID given plus "all", each with an env edit and its /dev/nvidia<i> node (an
# empty file in the tree: the container test drops device nodes that are not
# real character devices, with a note); before the
# patch a container has no Vulkan driver at all; after it lavapipe arrives
# through the spec's mounts, exactly as the NVIDIA driver's files would.
#
# make-lavapipe-host.sh --buildenv DIR UUID... lays the driver out as NixOS's
# hardware.graphics does and the generator mounts it: /run/opengl-driver
# links to a buildEnv (/nix/store/<h>-graphics-drivers) whose
# lib/libvulkan_lvp.so is an absolute link into the lavapipe store path; the
# manifest names /run/opengl-driver/lib/libvulkan_lvp.so; the spec mounts
# /run/opengl-driver as a directory and already mounts the manifest at
# /etc/vulkan/icd.d/nvidia_icd.json. In the container the library is then a
# link to a store path no mount provides, until `cdi patch` mounts it.
#
# make-lavapipe-host.sh --companion DIR UUID... is --buildenv whose ICD
# library, libnvidia-vkwrap.so.550.54.15 (a wrapper built here, the Vulkan
# driver as far as the loader can tell), has DT_NEEDED entries on lavapipe
# and on libnvidia-companion.so.550.54.15, both in the driver root and
# neither mounted by the spec: the wrapper fails to load until `cdi patch`
# mounts what it needs.
set -euo pipefail
layout=plain
case ${1:-} in --buildenv) layout=buildenv; shift ;; --companion) layout=companion; shift ;; esac
dir=${1:?usage: make-lavapipe-host.sh [--buildenv|--companion] DIR UUID...}
shift
store=/nix/store/0lvp1mesa2lavapipe3stand4in5nvidia6-mesa-lvp
machine=$(uname -m)
lib=/usr/lib/$machine-linux-gnu/libvulkan_lvp.so
icd=/usr/share/vulkan/icd.d/lvp_icd.$machine.json
for f in "$lib" "$icd"; do
  [ -e "$f" ] || { echo "make-lavapipe-host: $f missing (apt-get install mesa-vulkan-drivers)" >&2; exit 69; }
done
mkdir -p "$dir$store/lib" "$dir$store/share/vulkan/icd.d" "$dir/run/cdi" "$dir/var"
cp "$lib" "$dir$store/lib/libvulkan_lvp.so"
jq --arg p "$store/lib/libvulkan_lvp.so" '.ICD.library_path = $p' "$icd" > "$dir$store/share/vulkan/icd.d/nvidia_icd.$machine.json"
ln -sfn "$store" "$dir/run/opengl-driver"
ln -sfn /run "$dir/var/run"
mkdir -p "$dir/dev"
for ((i = 0; i < $#; i++)); do : > "$dir/dev/nvidia$i"; done
: > "$dir/dev/nvidia-modeset"   # the host has it; cdi patch adds it to the spec
# nvidia-uvm loaded: the host has its nodes and the spec gives them to every
# device in its common edits, as nvidia-ctk's generated spec does (cdi
# check fails a spec without them: CUDA needs them, Vulkan and EGL do not).
: > "$dir/dev/nvidia-uvm"
: > "$dir/dev/nvidia-uvm-tools"
printf '%s\n' "$@" | jq -R . | jq -s '
  {
    cdiVersion: "0.5.0",
    kind: "nvidia.com/gpu",
    devices: (to_entries | map({name: .value, containerEdits: {env: ["NVIDIA_VISIBLE_DEVICES=\(.value)"],
                                                          deviceNodes: [{path: "/dev/nvidia\(.key)"}]}})
              + [{name: "all", containerEdits: {env: ["NVIDIA_VISIBLE_DEVICES=all"]}}]),
    containerEdits: {env: ["NVIDIA_CTK_LIBCUDA_DIR=/run/opengl-driver/lib"],
                     deviceNodes: [{path: "/dev/nvidia-uvm"}, {path: "/dev/nvidia-uvm-tools"}]}
  }' > "$dir/run/cdi/nvidia-container-toolkit.json"
[ "$layout" = plain ] && exit 0

env=/nix/store/1lvp2graphics3drivers4buildenv5stand6-graphics-drivers
ro='["ro", "nosuid", "nodev", "bind"]'
mkdir -p "$dir$env/lib" "$dir$env/share/vulkan/icd.d"
ln -sfn "$store/lib/libvulkan_lvp.so" "$dir$env/lib/libvulkan_lvp.so"
icdlib=/run/opengl-driver/lib/libvulkan_lvp.so
if [ "$layout" = companion ]; then
  tmpc=$(mktemp -d); trap 'rm -rf "$tmpc"' EXIT
  echo 'int nodeprep_companion;' > "$tmpc/c.c"
  gcc -shared -nostdlib -s -Wl,-soname,libnvidia-companion.so.550.54.15 -o "$dir$store/lib/libnvidia-companion.so.550.54.15" "$tmpc/c.c"
  # The wrapper exports nothing itself: dlsym on its handle finds
  # vk_icdGetInstanceProcAddr in its dependency, lavapipe, whose folder its
  # RUNPATH names (where cdi patch mounts the driver root's libraries).
  gcc -shared -nostdlib -s -Wl,-soname,libnvidia-vkwrap.so.550.54.15 -Wl,--no-as-needed \
    -Wl,-rpath,/usr/lib/$machine-linux-gnu -o "$dir$store/lib/libnvidia-vkwrap.so.550.54.15" "$tmpc/c.c" \
    "$dir$store/lib/libvulkan_lvp.so" "$dir$store/lib/libnvidia-companion.so.550.54.15"
  for f in libnvidia-companion.so.550.54.15 libnvidia-vkwrap.so.550.54.15; do ln -sfn "$store/lib/$f" "$dir$env/lib/$f"; done
  icdlib=$store/lib/libnvidia-vkwrap.so.550.54.15
fi
jq --arg p "$icdlib" '.ICD.library_path = $p' "$icd" > "$dir$env/share/vulkan/icd.d/nvidia_icd.$machine.json"
ln -sfn "$env" "$dir/run/opengl-driver"
spec="$dir/run/cdi/nvidia-container-toolkit.json"
mounts='[{hostPath: "/run/opengl-driver", containerPath: "/run/opengl-driver", options: $ro},
         {hostPath: "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.\($m).json", containerPath: "/etc/vulkan/icd.d/nvidia_icd.json", options: $ro}]'
if [ "$layout" = companion ]; then
  mounts="$mounts"' + [{hostPath: "\($s)/lib/libnvidia-vkwrap.so.550.54.15", containerPath: "\($s)/lib/libnvidia-vkwrap.so.550.54.15", options: $ro}]'
fi
jq --argjson ro "$ro" --arg m "$machine" --arg s "$store" ".containerEdits.mounts = ($mounts)" "$spec" > "$spec.new"
mv "$spec.new" "$spec"
