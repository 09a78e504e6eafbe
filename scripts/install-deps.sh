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
#   test   demo's, plus runc (in-container self-test), iproute2 (the veth
#          pair of the real kubelet's private network namespace),
#          containernetworking-plugins (the bridge pod network of the
#          failover's real on-prem node, inside that namespace), nix-bin
#          (the Nix checks), npm (scripts/build-tools.sh installs Deno, the
#          tests' wgpu, with it), and prometheus, prometheus-node-exporter
#          and rabbitmq-server (the failover tests run their own instances
#          on private ports: the packages' services are kept from starting
#          and disabled)
#   bench  test's, plus hyperfine, vulkan-tools, mesa-utils-bin and glslang
set -euo pipefail
set_=${1:-test}
list=${2:-}

demo=(
  gcc make jq
  libvulkan1 libvulkan-dev mesa-vulkan-drivers
  libegl1 libegl-dev libegl-mesa0 libglvnd0 libglvnd-core-dev
)
test=("${demo[@]}" runc iproute2 containernetworking-plugins nix-bin time npm prometheus prometheus-node-exporter rabbitmq-server)
# Packages whose system service the tests never use (and whose ports
# must stay free): not started at install, disabled after.
services=(prometheus prometheus-node-exporter rabbitmq-server)
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
  # invoke-rc.d asks /usr/sbin/policy-rc.d before starting a package's
  # service (Debian policy 9.3.3.1, invoke-rc.d(8)): 101 forbids it. A
  # machine with its own policy keeps it.
  policy=/usr/sbin/policy-rc.d
  ours=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\ncase "$1" in %s) exit 101 ;; esac\nexit 0\n' "$(IFS='|'; echo "${services[*]}")" |
      $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    ours=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive "$hb" "install-deps (apt-get install)" $sudo apt-get install -y -qq "${missing[@]}" >/dev/null || rc=$?
  [ -z "$ours" ] || $sudo rm -f "$policy"
  ((rc == 0)) || exit "$rc"
  if [ -d /run/systemd/system ]; then
    for s in "${services[@]}"; do
      $sudo systemctl disable --now "$s" >/dev/null 2>&1 || true
    done
  fi
fi
