# 30-watch.sh — cdi watch under directory swaps, a held lock, a deleted
# spec and out-of-range durations (issue 32, items 2, 4, 8, 10). Each
# scenario row runs scripts/hardening/watch-scenario.sh on a fresh copy
# of testdata/hosts/nixos-h200 that `up` made ready, with the watcher in
# the background; the row exits 0 when the outcome came within 5 s.

# A nixos-h200 tree made ready by up (lavapipe's ICD stands in for the
# GPUs' Vulkan driver), with an /etc/cdi directory for the swaps and a
# config naming the metrics file, made once; watch_host copies it to a
# fresh $HROOT for each row.
watch_template=$WORK/watch-template
mkdir -p "$watch_template"
cp -a testdata/hosts/nixos-h200/. "$watch_template"/
mkdir -p "$watch_template/etc/cdi" "$watch_template/etc/nodeprep"
printf 'up:\n  metricsFile: /run/nodeprep/nodeprep.prom\n' >"$watch_template/etc/nodeprep/config.yaml"
VK_DRIVER_FILES=$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json | head -1) \
  __EGL_VENDOR_LIBRARY_FILENAMES=/usr/share/glvnd/egl_vendor.d/50_mesa.json \
  "$NODEPREP" up --root "$watch_template" --simulate dgx-h200 --allow-cpu-adapter >/dev/null 2>&1 || true

watch_host() {
  rm -rf "$HROOT" && mkdir -p "$HROOT" && cp -a "$watch_template"/. "$HROOT"/
}

for kind in removed moved symlink repointed; do
  watch_host
  case $kind in
    removed) desc="cdi watch: spec directory removed and recreated, a spec written in it (patched within 5 s)" ;;
    moved) desc="cdi watch: spec directory moved away and replaced, a spec written in it (patched within 5 s)" ;;
    symlink) desc="cdi watch: spec directory replaced by a symlink to a new directory, a spec written there (patched within 5 s)" ;;
    repointed) desc="cdi watch: spec directory symlink re-pointed, a spec written in the new target (patched within 5 s)" ;;
  esac
  row "$desc" 0 -- scripts/hardening/watch-scenario.sh "$kind" "$HROOT"
done
watch_host
row "cdi watch: lock held 1 s while the plugin rewrites its spec, config wait: 0s (patched within 5 s of the release)" 0 -- scripts/hardening/watch-scenario.sh locked "$HROOT"
watch_host
row "cdi watch: the spec up patched deleted (status.json and nodeprep_ready not ready within 5 s)" 0 -- scripts/hardening/watch-scenario.sh deleted "$HROOT"
row "cdi watch --settle -5s (usage error, not a watcher that never settles)" 2 -- timeout 5 "$NODEPREP" cdi watch --root "$HROOT" --settle -5s
row "cdi watch --settle 1000h (usage error, not a watcher that never re-patches)" 2 -- timeout 5 "$NODEPREP" cdi watch --root "$HROOT" --settle 1000h
