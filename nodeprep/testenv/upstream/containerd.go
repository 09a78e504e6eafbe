package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Runtime is one CRI runtime handler of a containerd config: the name
// pods ask for with runtimeClassName (a RuntimeClass's handler) and the
// OCI runtime binary containerd's runc shim (io.containerd.runc.v2) runs,
// as k3s writes them (`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.<name>]`
// with `options.BinaryName`).
type Runtime struct {
	Name       string // "runc", "nvidia", "nvidia-cdi"
	BinaryName string // absolute path of the OCI runtime
}

// ContainerdConfig is what a test's containerd differs in. StartContainerd
// writes the rest: private root, state, sockets and plugin directories,
// the CRI plugin with restrict_oom_score_adj (the test machines lack
// CAP_SYS_RESOURCE), no CNI configuration (a host-network pod needs
// none), NRI off and the stream server on an ephemeral loopback port.
type ContainerdConfig struct {
	// Runtimes are the CRI runtime handlers; the first is the default.
	// Empty means one "runc" handler running Debian's runc.
	Runtimes []Runtime
	// CDISpecDirs are containerd's cdi_spec_dirs (enable_cdi is on).
	CDISpecDirs []string
	// Snapshotter is "overlayfs" (the default) or "native".
	Snapshotter string
	// SandboxImage is the pinned sandbox (pause) image reference.
	SandboxImage string
	// Env is added to containerd's environment, which its shims and the
	// OCI runtimes they run inherit (XDG_CONFIG_HOME for the NVIDIA
	// runtime's config.toml, say).
	Env []string
	// Extra is TOML appended to the generated config.
	Extra string
	// Network configures a pod network: Debian's CNI plugins
	// (containernetworking-plugins, /usr/lib/cni) with one bridge network
	// and host-local addresses from PodSubnet, so the CRI reports
	// NetworkReady, the kubelet's Node goes Ready and pods off the host
	// network get an address. It needs Namespace: the bridge, the pods'
	// veths and the forwarding sysctl are then the namespace's, never the
	// host's.
	Network bool
	// Namespace, when not nil, is the NodeNamespace containerd (and so
	// its shims and containers) runs in; nil runs it in this process's
	// namespaces.
	Namespace *NodeNamespace
}

// ContainerdInstance is a containerd started by StartContainerd for one test.
type ContainerdInstance struct {
	// Dir holds everything this containerd writes (root, state, config,
	// sockets, logs); t.Cleanup removes it.
	Dir string
	// Socket is the gRPC socket (unix://Socket is the CRI endpoint).
	Socket string
	// Config is the config.toml it was started with.
	Config string
	// Log is containerd's own log file (stdout and stderr).
	Log string

	bin string // the tools module's directory (containerd, ctr, crictl, shim)
	cmd *exec.Cmd
}

