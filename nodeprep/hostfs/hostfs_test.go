package hostfs_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// tree builds a small host: /run/opengl-driver -> /nix/store/x-drv (an
// absolute link, as on NixOS), a link that tries to escape, a dangling one.
func tree(t *testing.T) (*hostfs.Root, string) {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "nix/store/x-drv/share/vulkan/icd.d"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "nix/store/x-drv/share/vulkan/icd.d/nvidia_icd.x86_64.json"), []byte("{}"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "nix/store/x-drv/share/vulkan/icd.d/other.txt"), nil, 0o644))
	must(os.MkdirAll(filepath.Join(dir, "run"), 0o755))
	must(os.Symlink("/nix/store/x-drv", filepath.Join(dir, "run/opengl-driver")))
	must(os.Symlink("/../../../../etc", filepath.Join(dir, "run/escape")))
	must(os.Symlink("/nix/store/gone", filepath.Join(dir, "run/dangling")))
	root, err := hostfs.New(dir)
	must(err)
	return root, dir
}

func TestResolve(t *testing.T) {
	t.Parallel()
	root, dir := tree(t)
	tests := []struct {
		host, want string
	}{
		{"/run/opengl-driver/share/vulkan/icd.d", "/nix/store/x-drv/share/vulkan/icd.d"},
		{"/run/escape/passwd", "/etc/passwd"}, // stays inside the root
		{"/run/dangling", "/nix/store/gone"},
		{"/no/such/file", "/no/such/file"},
	}
	for _, tt := range tests {
		got, err := root.Resolve(tt.host)
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", tt.host, got, err, tt.want)
		}
		p, _ := root.Path(tt.host)
		if p != filepath.Join(dir, tt.want) {
			t.Errorf("Path(%s) = %s, outside or wrong", tt.host, p)
		}
	}
	if _, err := root.Path("relative/path"); err == nil {
		t.Error("relative host path accepted")
	}
	if !root.Exists("/run/opengl-driver/share") || root.Exists("/run/dangling") {
		t.Error("Exists: a dangling link must not exist, a re-rooted one must")
	}
	if st, err := root.Lstat("/run/dangling"); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat does not see the link itself: %v", err)
	}
}

