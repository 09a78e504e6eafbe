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
set -euo pipefail
dir=${1:?usage: make-lavapipe-host.sh DIR UUID...}
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
printf '%s\n' "$@" | jq -R . | jq -s '
  {
    cdiVersion: "0.5.0",
    kind: "nvidia.com/gpu",
    devices: (to_entries | map({name: .value, containerEdits: {env: ["NVIDIA_VISIBLE_DEVICES=\(.value)"],
                                                          deviceNodes: [{path: "/dev/nvidia\(.key)"}]}})
              + [{name: "all", containerEdits: {env: ["NVIDIA_VISIBLE_DEVICES=all"]}}]),
    containerEdits: {env: ["NVIDIA_CTK_LIBCUDA_DIR=/run/opengl-driver/lib"]}
  }' > "$dir/run/cdi/nvidia-container-toolkit.json"
