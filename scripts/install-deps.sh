#!/usr/bin/env bash
# install-deps.sh [demo|test|bench] [--list] — installs the Debian packages
# a make target needs, only those missing (so a prepared machine pays
# nothing); --list prints the set's packages, one a line, and installs
# nothing. Needs root (or sudo) for apt-get. Go tools (staticcheck) are not
# installed here: they are pinned in go.mod's `tool` block and run with
# `go tool`.
#
#   demo   what `make demo` builds and runs: the cgo toolchain and the
#          Vulkan and EGL headers the self-test's shim includes (make build
#          needs them), the Vulkan loader + Mesa's lavapipe, glvnd's libEGL
#          + Mesa EGL, jq. TestDemoDepsHaveBuildHeaders keeps the headers
#          in this set.
#   test   demo's, plus runc (in-container self-test), nix-bin (the Nix
#          checks) and npm (scripts/build-tools.sh installs Deno, the
#          tests' wgpu, with it)
#   bench  test's, plus hyperfine, vulkan-tools, mesa-utils-bin and glslang
set -euo pipefail
set_=${1:-test}
list=${2:-}

demo=(
  gcc make jq
  libvulkan1 libvulkan-dev mesa-vulkan-drivers
  libegl1 libegl-dev libegl-mesa0 libglvnd0 libglvnd-core-dev
)
test=("${demo[@]}" runc nix-bin time npm)
bench=("${test[@]}" hyperfine vulkan-tools mesa-utils-bin glslang-tools)

case $set_ in
  demo) pkgs=("${demo[@]}") ;;
  test) pkgs=("${test[@]}") ;;
  bench) pkgs=("${bench[@]}") ;;
  *) echo "usage: $0 [demo|test|bench] [--list]" >&2; exit 2 ;;
esac
case $list in
  "") ;;
  --list) printf '%s\n' "${pkgs[@]}"; exit 0 ;;
  *) echo "usage: $0 [demo|test|bench] [--list]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  # Node.js from elsewhere (NodeSource's nodejs package) bundles npm and
  # conflicts with Debian's npm package: a working npm is enough.
  [ "$p" = npm ] && command -v npm >/dev/null && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}" >&2
  # apt is quiet here and may take minutes: heartbeat.sh says it still runs.
  hb=$(dirname "$0")/heartbeat.sh
  "$hb" "install-deps (apt-get update)" $sudo apt-get update -qq
  # With recommends, as on the machines this was proven on (nix-bin wants
  # nix-setup-systemd to lay out /nix).
  DEBIAN_FRONTEND=noninteractive "$hb" "install-deps (apt-get install)" $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
