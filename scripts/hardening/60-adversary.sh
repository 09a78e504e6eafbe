# scripts/hardening/60-adversary.sh — what a second adversarial pass over
# the issue 32 fixes found: a kubeconfig server URL with user information
# (quoted in an error, sent as basic authentication), continue tokens that
# go round in a cycle, a kubelet config alias bomb in check-node's facts,
# an environment file with a NUL byte, a FIFO in a spec directory and the
# spec directory's parent made again under the watcher.
#
# A python3 https server on loopback plays the API server: under /cycle/
# every list gives an empty page and one of two continue tokens in turn;
# under /plain/ every list is empty, and each request's basic
# authentication is logged (decoded) to $srv/basic.log. A row prints the
# planted token to its stderr when that log has it, so "secrets seen"
# marks the leak and the row fails.
srv=$WORK/srv
mkdir -p "$srv"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$srv/server.key" -out "$srv/server.crt" 2>/dev/null
: >"$srv/basic.log"
cat >"$srv/server.py" <<'PY'
import base64, http.server, os, socketserver, ssl, sys, threading, urllib.parse
d = sys.argv[1]
class Srv(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            with open(d + "/basic.log", "a") as f:
                f.write(base64.b64decode(auth[6:]).decode("utf-8", "replace") + "\n")
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        meta = "{}"
        if self.path.startswith("/cycle/"):
            meta = '{"continue":"%s"}' % ("b" if q.get("continue", [""])[0] == "a" else "a")
        body = ('{"kind":"List","metadata":%s,"items":[]}' % meta).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
s = Srv(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(d + "/server.crt", d + "/server.key")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
open(d + "/port.tmp", "w").write("%d\n" % s.server_address[1])
os.rename(d + "/port.tmp", d + "/port")
s.serve_forever()
PY
python3 "$srv/server.py" "$srv" >/dev/null 2>&1 &
adv_srv_pid=$!
for _ in $(seq 100); do [ -s "$srv/port" ] && break; sleep 0.05; done
read -r adv_port <"$srv/port"

# adv_kubeconfig NAME SERVER [USER]: a kubeconfig with the server's CA
# and USER (default: the planted token as its bearer token).
adv_kubeconfig() {
  printf 'apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters:\n- name: c\n  cluster: {server: "%s", certificate-authority: "%s"}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: %s\n' \
    "$2" "$srv/server.crt" "${3:-{token: \"$SECRET\"\}}" >"$srv/$1"
  echo "$srv/$1"
}
cat >"$srv/basic.sh" <<'SH'
log=$1; shift
"$@"; rc=$?
grep -qF "$SECRET" "$log" && echo "the API server received $SECRET as basic authentication" >&2
exit $rc
SH
export SECRET
adv_cfg=testdata/cluster/seed-sku/config.yaml

kc=$(adv_kubeconfig userinfo-http.yaml "http://admin:$SECRET@127.0.0.1:$adv_port")
row "cluster check --kubeconfig: server http://admin:<password>@… (refused; the error quoted the password)" 65 -- \
  timeout -k 1 20 "$NODEPREP" --config "$adv_cfg" cluster check --kubeconfig "$kc"
kc=$(adv_kubeconfig userinfo-https.yaml "https://admin:$SECRET@127.0.0.1:$adv_port/plain" "{}")
row "cluster check --kubeconfig: server https://admin:<password>@…, no token (a warning; the password was sent as basic authentication; empty cluster: exit 1)" 1 -- \
  bash "$srv/basic.sh" "$srv/basic.log" timeout -k 1 20 "$NODEPREP" --config "$adv_cfg" cluster check --kubeconfig "$kc"
kc=$(adv_kubeconfig cycle.yaml "https://127.0.0.1:$adv_port/cycle")
row "cluster check --kubeconfig: empty pages whose continue tokens alternate a, b, a, … (ran to the 60 s timeout)" 69 -- \
  timeout -k 1 20 "$NODEPREP" --config "$adv_cfg" cluster check --kubeconfig "$kc"
kill "$adv_srv_pid" 2>/dev/null || true
wait "$adv_srv_pid" 2>/dev/null || true

# check-node's facts: the kubelet-taint case's, its kubelet config one
# taint with a 200 KB key aliased 4,000 times (225 KB); under a 2 GiB
# address-space cap, as 20-yaml.sh runs its bombs.
python3 - "$WORK/kubelet-bomb.json" <<'PY'
import json, sys
f = json.load(open("testdata/fleet/kubelet-taint/facts.json"))
f["k3s"]["kubeletConfig"] = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregisterWithTaints:\n- &t {key: " + "k" * 200000 + ", effect: NoSchedule}\n" + "- *t\n" * 4000
json.dump(f, open(sys.argv[1], "w"))
PY
row "cluster check-node: a kubelet config of one taint with a 200 KB key aliased 4,000 times (225 KB facts; a kubelet-config finding)" 1 -- \
  bash -c 'ulimit -v 2097152; exec "$@"' capped timeout -k 1 60 "$NODEPREP_CLUSTER" cluster check-node --facts "$WORK/kubelet-bomb.json" \
  --spec-file testdata/hosts/nixos-h200/run/cdi/nvidia-container-toolkit.json --store-root testdata/fleet/store \
  --store-root testdata/hosts/nixos-h200 --store-root testdata/hosts/nvruntime-nixos-117
rm -f "$WORK/kubelet-bomb.json"

# The k3s service's EnvironmentFile with a NUL byte in the token line:
# systemd refuses the file (k3s does not start); join judged it fine.
cp -a testdata/hosts/k3s-env-file/. "$HROOT/"
printf 'K3S_URL=https://k3s.example:6443\nK3S_TOKEN=K10abc\0%s::server:x\n' "$SECRET" >"$HROOT/etc/rancher/k3s/k3s.env"
row "join: the k3s EnvironmentFile has a NUL byte in K3S_TOKEN (systemd refuses the file; join passed, exit 0)" 65 -- \
  "$NODEPREP" --root "$HROOT" join --simulate dgx-h200

# The watcher, on a tree up made ready (as 30-watch.sh makes it).
adv_watch=$WORK/watch-template
mkdir -p "$adv_watch"
cp -a testdata/hosts/nixos-h200/. "$adv_watch"/
mkdir -p "$adv_watch/etc/cdi" "$adv_watch/etc/nodeprep"
printf 'up:\n  metricsFile: /run/nodeprep/nodeprep.prom\n' >"$adv_watch/etc/nodeprep/config.yaml"
VK_DRIVER_FILES=$(ls /usr/share/vulkan/icd.d/lvp_icd.*.json | head -1) \
  __EGL_VENDOR_LIBRARY_FILENAMES=/usr/share/glvnd/egl_vendor.d/50_mesa.json \
  "$NODEPREP" up --root "$adv_watch" --simulate dgx-h200 --allow-cpu-adapter >/dev/null 2>&1 || true
for kind in fifo parent; do
  rm -rf "$HROOT" && mkdir -p "$HROOT" && cp -a "$adv_watch"/. "$HROOT"/
  case $kind in
    fifo) desc="cdi watch: a FIFO named *.json made in /etc/cdi (status.json and nodeprep_ready not ready within 5 s; they stayed ready)" ;;
    parent) desc="cdi watch: /etc moved away, mkdir -p /etc/cdi, a spec written in it (patched within 5 s)" ;;
  esac
  row "$desc" 0 -- scripts/hardening/watch-scenario.sh "$kind" "$HROOT"
