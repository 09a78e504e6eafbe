package main_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// silentServer accepts TCP connections and never answers (an API server
// that hangs: the TLS handshake never ends). Each accepted connection is
// sent on the channel; they are closed when the test ends.
func silentServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 16)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case ch <- c:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}

// selfSigned is a PEM certificate and key for 127.0.0.1, base64-encoded
// for a kubeconfig's *-data fields.
func selfSigned(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:gpu-node-1", Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, b []byte) string {
		return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}))
	}
	return enc("CERTIFICATE", der), enc("EC PRIVATE KEY", kder)
}

// writeKubeconfig writes a kubeconfig for the server at addr with the
// kubelet's kind of credential (a client certificate) to path.
func writeKubeconfig(t *testing.T, path, addr string) {
	t.Helper()
	cert, key := selfSigned(t)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://%s", certificate-authority-data: %s}
users:
- name: u
  user: {client-certificate-data: %s, client-key-data: %s}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`, addr, cert, cert, key)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}

// childrenOf lists the processes whose parent is pid (/proc/*/stat).
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, p)
			}
		}
	}
	return out
}

// startHung starts cmd and returns once the silent server has its
// connection (the command is inside the hang), with a channel that is
// closed when cmd has been waited for. A command that exits first fails
// the test, with its stderr.
func startHung(t *testing.T, cmd *exec.Cmd, accepted <-chan net.Conn) (exited <-chan struct{}) {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	select {
	case <-accepted:
	case <-done:
		t.Fatalf("%s %q ended before it connected to the API server; stderr:\n%s", cmd.Path, cmd.Args[1:], stderr.String())
	}
	return done
}

// TestClusterLeavesNoProcess: `nodeprep cluster check --kubeconfig`
// against an API server that never answers, stopped as `timeout -k`
// stops it (SIGTERM, then SIGKILL): nodeprep is nodeprep-cluster by then
// (it replaces itself, as git runs git-<command>), so the process that
// hangs is the one stopped and nothing is left behind.
func TestClusterLeavesNoProcess(t *testing.T) {
	nodeprep, _ := binaries(t)
	addr, accepted := silentServer(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, kc, addr)
	cmd := exec.Command(nodeprep, "--root", t.TempDir(), "cluster", "check", "--pool-label", "nodeprep.dev/pool=gpu", "--kubeconfig", kc)
	exited := startHung(t, cmd, accepted)
	pid := cmd.Process.Pid
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || filepath.Base(exe) != "nodeprep-cluster" {
		t.Errorf("the hanging process %d runs %q (%v), want nodeprep-cluster in nodeprep's place", pid, exe, err)
	}
	kids := childrenOf(pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	if len(kids) > 0 {
		t.Errorf("nodeprep cluster runs children %v, want none", kids)
	}
	for _, k := range kids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", k)); err == nil {
			t.Errorf("process %d is left after nodeprep was killed", k)
		}
	}
}

// TestNodeReportDiesWithNodeprep: health tells the Node its verdict
// through a nodeprep-cluster child; when health is killed (SIGKILL, which
// it cannot catch: timeout -k, systemd's last resort) while that child
// hangs on an API server that never answers, the child is killed with it
// (SIGKILL) rather than left running, holding its connection, until its
// own timeout. The test becomes the orphan's parent (a child subreaper)
// to see how it ended.
func TestNodeReportDiesWithNodeprep(t *testing.T) {
	nodeprep, _ := binaries(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	addr, accepted := silentServer(t)
	root := t.TempDir()
	writeKubeconfig(t, filepath.Join(root, "etc/kubelet.kubeconfig"), addr)
	// No status file: health's verdict is "not ready" (no GPU baseline),
	// which it reports like any other.
	cmd := exec.Command(nodeprep, "--root", root, "health", "--simulate", "dgx-h200", "--kubeconfig", "/etc/kubelet.kubeconfig")
	exited := startHung(t, cmd, accepted)
	kids := childrenOf(cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("health runs %d children (%v) while it reports, want the one node-report", len(kids), kids)
	}
	child := kids[0]
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child)); !strings.Contains(string(cmdline), "node-report") {
		t.Fatalf("health's child %d is %q, want nodeprep-cluster node-report", child, cmdline)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	// The child is now this process's (the subreaper's): wait for it.
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(child, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("waiting for the node-report child %d: %v", child, err)
		}
		break
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		how := fmt.Sprintf("exit %d", ws.ExitStatus())
		if ws.Signaled() {
			how = ws.Signal().String() // SIGPIPE: its report's end, written to health's closed pipe
		}
		t.Errorf("the node-report child outlived health and ended later on its own (%s), want it killed with health (SIGKILL)", how)
	}
}
