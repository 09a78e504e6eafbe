#!/usr/bin/env bash
# make-test-rootfs.sh DIR — builds the root file system of the in-container
# self-test (`nodeprep selftest --container --rootfs DIR`) for tests and CI:
# an FHS userland like a workload image, unpacked from Debian packages with
# `apt-get download` + `dpkg-deb -x` (no chroot, no maintainer scripts).
#
# It carries the Vulkan loader (libvulkan1), glvnd's libEGL (libegl1,
# libglvnd0), libc and the shared libraries Mesa's lavapipe links against
# (LLVM, libdrm, libxcb*, ...), so that lavapipe can load inside once the
# CDI spec's mounts bring it in. It never carries a driver: no ICD library
# (mesa-vulkan-drivers is not unpacked), no Vulkan ICD manifest, no EGL
# vendor manifest. Those must arrive through the spec's mounts, as the NVIDIA
# driver's do on a node.
#
# The .debs are cached in ${NODEPREP_DEB_CACHE:-$XDG_CACHE_HOME/nodeprep/debs}
# (XDG_CACHE_HOME defaults to ~/.cache), so a rerun needs no network. DIR is
# rebuilt from scratch each time (about 1 s from the cache); a DIR whose stamp
# matches the package list is left alone unless --force is given.
#
# Needs apt-get, apt-cache, dpkg-deb and ldconfig (Debian or Ubuntu). Runs as
# any user; `apt-get update` is run only when the package lists are empty.
set -euo pipefail

usage() { echo "usage: $0 [--force] DIR" >&2; exit 2; }
force=0
[ "${1:-}" = "--force" ] && { force=1; shift; }
[ $# -eq 1 ] || usage
dir=$1

arch=$(dpkg --print-architecture)
cache=${NODEPREP_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeprep/debs/$arch}

# The roots of the closure: what a workload image with a Vulkan loader and
# libglvnd has, plus lavapipe's direct dependencies (mesa-vulkan-drivers'
# Depends, minus itself, added below).
roots=(libc6 libgcc-s1 libstdc++6 libvulkan1 libegl1 libglvnd0)
# Never unpacked: the drivers themselves, and what only maintainer scripts
# or interpreters need (they bring perl and python, not libraries).
stop='^(mesa-vulkan-drivers|libegl-mesa0|libgl1-mesa-dri|mesa-va-drivers|mesa-vdpau-drivers|nvidia-.*|libnvidia-.*|python3.*|libpython3.*|perl.*|libperl.*|dpkg|tar|install-info|debconf|init-system-helpers|usrmerge|base-files|mailcap|mime-support|media-types|readline-common|libdrm-common|libx11-data|gcc-[0-9]+-base)$'

cand=$(apt-cache policy libvulkan1 2>/dev/null || true)
if [[ ! $cand =~ Candidate:\ [0-9] ]]; then
  echo "make-test-rootfs: package lists are empty: apt-get update" >&2
  apt-get update -qq
fi

# depends PKG... prints the packages PKG... depend on (Depends and
# Pre-Depends; the first of alternatives; virtual packages resolved to their
# first provider), one per line.
depends() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "$@" 2>/dev/null |
    awk '
      /^[^ ]/ { alt = 0; next }
      /^ *\|?(Pre)?Depends:/ {
        name = $2; sub(/:any$/, "", name)
        if (alt == 0) { if (name ~ /^</) virt = 1; else { print name; virt = 0 } }
        alt = ($1 ~ /^\|/)
        next
      }
      /^    [^ <]/ { if (virt) { print $1; virt = 0 } }'
}

mapfile -t lvp < <(depends mesa-vulkan-drivers)
declare -A seen=()
queue=()
for p in "${roots[@]}" "${lvp[@]}"; do
  [[ $p =~ $stop ]] && continue
  [ -n "${seen[$p]:-}" ] && continue
  seen[$p]=1
  queue+=("$p")
