#!/usr/bin/env bash
# watch-scenario.sh KIND ROOT — one row of 30-watch.sh: starts
# `$NODEPREP cdi watch` in the background on ROOT (a host tree `up` made
# ready), waits for its first pass, does KIND to the spec directories,
# and waits (at most 5 s) for the outcome a watcher that never goes deaf
# and never drops a pass reaches. Exits 0 when it did, 1 when not; prints
# the time from the change (or the lock's release) to the outcome.
#   removed        /etc/cdi removed, made again, a spec written in it
#   moved          /etc/cdi moved away, a new one made, a spec written in it
#   symlink        /etc/cdi replaced by a link to a new directory, a spec written there
#   repointed      the link /etc/cdi re-pointed to another directory, a spec written there
#   locked         the lock held 1 s (flock(1), as nodeprep takes it) while the
#                  device plugin writes its spec, the config saying wait: 0s
#   deleted        the generator's spec (the one up patched) removed: status.json
#                  and nodeprep_ready must turn not ready
#   parent         /etc (the spec directory's parent) removed, made again
#                  with mkdir -p /etc/cdi, a spec written in it
#   fifo           a FIFO named *.json made in /etc/cdi (the view cannot be
#                  loaded, as health finds): status.json and nodeprep_ready
#                  must turn not ready
set -uo pipefail
kind=$1 root=$2
plugin_src=$(dirname "$0")/../../testdata/hosts/plugin-kind/run/cdi/k8s.device-plugin.nvidia.com-gpu.json
log=$root/.watch.jsonl

ms() { echo $(( $(date +%s%N) / 1000000 )); }

# until CMD: true once CMD succeeds, polled every 10 ms for at most 5 s.
until_ok() {
  local end=$(( $(ms) + 5000 ))
  while [ "$(ms)" -lt "$end" ]; do
    "$@" && return 0
    sleep 0.01
  done
  return 1
}

# put DIR: the device plugin's spec (no graphics mounts) renamed into DIR.
put() {
  cp "$plugin_src" "$1/.plugin.tmp" && mv "$1/.plugin.tmp" "$1/k8s.device-plugin.nvidia.com-gpu.json"
}
patched() { grep -q 10_nvidia.json "$1/k8s.device-plugin.nvidia.com-gpu.json" 2>/dev/null; }
# pass_took: what the watcher says of its last pass: first event → spec
# and status on disk, and the pass alone.
pass_took() {
  tail -n1 "$log" | grep -o '"latencyMs":[0-9.]*,"passMs":[0-9.]*' | tr -d '"'
}
not_ready() {
  grep -q '"ready": false' "$root/run/nodeprep/status.json" && grep -q '^nodeprep_ready 0' "$root/run/nodeprep/nodeprep.prom"
}

case $kind in
  locked) echo 'wait: 0s' >>"$root/etc/nodeprep/config.yaml" ;;
  repointed) mkdir -p "$root/srv/cdi-a" && rmdir "$root/etc/cdi" && ln -s /srv/cdi-a "$root/etc/cdi" ;;
esac

"$NODEPREP" cdi watch --root "$root" -o json >"$log" 2>"$root/.watch.err" &
watcher=$!
trap 'kill -TERM $watcher 2>/dev/null; wait $watcher' EXIT
until_ok grep -q '"initial":true' "$log" || { echo "no first pass"; exit 1; }

case $kind in
  removed) rm -rf "$root/etc/cdi" && mkdir "$root/etc/cdi"; dir=$root/etc/cdi ;;
  moved) mv "$root/etc/cdi" "$root/etc/cdi.old" && mkdir "$root/etc/cdi"; dir=$root/etc/cdi ;;
  symlink) rm -rf "$root/etc/cdi" && mkdir -p "$root/srv/cdi-b" && ln -s /srv/cdi-b "$root/etc/cdi"; dir=$root/srv/cdi-b ;;
  repointed) mkdir -p "$root/srv/cdi-b" && ln -s /srv/cdi-b "$root/etc/.cdi.new" && mv -T "$root/etc/.cdi.new" "$root/etc/cdi"; dir=$root/srv/cdi-b ;;
  parent) mv "$root/etc" "$root/etc.old" && sleep 0.2 && mkdir -p "$root/etc/cdi"; dir=$root/etc/cdi ;;
esac

case $kind in
  removed|moved|symlink|repointed|parent)
    sleep 0.2 # the swap's own events are over: what follows needs the new directory watched
    t0=$(ms); put "$dir"
    if until_ok patched "$dir"; then echo "re-patched $(( $(ms) - t0 )) ms after the write ($(pass_took))"; exit 0; fi
    echo "never re-patched"; exit 1 ;;
  locked)
    flock -x "$root/run/nodeprep/lock" sleep 1 &
    holder=$!
    until_ok sh -c "! flock -n -x '$root/run/nodeprep/lock' true" || { echo "lock not taken"; exit 1; }
    put "$root/run/cdi"
    wait $holder
    t0=$(ms)
    if until_ok patched "$root/run/cdi"; then echo "re-patched $(( $(ms) - t0 )) ms after the lock was freed ($(pass_took))"; exit 0; fi
    echo "never re-patched"; exit 1 ;;
  deleted)
    t0=$(ms); rm "$root/run/cdi/nvidia-container-toolkit.json"
    if until_ok not_ready; then echo "not ready $(( $(ms) - t0 )) ms after the removal"; exit 0; fi
    echo "status still ready"; exit 1 ;;
  fifo)
    t0=$(ms); mkfifo "$root/etc/cdi/stuck.json"
    if until_ok not_ready; then echo "not ready $(( $(ms) - t0 )) ms after the FIFO"; exit 0; fi
    echo "status still ready"; exit 1 ;;
esac
echo "unknown kind $kind"; exit 2