func TestGlobKeepsStablePaths(t *testing.T) {
	t.Parallel()
	root, _ := tree(t)
	got, err := root.Glob("/run/opengl-driver/share/vulkan/icd.d/nvidia_icd*.json")
	if err != nil || len(got) != 1 || got[0] != "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json" {
		t.Errorf("Glob = %v, %v", got, err)
	}
	if got, err := root.Glob("/missing/dir/*.json"); err != nil || len(got) != 0 {
		t.Errorf("Glob of a missing dir = %v, %v", got, err)
	}
	if _, err := root.Glob("/run/*/x.json"); err == nil {
		t.Error("wildcards outside the last element accepted")
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	root, dir := tree(t)
	// New file with MkdirAll and the given mode.
	if err := root.WriteFile("/etc/new/a.yaml", []byte("x"), hostfs.WriteOptions{Mode: 0o600, MkdirAll: true}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "etc/new/a.yaml")); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	// An existing file keeps its mode unless ForceMode.
	os.Chmod(filepath.Join(dir, "etc/new/a.yaml"), 0o640)
	root.WriteFile("/etc/new/a.yaml", []byte("y"), hostfs.WriteOptions{Mode: 0o600})
	if st, _ := os.Stat(filepath.Join(dir, "etc/new/a.yaml")); st.Mode().Perm() != 0o640 {
		t.Errorf("existing mode not kept: %v", st.Mode().Perm())
	}
	root.WriteFile("/etc/new/a.yaml", []byte("z"), hostfs.WriteOptions{Mode: 0o600, ForceMode: true})
	if st, _ := os.Stat(filepath.Join(dir, "etc/new/a.yaml")); st.Mode().Perm() != 0o600 {
		t.Errorf("ForceMode ignored: %v", st.Mode().Perm())
	}
	// Writing through a symlink is refused and changes nothing.
	os.Symlink("a.yaml", filepath.Join(dir, "etc/new/link.yaml"))
	err := root.WriteFile("/etc/new/link.yaml", []byte("evil"), hostfs.WriteOptions{})
	if !errors.Is(err, fault.ErrCantWrite) {
		t.Errorf("write through a symlink: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "etc/new/a.yaml")); string(data) != "z" {
		t.Errorf("target changed: %q", data)
	}
	// A missing directory without MkdirAll is a write error.
	if err := root.WriteFile("/nope/x", nil, hostfs.WriteOptions{}); !errors.Is(err, fault.ErrCantWrite) {
		t.Errorf("missing dir: %v", err)
	}
	// Parent links are followed inside the root: /run/escape/x lands in <root>/etc.
	if err := root.WriteFile("/run/escape/x", []byte("in"), hostfs.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/x")); err != nil {
		t.Errorf("write through a parent link left the root: %v", err)
	}
}

// mustLock takes root's lock without waiting and returns its unlock.
func mustLock(t *testing.T, root *hostfs.Root) func() error {
	t.Helper()
	unlock, err := root.Lock(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return unlock
}

func TestLock(t *testing.T) {
	t.Parallel()
	root, _ := tree(t)
	unlock := mustLock(t, root)
	start := time.Now()
	if _, err := root.Lock(context.Background(), 150*time.Millisecond); !errors.Is(err, fault.ErrLocked) {
		t.Fatalf("second lock: %v", err)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Error("did not wait")
	}
	go func() { time.Sleep(50 * time.Millisecond); unlock() }()
	unlock2, err := root.Lock(context.Background(), 5*time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}

func TestNew(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, err := hostfs.New(dir)
	if err != nil || root.Dir() != dir {
		t.Fatalf("New(%s) = %v, %v", dir, root, err)
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{f, "/no/such/dir"} {
		if _, err := hostfs.New(dir); !errors.Is(err, fault.ErrUsage) {
			t.Errorf("New(%s) = %v, want a usage error", dir, err)
		}
	}
}

func TestReadFileRegularOnly(t *testing.T) {
	t.Parallel()
	root, dir := tree(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "run/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := root.ReadFile("/run/fifo", bounded.MaxConfig); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, bounded.ErrNotRegular) {
			t.Errorf("FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	if _, err := root.ReadFile("/run", bounded.MaxConfig); !errors.Is(err, bounded.ErrNotRegular) {
		t.Errorf("directory: %v", err)
	}
	if data, err := root.ReadFile("/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json", bounded.MaxManifest); err != nil || string(data) != "{}" {
		t.Errorf("regular file through a link: %q, %v", data, err)
	}
}

func TestWriteFileKeepsOwnerAndRefusesDirectories(t *testing.T) {
	t.Parallel()
	root, dir := tree(t)
	p := filepath.Join(dir, "run/owned.json")
	os.WriteFile(p, []byte("old"), 0o640)
	if os.Geteuid() == 0 {
		if err := os.Chown(p, 1234, 5678); err != nil {
			t.Fatal(err)
		}
	}
	if err := root.WriteFile("/run/owned.json", []byte("new"), hostfs.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if sys := st.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (sys.Uid != 1234 || sys.Gid != 5678) {
		t.Errorf("owner %d:%d, want 1234:5678", sys.Uid, sys.Gid)
	}
	os.MkdirAll(filepath.Join(dir, "run/adir"), 0o755)
	if err := root.WriteFile("/run/adir", []byte("x"), hostfs.WriteOptions{}); !errors.Is(err, fault.ErrCantWrite) {
		t.Errorf("writing over a directory: %v", err)
	}
	if _, err := hostfs.New(""); !errors.Is(err, fault.ErrUsage) {
		t.Errorf("empty root: %v", err)
	}
}

// TestDirModeUnderUmask: directories nodeprep creates (the lock's, a
// write's) are 0755 whatever the umask (systemd's UMask=0077).
// Not parallel: the umask is the process's.
func TestDirModeUnderUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	unlock := mustLock(t, root)
	unlock()
	if err := root.WriteFile("/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml", []byte("x"), hostfs.WriteOptions{MkdirAll: true}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"/run", "/run/nodeprep", "/etc", "/etc/rancher/k3s", "/etc/rancher/k3s/config.yaml.d"} {
		st, err := os.Stat(filepath.Join(dir, d))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != hostfs.DirMode {
			t.Errorf("%s is %v, want %v", d, st.Mode().Perm(), hostfs.DirMode)
		}
	}
}

// TestWriteRemovesStaleTemps: a temporary file a killed write left
// (renameio's ".<name><digits>") is removed by the next write of the same
// file; other files that look alike are kept.
func TestWriteRemovesStaleTemps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "run/nodeprep")
	if err := os.MkdirAll(local, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := []string{".status.json8674665223082153551", ".status.json1"}
	kept := []string{".status.json.bak", ".status.jsonx1", ".other.json123", "status.json123"}
	for _, n := range append(append([]string{}, stale...), kept...) {
		if err := os.WriteFile(filepath.Join(local, n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := root.WriteFile("/run/nodeprep/status.json", []byte("{}\n"), hostfs.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range stale {
		if _, err := os.Lstat(filepath.Join(local, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want removed", n, err)
		}
	}
	for _, n := range kept {
		if _, err := os.Lstat(filepath.Join(local, n)); err != nil {
			t.Errorf("%s: %v, want kept", n, err)
		}
	}
}
