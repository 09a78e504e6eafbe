package upstream

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NodeIP is the node's address inside a NodeNamespace: one end of a veth
// pair whose other end (NodeIP's neighbour, .1) is in the namespace too.
// The kubelet refuses a loopback node IP.
const NodeIP = "10.213.0.2"

// The sysctls the kubelet's container manager sets at start when
// protectKernelDefaults is off (kubernetes pkg/kubelet/cm/container_manager_linux.go,
// setupKernelTunables): inside a NodeNamespace each is a file of its own
// bind-mounted over the /proc/sys entry, so the host's values never change.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// NodeNamespace is a private mount and network namespace for the node's
// programs (containerd, its shims and containers, the kubelet, a device
// plugin), so that what they do to the machine stays inside it: a tmpfs
// on /var/lib (the kubelet's /var/lib/kubelet, which this host does not
// have) and on /var/log (the pods' logs), the kubelet's sysctls as files
// of their own, its own loopback and a veth pair carrying NodeIP. A
// process in it reaches the host's loopback only through Forward.
type NodeNamespace struct {
	// Dir holds the namespace's own files (the sysctl files); t.Cleanup
	// removes it.
	Dir string
	// Pid is the process that holds the namespaces (a shell waiting on
	// its standard input); the namespaces end when it and every process
	// entered into them exit.
	Pid int

	hold *exec.Cmd
}

// StartNodeNamespace makes a NodeNamespace with util-linux's unshare
// (mount and network namespaces, mounts private) and iproute2's ip, and
// ends it with t.Cleanup (after every cleanup registered later, such as a
// containerd or a kubelet started in it). It is Unavailable when not
// root or unshare, nsenter or ip is missing.
func StartNodeNamespace(t testing.TB) *NodeNamespace {
	t.Helper()
	NeedPrivateMounts(t, "the node's programs")
	for _, p := range []string{"nsenter", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			Unavailable(t, fmt.Errorf("%s (util-linux, iproute2): %w", p, err))
		}
	}
	dir, err := os.MkdirTemp("", "nodens-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var script strings.Builder
	script.WriteString("set -e\nmount -t tmpfs -o mode=0755 nodeprep-var-lib /var/lib\nmkdir -p /var/lib/kubelet\nmount -t tmpfs -o mode=0755 nodeprep-var-log /var/log\n")
	for _, s := range kubeletSysctls {
		src := filepath.Join("/proc/sys", s)
		data, err := os.ReadFile(src)
		if err != nil {
			continue // an entry this kernel lacks: the kubelet skips it too
		}
		f := filepath.Join(dir, strings.ReplaceAll(s, "/", "."))
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "mount --bind %s %s\n", strconv.Quote(f), strconv.Quote(src))
	}
	script.WriteString("ip link set lo up\nip link add nodeprep0 type veth peer name nodeprep1\n")
	fmt.Fprintf(&script, "ip addr add 10.213.0.1/24 dev nodeprep0\nip addr add %s/24 dev nodeprep1\n", NodeIP)
	script.WriteString("ip link set nodeprep0 up\nip link set nodeprep1 up\nip route add default via 10.213.0.1 dev nodeprep1 || true\necho ready\nexec cat >/dev/null\n")
	n := &NodeNamespace{Dir: dir}
	n.hold = exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", script.String())
	n.hold.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := n.hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := n.hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	n.hold.Stderr = &stderr
	if err := n.hold.Start(); err != nil {
		t.Fatalf("starting the node's namespace: %v", err)
	}
	n.Pid = n.hold.Process.Pid
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = n.hold.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = n.hold.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("setting up the node's namespace: %v %q\n%s", err, line, stderr.String())
	}
	return n
}

// Command is exec.Command for program with args run inside the namespace
// (util-linux's nsenter, which execs it: the *exec.Cmd's process is the
// program itself).
func (n *NodeNamespace) Command(program string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--target", strconv.Itoa(n.Pid), "--mount", "--net", "--", program}, args...)...)
}

// Forward listens on a TCP port of the namespace's loopback and relays
// each connection to target (host:port on this process's network, the
// API server's loopback address, say); it returns the address inside the
// namespace ("127.0.0.1:<port>") and stops with t.Cleanup. The relay is
// bytes only: TLS runs end to end, so a certificate for 127.0.0.1 serves
// both sides.
func (n *NodeNamespace) Forward(t testing.TB, target string) string {
	t.Helper()
	l, err := n.listen()
	if err != nil {
		t.Fatalf("listening inside the node's namespace: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go relay(c, target)
		}
	}()
	return l.Addr().String()
}

// listen makes a TCP listener on 127.0.0.1:0 in the namespace: the
// socket belongs to the network namespace its thread was in when it was
// made (setns(2) of a network namespace is per thread), so one locked
// thread enters it, listens and comes back. A thread that cannot come
// back is left locked, and Go ends it with its goroutine.
func (n *NodeNamespace) listen() (net.Listener, error) {
	type res struct {
		l   net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", n.Pid))
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("setns: %w", err)}
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if errBack := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); errBack == nil {
			runtime.UnlockOSThread()
		}
		ch <- res{l, err}
	}()
	r := <-ch
	return r.l, r.err
}

func relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
}
