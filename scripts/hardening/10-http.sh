# scripts/hardening/10-http.sh — the API server side: redirects to another
# origin (the bearer token, the Node verdict), kubeconfig files that never
# end or are not files, and lists larger than one response.
#
# A small python3 server plays the API server on loopback, over https with
# a self-signed certificate (nodeprep accepts https servers only). Its
# first origin answers by the path prefix of the kubeconfig's server URL:
#   /http/…   307 to the same path on http://127.0.0.1:<second port>
#   /https/…  307 to the same path on https://127.0.0.1:<third port>
#   /lists/…  a paged list (limit/continue): 2,000 Deployments, 100,000
#             Nodes, the other lists empty
#   /error/…  500 with a 4 MB body
# The two other origins log every request's method, path and
# Authorization header to their own file and answer as an API server
# would. A redirect row prints the planted token to its stderr when the
# other origin received it, so "secrets seen" marks the leak and the row
# fails.
srv=$WORK/srv
mkdir -p "$srv" "$HROOT/var/lib/rancher/k3s/agent"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$srv/server.key" -out "$srv/server.crt" 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/O=system:nodes/CN=system:node:gpu-1" \
  -keyout "$HROOT/var/lib/rancher/k3s/agent/client-kubelet.key" -out "$HROOT/var/lib/rancher/k3s/agent/client-kubelet.crt" 2>/dev/null
cp "$srv/server.crt" "$HROOT/var/lib/rancher/k3s/agent/server-ca.crt"
: >"$srv/http.log"
: >"$srv/https.log"
cat >"$srv/server.py" <<'PY'
import http.server, json, socketserver, ssl, sys, threading, urllib.parse
d = sys.argv[1]
class Srv(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
def tls(s):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d + "/server.crt", d + "/server.key")
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    return s
def send(h, code, body, headers=()):
    h.send_response(code)
    for k, v in headers:
        h.send_header(k, v)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
def answer(h):
    if "/nodes/" in h.path:
        return send(h, 200, b'{"metadata":{"name":"gpu-1"}}')
    send(h, 200, b'{"kind":"List","metadata":{},"items":[]}')
def items(path):
    if path.endswith("/apis/apps/v1/deployments"):
        return 2000, lambda i: {"metadata": {"name": "d%d" % i, "namespace": "default"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "registry.example/app:1", "args": ["x" * 2200]}]}}}}
    if path.endswith("/api/v1/nodes"):
        return 100000, lambda i: {"metadata": {"name": "node-%06d" % i, "labels": {"kubernetes.io/os": "linux"}}}
    return 0, None
def lists(h):
    u = urllib.parse.urlsplit(h.path)
    q = urllib.parse.parse_qs(u.query)
    n, item = items(u.path)
    start = int(q.get("continue", ["0"])[0] or 0)
    limit = int(q.get("limit", [str(n or 1)])[0])
    end = min(n, start + limit)
    body = {"kind": "List", "metadata": {}, "items": [item(i) for i in range(start, end)]}
    if end < n:
        body["metadata"]["continue"] = str(end)
    send(h, 200, json.dumps(body).encode())
