package container

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

func TestBaseSpec(t *testing.T) {
	t.Parallel()
	s := BaseSpec("/images/rootfs", []string{BinaryPath, "__probe", "{}"})
	if s.Root == nil || !s.Root.Readonly || s.Root.Path != "/images/rootfs" {
		t.Errorf("root %+v, want read-only /images/rootfs", s.Root)
	}
	if !slices.Equal(s.Process.Env, []string{ContainerPATH}) {
		t.Errorf("env %v, want only PATH", s.Process.Env)
	}
	if c := s.Process.Capabilities; c == nil || len(c.Bounding)+len(c.Effective)+len(c.Permitted) != 0 {
		t.Errorf("capabilities %+v, want none", c)
	}
	if !s.Process.NoNewPrivileges {
		t.Error("NoNewPrivileges false")
	}
	i := slices.IndexFunc(s.Linux.Namespaces, func(n rspec.LinuxNamespace) bool { return n.Type == rspec.NetworkNamespace })
	if i < 0 || s.Linux.Namespaces[i].Path != "" {
		t.Errorf("namespaces %+v, want a new network namespace (no path: not the host's)", s.Linux.Namespaces)
	}
	var dests []string
	for _, m := range s.Mounts {
		dests = append(dests, m.Destination+":"+m.Type)
	}
	for _, want := range []string{"/proc:proc", "/dev:tmpfs", "/sys:sysfs", "/tmp:tmpfs"} {
		if !slices.Contains(dests, want) {
			t.Errorf("mounts %v lack %s", dests, want)
		}
	}
	if d := s.Linux.Resources.Devices; len(d) != 1 || d[0].Allow || d[0].Access != "rwm" {
		t.Errorf("device cgroup %+v, want deny all", d)
	}
}

// TestInjectHostTree injects a UUID-named device from the committed
// nixos-h200 tree: device nodes there are empty files, so they are dropped
// with notes; mount sources and hooks are re-rooted under the tree.
func TestInjectHostTree(t *testing.T) {
	t.Parallel()
	host, err := hostfs.New(filepath.Join("..", "..", "..", "testdata", "hosts", "nixos-h200"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := host.Path("/var/run/cdi")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := NewCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	devices := DeviceNames(DefaultKind, inv.GPUs[1].UUID)
	notes := RerootDeviceNodes(cache, devices, host)
	for _, want := range []string{"/dev/nvidia1 ", "/dev/nvidiactl ", "/dev/dri/renderD129 "} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "device node "+want) }) {
			t.Errorf("notes %q lack device node %s", notes, want)
		}
	}
	s := BaseSpec("rootfs", []string{BinaryPath})
	if err := Inject(cache, s, devices); err != nil {
		t.Fatalf("Inject: %v", err)
	}
	if len(s.Linux.Devices) != 0 {
		t.Errorf("linux.devices %+v, want none (empty files are no devices)", s.Linux.Devices)
	}
	if !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("env %v lacks the spec's edit", s.Process.Env)
	}
	missing, hookNotes := Reroot(s, host)
	bindCount := 0
	for _, m := range s.Mounts {
		if !isBind(&m) {
			continue
		}
		bindCount++
		if !strings.HasPrefix(m.Source, host.Dir()+"/") && !slices.ContainsFunc(missing, func(x MissingSource) bool { return x.Destination == m.Destination }) {
			t.Errorf("mount %s from %s: not re-rooted under %s", m.Destination, m.Source, host.Dir())
		}
	}
	if bindCount == 0 {
		t.Error("the spec's mounts were not injected")
	}
	if s.Hooks != nil && len(s.Hooks.CreateContainer) != 0 {
		t.Errorf("hooks %+v kept: the tree's nvidia-ctk is a stub that cannot run", s.Hooks.CreateContainer)
	}
	if len(hookNotes) == 0 {
		t.Error("no note for the dropped hook")
	}
}