done

# YAML alias budgets: documents each within their own expansion limit,
# many of them. The manifest stream runs under the 2 GiB address-space
# cap; the drop-ins row exits 99 when its peak RSS is over 256 MiB.
python3 - "$WORK/stream.yaml" <<'PY'
import sys
doc = """apiVersion: apps/v1
kind: Deployment
metadata: {name: d%d, namespace: default}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
      - name: c
        image: registry.example/app:1
        env: [{name: X, value: &a "%s"}]
        args: [%s]
"""
open(sys.argv[1], "w").write("---\n".join(doc % (i, "x" * 20000, ", ".join(["*a"] * 3000)) for i in range(60)))
PY
row "cluster check: 60 Deployments of a 20 KB string aliased 3,000 times (1.9 MB, each within its own 64 MiB limit)" 65 -- \
  bash -c 'ulimit -v 2097152; exec "$@"' capped timeout -k 1 60 "$NODEPREP_CLUSTER" cluster check --pool-label a=b "$WORK/stream.yaml"
rm -f "$WORK/stream.yaml"
cat >"$WORK/rss.sh" <<'SH'
f=$(dirname "$0")/.row/rss # beside the row's own outputs, not counted
/usr/bin/time -f '%M' -o "$f" "$@"; rc=$?
[ "$(tail -n1 "$f")" -gt 262144 ] && { echo "peak RSS $(tail -n1 "$f") KiB, over 256 MiB" >&2; exit 99; }
exit $rc
SH
rm -rf "$HROOT" && mkdir -p "$HROOT" && cp -a testdata/hosts/nixos-h200/. "$HROOT/"
mkdir -p "$HROOT/etc/rancher/k3s/config.yaml.d"
python3 - "$HROOT/etc/rancher/k3s/config.yaml.d" <<'PY'
import sys
for i in range(50):
    open("%s/%02d.yaml" % (sys.argv[1], i), "w").write('x: &a "k=%s"\nnode-label+: [%s]\n' % ("v" * 3900, ", ".join(["*a"] * 1900)))
PY
row "join: 50 k3s drop-ins of a 4 KB label aliased 1,900 times (604 KB, each within its own 8 MiB limit; exit 99: peak RSS over 256 MiB)" 65 -- \
  bash "$WORK/rss.sh" "$NODEPREP" --root "$HROOT" join --simulate dgx-h200
