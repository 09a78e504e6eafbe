package upstream

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// Kubernetes is k8s.io/kubernetes v1.37.2 (kube-apiserver, with the
// staging modules replaced by their v0.37.2 releases) and
// github.com/k3s-io/kine v0.17.5 (kine, with cgo SQLite: the datastore k3s
// embeds), both in testdata/tools/kubernetes.
const Kubernetes = "kubernetes"

// APIServer is a kube-apiserver on loopback over kine and SQLite, started
// by StartAPIServer with the Node authorizer, RBAC and the NodeRestriction
// admission plugin, as a k3s server runs it.
type APIServer struct {
	// URL is the server's https URL (https://127.0.0.1:<port>).
	URL string
	// CA is the PEM of the CA that signed the serving certificate and
	// every client certificate.
	CA []byte
	// Dir holds the certificates, kine's socket and the SQLite file.
	Dir   string
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	admin *http.Client
}

// StartAPIServer starts kine and kube-apiserver, waits until /readyz
// answers ok (at most 2 minutes), and stops both and removes their files
// with t.Cleanup. It skips t (fails it under CI) when the tools module
// cannot be built, and fails t when either program does not come up,
// with the end of its log.
func StartAPIServer(t testing.TB) *APIServer {
	t.Helper()
	dir := Dir(t, Kubernetes)
	kine, apiserver := filepath.Join(dir, "kine"), filepath.Join(dir, "kube-apiserver")
	// A short directory: kine's unix socket path must fit in 108 bytes.
	work, err := os.MkdirTemp("", "apiserver-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	s := &APIServer{Dir: work}
	s.ca, s.caKey = newCA(t)
	s.CA = pemCert(s.ca.Raw)
	write := func(name string, data []byte) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.crt", s.CA)
	servCert, servKey := s.issue(t, pkix.Name{CommonName: "kube-apiserver"}, true)
	servCertFile, servKeyFile := write("serving.crt", servCert), write("serving.key", servKey)
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	saKeyFile := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}))
	saPubFile := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}))

	sock := "unix://" + filepath.Join(work, "kine.sock")
	kineDone := start(t, work, "kine", kine,
		"--listen-address="+sock, "--metrics-bind-address=0", // no :8080: tests run in parallel
		"--endpoint=sqlite://"+filepath.Join(work, "state.db")+"?_journal_mode=WAL&_busy_timeout=30000&_txlock=immediate",
	)
	// kube-apiserver retries its datastore, but says nothing useful when
	// kine is gone: wait for kine's socket first.
	for deadline := time.Now().Add(time.Minute); ; {
		if c, err := net.Dial("unix", filepath.Join(work, "kine.sock")); err == nil {
			c.Close()
			break
		}
		select {
		case <-kineDone:
			t.Fatalf("kine exited before it listened:\n%s", logTail(filepath.Join(work, "kine.log")))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kine not listening after a minute:\n%s", logTail(filepath.Join(work, "kine.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	port := freePort(t)
	s.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	apiDone := start(t, work, "kube-apiserver", apiserver,
		"--etcd-servers="+sock,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+servCertFile, "--tls-private-key-file="+servKeyFile,
		"--client-ca-file="+caFile, "--anonymous-auth=false",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPubFile, "--service-account-signing-key-file="+saKeyFile,
		"--service-cluster-ip-range=10.43.0.0/16", "--cert-dir="+filepath.Join(work, "cert"),
		"--enable-priority-and-fairness=false", "--profiling=false", "--endpoint-reconciler-type=none",
	)
	adminCert, adminKey := s.issue(t, pkix.Name{CommonName: "nodeprep-test-admin", Organization: []string{"system:masters"}}, false)
	s.admin = s.client(t, adminCert, adminKey)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body, err := s.Do(http.MethodGet, "/readyz", "", nil)
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-apiDone:
			t.Fatalf("kube-apiserver exited:\n%s", logTail(filepath.Join(work, "kube-apiserver.log")))
		case <-kineDone:
			t.Fatalf("kine exited:\n%s", logTail(filepath.Join(work, "kine.log")))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 2 minutes: %d %s %v\nkine's log:\n%s\nkube-apiserver's log:\n%s", code, body, err, logTail(filepath.Join(work, "kine.log")), logTail(filepath.Join(work, "kube-apiserver.log")))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return s
}

// Do sends one request as a cluster admin (O=system:masters) and returns
// the HTTP status and the body; in (if not nil) is marshalled to JSON and
// sent with content type ctype (application/json when "").
func (s *APIServer) Do(method, path, ctype string, in any) (int, []byte, error) {
	return s.do(s.admin, method, path, ctype, in)
}

// DoAs is Do with the client certificate and key of k (the kubelet's
// credential) instead of an admin's.
func (s *APIServer) DoAs(t testing.TB, k Kubelet, method, path, ctype string, in any) (int, []byte, error) {
	t.Helper()
	return s.do(s.client(t, k.Cert, k.Key), method, path, ctype, in)
}

func (s *APIServer) do(c *http.Client, method, path, ctype string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, ok := in.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(in); err != nil {
				return 0, nil, err
			}
		}
		body = bytes.NewReader(b)
		if ctype == "" {
			ctype = "application/json"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// MustDo is Do that fails t unless the status is 2xx; it returns the body.
func (s *APIServer) MustDo(t testing.TB, method, path, ctype string, in any) []byte {
	t.Helper()
	code, body, err := s.Do(method, path, ctype, in)
	if err != nil || code/100 != 2 {
		t.Fatalf("%s %s: %d %v: %s", method, path, code, err, body)
	}
	return body
}

// Kubelet is a kubelet's credential laid out as k3s lays it out under its
// data-dir: agent/kubelet.kubeconfig naming agent/server-ca.crt,
// agent/client-kubelet.crt and agent/client-kubelet.key by absolute path.
type Kubelet struct {
	Kubeconfig string // absolute path of agent/kubelet.kubeconfig
	Cert, Key  []byte // the client certificate and key, PEM
}

// KubeletCredential writes a kubelet credential for node under
// dataDir/agent (dataDir is a host path; the files go under
// root+dataDir): a client certificate CN=system:node:<node>,
// O=system:nodes signed by the server's CA, the CA and the kubeconfig,
// whose paths are host paths (dataDir/agent/...), as nodeprep reads them
// under --root.
func (s *APIServer) KubeletCredential(t testing.TB, root, dataDir, node string) Kubelet {
	t.Helper()
	cert, key := s.issue(t, pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}, false)
	agent := filepath.Join(root, dataDir, "agent")
	if err := os.MkdirAll(agent, 0o755); err != nil {
		t.Fatal(err)
	}
	host := func(name string) string { return filepath.Join(dataDir, "agent", name) }
	for name, data := range map[string][]byte{"server-ca.crt": s.CA, "client-kubelet.crt": cert, "client-kubelet.key": key} {
		if err := os.WriteFile(filepath.Join(agent, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kc := testkit.KubeletKubeconfig(s.URL, host("server-ca.crt"), host("client-kubelet.crt"), host("client-kubelet.key"))
	p := filepath.Join(agent, "kubelet.kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return Kubelet{Kubeconfig: p, Cert: cert, Key: key}
}

// AdminKubeconfig writes a kubeconfig for a cluster admin
// (O=system:masters) with inline certificates into dir and returns its
// path: for `cluster check --kubeconfig`.
func (s *APIServer) AdminKubeconfig(t testing.TB, dir string) string {
	t.Helper()
	cert, key := s.issue(t, pkix.Name{CommonName: "nodeprep-test-admin", Organization: []string{"system:masters"}}, false)
	b64 := base64.StdEncoding.EncodeToString
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster: {server: %q, certificate-authority-data: %s}
  name: test
contexts:
- context: {cluster: test, user: admin}
  name: test
current-context: test
users:
- name: admin
  user: {client-certificate-data: %s, client-key-data: %s}
`, s.URL, b64(s.CA), b64(cert), b64(key))
	p := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *APIServer) client(t testing.TB, cert, key []byte) *http.Client {
	t.Helper()
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.ca)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
}

// issue makes a certificate signed by the CA: a serving one for
// 127.0.0.1/localhost, or a client one for subject.
func (s *APIServer) issue(t testing.TB, subject pkix.Name, serving bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if serving {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, &key.PublicKey, s.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemCert(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func newCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "nodeprep-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs program with args in its own process group, its output in
// dir/<name>.log, and stops it (SIGTERM, then SIGKILL after 10 s) with
// t.Cleanup. The channel it returns is closed when the program exits.
func start(t testing.TB, dir, name, program string, args ...string) <-chan struct{} {
	t.Helper()
	return startEnv(t, dir, name, program, nil, args...)
}

// logTail is the end of a program's log file, at most 4000 bytes.
func logTail(file string) string {
	data, _ := os.ReadFile(file)
	return strings.TrimSpace(tail(data, 4000))
}