done
all=()
while ((${#queue[@]})); do
  all+=("${queue[@]}")
  mapfile -t next < <(depends "${queue[@]}" | sort -u)
  queue=()
  for p in "${next[@]}"; do
    [[ $p =~ $stop ]] && continue
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    queue+=("$p")
  done
done
mapfile -t all < <(printf '%s\n' "${all[@]}" | sort -u)

# Exact versions, so the cache is keyed by what apt would install now.
mapfile -t want < <(apt-cache policy "${all[@]}" |
  awk '/^[^ ]/ { p = $1; sub(/:$/, "", p) } /^  Candidate:/ { print p "=" $2 }')
for pv in "${want[@]}"; do
  if [ "${pv#*=}" = "(none)" ]; then
    echo "make-test-rootfs: no candidate for ${pv%%=*}" >&2
    exit 1
  fi
done
if [ ${#want[@]} -ne ${#all[@]} ]; then
  echo "make-test-rootfs: apt-cache policy named ${#want[@]} of ${#all[@]} packages" >&2
  exit 1
fi

stamp="$dir/.nodeprep-rootfs"
# The stamp is the package list and the version of what this script adds
# beyond the packages (bump it when that changes, so caches are rebuilt).
layout="layout=2 (etc/ld.so.conf)"
if [ $force = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(printf '%s\n' "${want[@]}" "$layout")" ]; then
  echo "make-test-rootfs: $dir is up to date (${#want[@]} packages)" >&2
  exit 0
fi

mkdir -p "$cache"
missing=()
for pv in "${want[@]}"; do
  p=${pv%%=*} v=${pv#*=}
  # Debian file names escape the epoch colon as %3a.
  compgen -G "$cache/${p}_${v//:/%3a}_*.deb" >/dev/null || missing+=("$pv")
done
if ((${#missing[@]})); then
  echo "make-test-rootfs: downloading ${#missing[@]} package(s) to $cache" >&2
  # -o APT::Sandbox::User=root: the cache may not be readable by _apt.
  (cd "$cache" && apt-get download -qq -o APT::Sandbox::User=root "${missing[@]}")
fi

tmp="$dir.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
for pv in "${want[@]}"; do
  p=${pv%%=*} v=${pv#*=}
  deb=$(compgen -G "$cache/${p}_${v//:/%3a}_*.deb" | head -1)
  dpkg-deb -x "$deb" "$tmp"
done

# No driver may come from the image: drop every ICD and vendor manifest a
# package brought, and any Vulkan ICD library.
rm -rf "$tmp/usr/share/vulkan/icd.d" "$tmp/etc/vulkan/icd.d" \
  "$tmp/usr/share/glvnd/egl_vendor.d" "$tmp/etc/glvnd/egl_vendor.d"
find "$tmp" -name 'libvulkan_*.so*' -delete

# What every container needs to start, and nothing more.
mkdir -p "$tmp"/{proc,sys,dev,tmp,etc,.nodeprep}
chmod 1777 "$tmp/tmp"
[ -e "$tmp/etc/passwd" ] || echo 'root:x:0:0:root:/root:/bin/sh' >"$tmp/etc/passwd"
[ -e "$tmp/etc/group" ] || echo 'root:x:0:' >"$tmp/etc/group"
# The top-level linker configuration every Debian and Ubuntu image has
# (libc-bin, Essential, ships it; libc6 only brings ld.so.conf.d/): without
# it `ldconfig -f /etc/ld.so.conf`, as nvidia-cdi-hook update-ldcache runs
# it, reads no ld.so.conf.d/ file and so never the driver folder the hook
# writes there; toolkit 1.17 does not create the file (1.20 does).
[ -e "$tmp/etc/ld.so.conf" ] || echo 'include /etc/ld.so.conf.d/*.conf' >"$tmp/etc/ld.so.conf"
# The probe's dynamic linker and libraries come from the image; ld.so.cache
# makes the sonames resolve the way a real image's do.
/sbin/ldconfig -r "$tmp" 2>/dev/null || ldconfig -r "$tmp"
[ -f "$tmp/etc/ld.so.cache" ] || { echo "make-test-rootfs: ldconfig wrote no ld.so.cache" >&2; exit 1; }
printf '%s\n' "${want[@]}" "$layout" >"$tmp/.nodeprep-rootfs"

rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "make-test-rootfs: built $dir from ${#want[@]} packages ($(du -sh "$dir" | cut -f1))" >&2