// StartContainerd starts the pinned containerd (tools module Containerd)
// with cfg on private directories under a new temporary directory (short:
// socket paths are limited to 108 bytes), waits until its CRI service
// answers, and registers a cleanup that removes every pod, stops
// containerd, unmounts what it left mounted and removes the directory.
// The test is skipped (failed under CI) when the component cannot be
// built, and skipped when not running as root (containerd needs it).
func StartContainerd(t testing.TB, cfg ContainerdConfig) *ContainerdInstance {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, errors.New("containerd needs root"))
	}
	bin := Dir(t, Containerd)
	runc, err := exec.LookPath("runc")
	if err != nil {
		Unavailable(t, fmt.Errorf("runc (Debian's) is not installed (scripts/install-deps.sh test): %w", err))
	}
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &ContainerdInstance{Dir: dir, Socket: filepath.Join(dir, "c.sock"), Config: filepath.Join(dir, "config.toml"), Log: filepath.Join(dir, "containerd.log"), bin: bin}
	t.Cleanup(func() { c.stop(t) })
	if cfg.Network {
		if cfg.Namespace == nil {
			t.Fatal("containerd: a pod network needs a NodeNamespace")
		}
		if _, err := os.Stat(filepath.Join(cniBinDir, "bridge")); err != nil {
			Unavailable(t, fmt.Errorf("the CNI plugins (Debian's containernetworking-plugins, scripts/install-deps.sh test): %w", err))
		}
		conf := filepath.Join(dir, "cni", "conf")
		if err := os.MkdirAll(conf, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(conf, "10-nodeprep.conflist"), []byte(podNetwork), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(cfg.Runtimes) == 0 {
		cfg.Runtimes = []Runtime{{Name: "runc", BinaryName: runc}}
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = "overlayfs"
	}
	if err := os.WriteFile(c.Config, []byte(containerdConfig(dir, cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(c.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c.cmd = exec.Command(filepath.Join(bin, "containerd"), "--config", c.Config, "--log-level", "info")
	if cfg.Namespace != nil {
		c.cmd = cfg.Namespace.Command(filepath.Join(bin, "containerd"), "--config", c.Config, "--log-level", "info")
	}
	c.cmd.Env = append(append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH")), cfg.Env...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting containerd: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.Crictl("info"); err == nil {
			return c
		}
		if time.Now().After(deadline) || c.exited() {
			log, _ := os.ReadFile(c.Log)
			t.Fatalf("containerd did not start serving CRI on %s:\n%s", c.Socket, tail(log, 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *ContainerdInstance) exited() bool {
	return c.cmd.ProcessState != nil || c.cmd.Process.Signal(syscall.Signal(0)) != nil
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// PodSubnet is the pods' addresses on a node whose containerd has a
// Network: a bridge (cni0) in the node's namespace is its gateway.
const PodSubnet = "10.214.0.0/24"

// podNetwork is the CNI network list of ContainerdConfig.Network (CNI
// spec 1.0.0; the bridge and host-local plugins' documented fields). No
// masquerade: nothing in the tests leaves the node's namespace through it.
var podNetwork = `{"cniVersion": "1.0.0", "name": "nodeprep-pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "` + PodSubnet + `"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
`

// containerdConfig renders containerd 2.x's config (version 3) for dir and cfg.
func containerdConfig(dir string, cfg ContainerdConfig) string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "version = 3\nroot = %s\nstate = %s\n", q(filepath.Join(dir, "root")), q(filepath.Join(dir, "state")))
	fmt.Fprintf(&b, "disabled_plugins = [\"io.containerd.nri.v1.nri\", \"io.containerd.snapshotter.v1.btrfs\", \"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.devmapper\", \"io.containerd.snapshotter.v1.erofs\", \"io.containerd.tracing.processor.v1.otlp\", \"io.containerd.internal.v1.tracing\"]\n")
	fmt.Fprintf(&b, "\n[grpc]\n  address = %s\n\n[ttrpc]\n  address = %s\n", q(filepath.Join(dir, "c.sock")), q(filepath.Join(dir, "c.sock.ttrpc")))
	fmt.Fprintf(&b, "\n[plugins.'io.containerd.internal.v1.opt']\n  path = %s\n", q(filepath.Join(dir, "opt")))
	fmt.Fprintf(&b, "\n[plugins.'io.containerd.grpc.v1.cri']\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"0\"\n")
	fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = %s\n", q(cfg.Snapshotter))
	if cfg.SandboxImage != "" {
		fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = %s\n", q(cfg.SandboxImage))
	}
	dirs := make([]string, len(cfg.CDISpecDirs))
	for i, d := range cfg.CDISpecDirs {
		dirs[i] = q(d)
	}
	fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.runtime']\n  enable_cdi = true\n  cdi_spec_dirs = [%s]\n  restrict_oom_score_adj = true\n", strings.Join(dirs, ", "))
	bin := filepath.Join(dir, "cni", "bin")
	if cfg.Network {
		bin = cniBinDir
	}
	fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.runtime'.cni]\n  bin_dirs = [%s]\n  conf_dir = %s\n", q(bin), q(filepath.Join(dir, "cni", "conf")))
	fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = %s\n", q(cfg.Runtimes[0].Name))
	for _, r := range cfg.Runtimes {
		fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s]\n  runtime_type = \"io.containerd.runc.v2\"\n", q(r.Name))
		fmt.Fprintf(&b, "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s.options]\n  BinaryName = %s\n", q(r.Name), q(r.BinaryName))
	}
	if cfg.Extra != "" {
		b.WriteString("\n" + cfg.Extra + "\n")
	}
	return b.String()
}

// Crictl runs the pinned crictl against this containerd and returns its
// stdout; an error carries the command line and stderr.
func (c *ContainerdInstance) Crictl(args ...string) ([]byte, error) {
	return c.tool("crictl", append([]string{"--runtime-endpoint", "unix://" + c.Socket, "--image-endpoint", "unix://" + c.Socket, "--timeout", "60s"}, args...)...)
}

// Ctr runs the pinned ctr against this containerd in the CRI's namespace
// (k8s.io) and returns its stdout; an error carries stderr.
func (c *ContainerdInstance) Ctr(args ...string) ([]byte, error) {
	return c.tool("ctr", append([]string{"--address", c.Socket, "--namespace", "k8s.io"}, args...)...)
}

func (c *ContainerdInstance) tool(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ImportImage imports an OCI image archive (WriteOCIArchive) into the
// CRI's namespace, unpacked for the configured snapshotter.
func (c *ContainerdInstance) ImportImage(t testing.TB, archive string) {
	t.Helper()
	if out, err := c.Ctr("images", "import", "--local", "--no-unpack=false", "--snapshotter", c.snapshotter(), archive); err != nil {
		t.Fatalf("importing %s: %v\n%s", archive, err, out)
	}
}

func (c *ContainerdInstance) snapshotter() string {
	data, _ := os.ReadFile(c.Config)
	if bytes.Contains(data, []byte(`snapshotter = "native"`)) {
		return "native"
	}
	return "overlayfs"
}

// stop removes every pod, stops containerd (SIGTERM, then SIGKILL after
// 20 s) and its shims, unmounts what is left mounted under Dir and
// removes Dir.
func (c *ContainerdInstance) stop(t testing.TB) {
	t.Helper()
	if c.cmd != nil && c.cmd.Process != nil && !c.exited() {
		if out, err := c.Crictl("rmp", "--all", "--force"); err != nil {
			t.Logf("removing the pods: %v\n%s", err, out)
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	// Shims outlive containerd by design; they carry its socket's address.
	for _, pid := range processesWithArg(c.Socket) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, m := range mountsUnder(c.Dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("unmounting %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Errorf("removing containerd's directory: %v", err)
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// processesWithArg lists the processes one of whose arguments contains s.
func processesWithArg(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