func TestInjectUnresolvable(t *testing.T) {
	t.Parallel()
	cache, err := NewCache(filepath.Join("..", "..", "..", "testdata", "hosts", "nixos-h200", "run", "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	err = Inject(cache, BaseSpec("rootfs", nil), []string{"nvidia.com/gpu=GPU-nope"})
	if err == nil || !strings.Contains(err.Error(), "unresolvable CDI devices nvidia.com/gpu=GPU-nope") {
		t.Fatalf("Inject: %v, want the library's unresolvable-device error", err)
	}
}

// TestInjectRealRoot: on root "/" device nodes are the library's business:
// a real node gets its numbers, a missing one the library's error.
func TestInjectRealRoot(t *testing.T) {
	t.Parallel()
	root, err := hostfs.New("/")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	spec := `{"cdiVersion":"0.5.0","kind":"example.com/dev","devices":[
	  {"name":"null","containerEdits":{"deviceNodes":[{"path":"/dev/null"}]}},
	  {"name":"gone","containerEdits":{"deviceNodes":[{"path":"/dev/nodeprep-no-such-device"}]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "example.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	cache, err := NewCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	if notes := RerootDeviceNodes(cache, []string{"example.com/dev=null"}, root); notes != nil {
		t.Errorf("notes %v on root /", notes)
	}
	s := BaseSpec("rootfs", nil)
	if err := Inject(cache, s, []string{"example.com/dev=null"}); err != nil {
		t.Fatal(err)
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Major != 1 || s.Linux.Devices[0].Minor != 3 {
		t.Errorf("linux.devices %+v, want /dev/null 1:3", s.Linux.Devices)
	}
	err = Inject(cache, BaseSpec("rootfs", nil), []string{"example.com/dev=gone"})
	if err == nil || !strings.Contains(err.Error(), "/dev/nodeprep-no-such-device") {
		t.Errorf("Inject of a missing node: %v, want the library's stat error", err)
	}
}

func TestRerootMissingSource(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "lib", "here.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	s := BaseSpec("rootfs", nil)
	s.Mounts = append(s.Mounts,
		rspec.Mount{Destination: "/usr/lib/here.so", Source: "/lib/here.so", Options: []string{"ro", "bind"}},
		rspec.Mount{Destination: "/usr/lib/gone.so", Source: "/lib/gone.so", Options: []string{"ro", "bind"}},
		BinaryMount("/not/under/the/root/nodeprep"),
	)
	missing, _ := Reroot(s, host, BinaryPath)
	if len(missing) != 1 || missing[0].HostPath != "/lib/gone.so" || !os.IsNotExist(missing[0].Err) {
		t.Fatalf("missing %+v, want /lib/gone.so", missing)
	}
	for _, m := range s.Mounts {
		switch m.Destination {
		case "/usr/lib/here.so":
			if m.Source != filepath.Join(root, "lib", "here.so") {
				t.Errorf("source %s not re-rooted", m.Source)
			}
		case BinaryPath:
			if m.Source != "/not/under/the/root/nodeprep" {
				t.Errorf("the binary's mount was re-rooted: %s", m.Source)
			}
		}
	}
}

func TestProbeArgv(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	interp := elfInterp(t, exe)
	if interp == "" {
		t.Skip("the test binary is static")
	}
	image := func(files ...string) *hostfs.Root {
		dir := t.TempDir()
		for _, f := range files {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		r, err := hostfs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := filepath.Base(interp)
	if argv, note := probeArgv(exe, image(interp)); !slices.Equal(argv, []string{BinaryPath}) || note != "" {
		t.Errorf("interpreter present: %v %q, want the binary alone", argv, note)
	}
	other := "/lib/" + cdi.MultiarchTuple(runtime.GOARCH) + "/" + base
	if argv, note := probeArgv(exe, image(other)); !slices.Equal(argv, []string{other, BinaryPath}) || !strings.Contains(note, "not in the image") {
		t.Errorf("interpreter elsewhere: %v %q, want the image's %s first", argv, note, other)
	}
	if argv, note := probeArgv(exe, image()); !slices.Equal(argv, []string{BinaryPath}) || !strings.Contains(note, "cannot start") {
		t.Errorf("no interpreter: %v %q", argv, note)
	}
}

func elfInterp(t *testing.T, p string) string {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			data := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(data, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(data), "\x00")
		}
	}
	return ""
}

func TestEscapeOverlay(t *testing.T) {
	t.Parallel()
	if got := escapeOverlay(`/a,b:c\d`); got != `/a\,b\:c\\d` {
		t.Errorf("escapeOverlay = %s", got)
	}
}

func TestNewCacheRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "zz-other.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := NewCache(dir); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "zz-other.json is not a regular file") {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("NewCache blocked on a FIFO")
	}
}

// TestStderrTail: a reason quotes at most the last saidLines lines of a
// probe's stderr, each at most saidLine bytes.
func TestStderrTail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	var many []string
	for i := range 20 {
		many = append(many, fmt.Sprintf("line %d", i))
	}
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"\n  \n", ""},
		{"a\n\nb\n", "a | b"},
		{long, long[:saidLine] + "…"},
		{strings.Join(many, "\n"), "… | " + strings.Join(many[12:], " | ")},
	} {
		if got := stderrTail([]byte(tt.in)); got != tt.want {
			t.Errorf("stderrTail(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
