# scripts/hardening/40-status.sh — floods and stops (issue 32, items 6, 9
# and 10's drop-ins): 36,000 junk CDI spec files through up and then
# health (status.json must stay within what health reads, and health
# agree with up), nodeprep stopped while the process talking to the API
# server hangs (no process may be left: scripts/hardening/orphan-scenario.sh),
# and 100,000 k3s drop-ins that each append a label, through join.

# 36,000 *.json files the CDI library refuses (no vendor in their kind)
# beside the generated spec of a nixos-h200 tree, named as a generator
# loop might name them; up and health judge the runtime's whole view.
cp -a testdata/hosts/nixos-h200/. "$HROOT"/
python3 - "$HROOT/run/cdi" <<'PY'
import sys
d = sys.argv[1]
for i in range(36000):
    with open(f"{d}/nvidia-container-toolkit-junk-{i:06d}.json", "w") as f:
        f.write('{"cdiVersion":"0.5.0","kind":"junk"}\n')
PY
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json | head -1)}
export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/share/glvnd/egl_vendor.d/50_mesa.json}
flood=(--root "$HROOT" --simulate dgx-h200 --allow-cpu-adapter --metrics-file /run/nodeprep/nodeprep.prom)
row "up: 36,000 junk *.json in /var/run/cdi beside the spec (ready, a warning)" 0 -- "$NODEPREP" up "${flood[@]}"
size=$(stat -c %s "$HROOT/run/nodeprep/status.json" 2>/dev/null || echo 0)
# health must read up's status.json back, exit as up did and say so in
# the metric: the row exits with health's code, else 1 when status.json is
# over the 16 MiB health reads or nodeprep_ready is not 1.
row "health after it (up's status.json: $size bytes): exit 0, nodeprep_ready 1" 0 -- bash -c '
  "$0" health "${@:2}"; rc=$?
  [ "$rc" = 0 ] || exit "$rc"
  [ "$(stat -c %s "$1/run/nodeprep/status.json")" -le $((16 << 20)) ] || exit 1
  grep -q "^nodeprep_ready 1$" "$1/run/nodeprep/nodeprep.prom" || exit 1
  exit $rc' "$NODEPREP" "$HROOT" "${flood[@]:2}" --root "$HROOT"

fresh_work
row "cluster check --kubeconfig, API server never answers, timeout -k 1 2 (SIGTERM, SIGKILL): no process left" 0 -- scripts/hardening/orphan-scenario.sh cluster "$HROOT"
fresh_work
row "health killed (SIGKILL) while its node-report child waits on an API server that never answers: no child left" 0 -- scripts/hardening/orphan-scenario.sh health "$HROOT"

# 100,000 drop-ins, each appending one label with node-label+; join reads
# and merges them all as k3s does (it was quadratic: over 120 s).
fresh_work
mkdir -p "$HROOT/etc/rancher/k3s/config.yaml.d"
python3 - "$HROOT/etc/rancher/k3s/config.yaml.d" <<'PY'
import sys
d = sys.argv[1]
for i in range(100000):
    with open(f"{d}/site-{i:06d}.yaml", "w") as f:
        f.write(f"node-label+: [example.com/site-{i}=yes]\n")
PY
row "join: 100,000 k3s drop-ins, each node-label+ one label (stopped at 100 s)" 0 -- timeout 100 "$NODEPREP" join --root "$HROOT" --simulate dgx-h200
