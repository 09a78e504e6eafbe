#!/usr/bin/env bash
# orphan-scenario.sh KIND ROOT — one row of 40-status.sh: a nodeprep that
# is stopped while the process talking to the API server hangs (an API
# server on loopback that accepts and never answers) must leave no
# process behind. Exits 0 when none is left, 1 when one is (it is then
# killed, and its pid and command line printed).
#   cluster  `nodeprep cluster check --kubeconfig` under `timeout -k 1 2`
#            (SIGTERM at 2 s, SIGKILL a second later)
#   health   `nodeprep health` killed (SIGKILL) while its node-report child
#            (nodeprep-cluster) reports the verdict
set -uo pipefail
kind=$1 root=$2
srv=$root/.silent
mkdir -p "$srv" "$root/etc"
python3 - "$srv/port" "$srv/accepted" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
held = []
while True:
    c, _ = s.accept()
    held.append(c)
    open(sys.argv[2], "a").write("accepted\n")
PY
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$srv/port" ] && break; sleep 0.05; done
port=$(cat "$srv/port")
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/O=system:nodes/CN=system:node:gpu-1" -keyout "$srv/key.pem" -out "$srv/cert.pem" 2>/dev/null
kc=$root/etc/kubelet.kubeconfig
cat >"$kc" <<KC
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:$port", certificate-authority-data: $(base64 -w0 "$srv/cert.pem")}
users:
- name: u
  user: {client-certificate-data: $(base64 -w0 "$srv/cert.pem"), client-key-data: $(base64 -w0 "$srv/key.pem")}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
KC

# alive PID…: those of the pids still running (not a zombie).
alive() {
  local p
  for p in "$@"; do
    case $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) in "" | Z) ;; *) echo "$p" ;; esac
  done
}
# reached: wait (at most 10 s) for the API server's first connection.
reached() {
  for _ in $(seq 200); do [ -s "$srv/accepted" ] && return 0; sleep 0.05; done
  echo "nothing reached the API server" >&2
  return 1
}

case $kind in
  cluster)
    timeout -k 1 2 "$NODEPREP" --root "$root" cluster check --pool-label nodeprep.dev/pool=gpu --kubeconfig "$kc" >/dev/null 2>&1 &
    tpid=$!
    reached || { kill -9 "$tpid"; exit 1; }
    # timeout's child: nodeprep, by now nodeprep-cluster in its place;
    # and whatever it runs.
    watch=$(pgrep -P "$tpid")
    watch="$watch $(for p in $watch; do pgrep -P "$p"; done)"
    wait "$tpid"
    ;;
  health)
    "$NODEPREP" --root "$root" health --simulate dgx-h200 --kubeconfig /etc/kubelet.kubeconfig >/dev/null 2>&1 &
    pid=$!
    reached || { kill -9 "$pid"; exit 1; }
    watch=$(pgrep -P "$pid") # the node-report child
    [ -n "$watch" ] || { echo "health ran no node-report child" >&2; kill -9 "$pid"; exit 1; }
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    ;;
esac
sleep 0.2 # a SIGKILL sent to a child is delivered, not necessarily reaped
rest=$(alive $watch)
if [ -n "$rest" ]; then
  for p in $rest; do
    echo "left behind: $p $({ cat "/proc/$p/cmdline" | tr '\0' ' '; } 2>/dev/null)" >&2
    kill -9 "$p" 2>/dev/null
  done
  exit 1
fi
echo "no process left"