class First(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def handle_one(self):
        if self.path.startswith("/http/"):
            send(self, 307, b"{}", [("Location", "http://127.0.0.1:%d%s" % (ports[1], self.path))])
        elif self.path.startswith("/https/"):
            send(self, 307, b"{}", [("Location", "https://127.0.0.1:%d%s" % (ports[2], self.path))])
        elif self.path.startswith("/lists/"):
            lists(self)
        else:
            send(self, 500, b"x" * 4000000)
    do_GET = do_PATCH = do_POST = handle_one
def other(log):
    class Other(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def handle_one(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            with open(log, "a") as f:
                f.write("%s %s %s\n" % (self.command, self.path, self.headers.get("Authorization", "-")))
            answer(self)
        do_GET = do_PATCH = do_POST = handle_one
    return Other
servers = [tls(Srv(("127.0.0.1", 0), First)), Srv(("127.0.0.1", 0), other(d + "/http.log")), tls(Srv(("127.0.0.1", 0), other(d + "/https.log")))]
ports = [s.server_address[1] for s in servers]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
open(d + "/ports.tmp", "w").write(" ".join(map(str, ports)) + "\n")
import os; os.rename(d + "/ports.tmp", d + "/ports")
threading.Event().wait()
PY
python3 "$srv/server.py" "$srv" >/dev/null 2>&1 &
srv_pid=$!
for _ in $(seq 100); do [ -s "$srv/ports" ] && break; sleep 0.05; done
read -r port _ <"$srv/ports"

# kubeconfig NAME SERVER-PATH CA CERT KEY [TOKEN]: a kubeconfig in $srv.
kubeconfig() {
  local f=$srv/$1
  {
    echo "apiVersion: v1"; echo "kind: Config"; echo "current-context: x"
    echo "clusters:"; echo "- name: c"; echo "  cluster: {server: \"https://127.0.0.1:$port$2\", certificate-authority: \"$3\"}"
    echo "contexts:"; echo "- name: x"; echo "  context: {cluster: c, user: u}"
    echo "users:"; echo "- name: u"
    if [ -n "${6:-}" ]; then echo "  user: {token: \"$6\"}"; else echo "  user: {client-certificate: \"$4\", client-key: \"$5\"}"; fi
  } >"$f"
  echo "$f"
}
agent=$HROOT/var/lib/rancher/k3s/agent
cfg=testdata/cluster/seed-sku/config.yaml
# leaked LOG PATTERN cmd…: runs cmd, then prints the planted token to
# stderr when LOG (another origin's) has a line with PATTERN and the token.
cat >"$srv/leaked.sh" <<'SH'
log=$1 pat=$2; shift 2
"$@"; rc=$?
n=$(grep -F "$pat" "$log" | grep -cF "$SECRET")
[ "$n" = 0 ] || echo "another origin received the token $SECRET in $n requests" >&2
exit $rc
SH
# shortlog cmd…: runs cmd and exits 99 when its stderr (what health logs
# of node-report, one line) is over 4 KiB.
cat >"$srv/shortlog.sh" <<'SH'
{ err=$("$@" 2>&1 1>&3 3>&-); } 3>&1
rc=$?
printf '%s\n' "$err" | head -c 4096 >&2
[ "${#err}" -gt 4096 ] && exit 99
exit $rc
SH
export SECRET

kc=$(kubeconfig redirect-http.yaml /http "$srv/server.crt" "" "" "$SECRET")
row "cluster check --kubeconfig: the API server answers 307 to http:// on another port (the token received there is a secret seen)" 69 -- \
  bash "$srv/leaked.sh" "$srv/http.log" /http/ "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
kc=$(kubeconfig redirect-https.yaml /https "$srv/server.crt" "" "" "$SECRET")
row "cluster check --kubeconfig: the API server answers 307 to https:// on another port (the token received there is a secret seen)" 69 -- \
  bash "$srv/leaked.sh" "$srv/https.log" /https/ "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
kubeconfig node.yaml /http /var/lib/rancher/k3s/agent/server-ca.crt /var/lib/rancher/k3s/agent/client-kubelet.crt /var/lib/rancher/k3s/agent/client-kubelet.key >/dev/null
cp "$srv/node.yaml" "$agent/kubelet.kubeconfig"
row "node-report (health's Node report): the API server answers 307 to http:// (exit 0: told another origin)" 69 -- \
  timeout -k 1 20 "$NODEPREP_CLUSTER" --root "$HROOT" node-report --kubeconfig /var/lib/rancher/k3s/agent/kubelet.kubeconfig --ready
kubeconfig node-error.yaml /error /var/lib/rancher/k3s/agent/server-ca.crt /var/lib/rancher/k3s/agent/client-kubelet.crt /var/lib/rancher/k3s/agent/client-kubelet.key >/dev/null
cp "$srv/node-error.yaml" "$agent/error.kubeconfig"
row "node-report (health's Node report): the API server answers 500 with a 4 MB body (exit 99: the error health logs is over 4 KiB)" 69 -- \
  bash "$srv/shortlog.sh" timeout -k 1 20 "$NODEPREP_CLUSTER" --root "$HROOT" node-report --kubeconfig /var/lib/rancher/k3s/agent/error.kubeconfig --ready
kc=$(kubeconfig error.yaml /error "$srv/server.crt" "" "" "$SECRET")
row "cluster check --kubeconfig: the API server answers 500 with a 4 MB body (exit 99: stderr over 4 KiB)" 69 -- \
  bash "$srv/shortlog.sh" "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
kc=$(kubeconfig lists.yaml /lists "$srv/server.crt" "" "" "$SECRET")
row "cluster check --kubeconfig: 2,000 Deployments (5 MB) and 100,000 Nodes (8 MB), served in pages (none in the pool: exit 1)" 1 -- \
  timeout -k 1 60 "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
kc=$(kubeconfig ca-zero.yaml /http /dev/zero "" "" "$SECRET")
row "cluster check --kubeconfig: certificate-authority: /dev/zero" 65 -- \
  timeout -k 1 20 "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
kc=$(kubeconfig cert-urandom.yaml /http "$srv/server.crt" /dev/urandom /dev/urandom)
row "cluster check --kubeconfig: client-certificate: /dev/urandom" 65 -- \
  timeout -k 1 20 "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
mkfifo "$srv/fifo.yaml"
row "cluster check --kubeconfig: the kubeconfig is a FIFO no one writes" 65 -- \
  timeout -k 1 20 "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$srv/fifo.yaml"
mkfifo "$srv/ca.fifo"
kc=$(kubeconfig ca-fifo.yaml /http "$srv/ca.fifo" "" "" "$SECRET")
row "cluster check --kubeconfig: certificate-authority: a FIFO no one writes" 65 -- \
  timeout -k 1 20 "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$kc"
truncate -s 1G "$srv/huge.yaml"
row "cluster check --kubeconfig: a 1 GiB (sparse) kubeconfig" 65 -- \
  timeout -k 1 20 "$NODEPREP" --config "$cfg" cluster check --kubeconfig "$srv/huge.yaml"
kill "$srv_pid" 2>/dev/null || true
wait "$srv_pid" 2>/dev/null || true
