#!/usr/bin/env bash
# Installs the Debian packages nodeprep's build, tests, demo and benchmarks
# need, only those missing (so `make test` is quick on a prepared machine),
# and staticcheck from the Go module proxy. Needs root (or sudo) for apt-get.
set -euo pipefail

pkgs=(
  gcc make jq time hyperfine
  # Vulkan: loader, headers, Mesa's lavapipe, vulkaninfo (bench), glslang (shader)
  libvulkan1 libvulkan-dev mesa-vulkan-drivers vulkan-tools glslang-tools
  # EGL: glvnd's libEGL, Mesa's EGL vendor, headers
  libegl1 libegl-mesa0 libegl-dev libglvnd0
  # in-container self-test and Nix checks
  runc nix-bin
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  # With recommends, as on the machines this was proven on (nix-bin wants
  # nix-setup-systemd to lay out /nix).
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

gobin="$(go env GOPATH)/bin"
if [ ! -x "$gobin/staticcheck" ]; then
  echo "install-deps: installing staticcheck" >&2
  go install honnef.co/go/tools/cmd/staticcheck@2026.2.2
fi
