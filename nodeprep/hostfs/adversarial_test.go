package hostfs_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// plant makes what kind names at p: a FIFO, a socket, a symlink to an
// outside directory, or a directory.
func plant(t *testing.T, kind, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	switch kind {
	case "fifo":
		err = syscall.Mkfifo(p, 0o600)
	case "socket":
		// A socket's path must fit sun_path (108 bytes), which a test's
		// temp dir under a private TMPDIR may not: bind at a short path,
		// then move the socket into place.
		short, derr := os.MkdirTemp("", "sock")
		if derr != nil {
			t.Fatal(derr)
		}
		t.Cleanup(func() { os.RemoveAll(short) })
		var l *net.UnixListener
		if l, err = net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(short, "s"), Net: "unix"}); err == nil {
			l.SetUnlinkOnClose(false)
			t.Cleanup(func() { l.Close() })
			err = os.Rename(filepath.Join(short, "s"), p)
		}
	case "symlink":
		err = os.Symlink(t.TempDir(), p)
	case "directory":
		err = os.Mkdir(p, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestLockRefusesNonRegular: a FIFO, socket, link or directory at the lock
// path is refused at once (ErrCantWrite, naming what it is), whatever the
// wait: nothing there can block the open (issue 22: a FIFO hung every
// command forever).
func TestLockRefusesNonRegular(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"fifo", "socket", "symlink", "directory"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			plant(t, kind, filepath.Join(dir, "run/nodeprep/lock"))
			root, err := hostfs.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			testkit.Within(t, 2*time.Second, func() {
				_, err = root.Lock(context.Background(), time.Minute)
			})
			if !errors.Is(err, fault.ErrCantWrite) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Lock = %v, want ErrCantWrite naming what stands there", err)
			}
		})
	}
}

// TestLockWaitEndsWithContext: a held lock waited for ends when ctx ends
// (SIGTERM), not at the end of the wait.
func TestLockWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	root, _ := tree(t)
	unlock := mustLock(t, root)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var err error
	testkit.Within(t, 2*time.Second, func() { _, err = root.Lock(ctx, time.Hour) })
	if !errors.Is(err, fault.ErrLocked) || !strings.Contains(err.Error(), "stopped while waiting") {
		t.Errorf("Lock = %v", err)
	}
}

// TestWritesRefuseNonRegularWithoutBlocking: WriteFile and CheckWritable
// refuse a FIFO or socket at the target at once, and ReadFile a FIFO.
func TestWritesRefuseNonRegularWithoutBlocking(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"fifo", "socket"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			plant(t, kind, filepath.Join(dir, "run/nodeprep/status.json"))
			root, _ := hostfs.New(dir)
			var werr, cerr, rerr error
			testkit.Within(t, 2*time.Second, func() {
				werr = root.WriteFile("/run/nodeprep/status.json", []byte("{}"), hostfs.WriteOptions{})
				cerr = root.CheckWritable("/run/nodeprep/status.json", false)
				_, rerr = root.ReadFile("/run/nodeprep/status.json", bounded.MaxStatus)
			})
			for _, err := range []error{werr, cerr} {
				if !errors.Is(err, fault.ErrCantWrite) || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("write: %v", err)
				}
			}
			if !errors.Is(rerr, bounded.ErrNotRegular) {
				t.Errorf("read: %v", rerr)
			}
		})
	}
}

// TestCheckWritableRefusesDirectoryName: a status path ending in "/" names
// a directory; it is refused, not written as a file inside it.
func TestCheckWritableRefusesDirectoryName(t *testing.T) {
	t.Parallel()
	root, _ := tree(t)
	if err := root.CheckWritable("/run/nodeprep/", true); !errors.Is(err, fault.ErrCantWrite) {
		t.Errorf("CheckWritable(/run/nodeprep/) = %v", err)
	}
}

// TestPrivateDir: the shader cache is used only when nodeprep controls
// what is in it. A link, FIFO or hard link planted inside makes it
// unusable without create (nothing written), and with create (under the
// lock) it is emptied: the planted entry goes, what it pointed to stays
// untouched.
func TestPrivateDir(t *testing.T) {
	t.Parallel()
	const cache = "/run/nodeprep/shader-cache"
	tests := []struct {
		name  string
		plant func(t *testing.T, dir, outside string)
	}{
		{"symlink inside", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, filepath.Join(dir, "mesa_shader_cache")); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink deeper", func(t *testing.T, dir, outside string) {
			if err := os.MkdirAll(filepath.Join(dir, "mesa_shader_cache/ab"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(dir, "mesa_shader_cache/ab/cd")); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, dir, _ string) {
			if err := syscall.Mkfifo(filepath.Join(dir, "index"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"hard link", func(t *testing.T, dir, outside string) {
			o := filepath.Join(outside, "victim")
			if err := os.WriteFile(o, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(o, filepath.Join(dir, "index")); err != nil {
				t.Skipf("hard link across directories: %v", err)
			}
		}},
		{"group-writable directory inside", func(t *testing.T, dir, _ string) {
			d := filepath.Join(dir, "mesa_shader_cache")
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o770); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root, dir := tree(t)
			p, err := root.PrivateDir(cache, true)
			if err != nil || p != filepath.Join(dir, cache) {
				t.Fatalf("PrivateDir(create) = %q, %v", p, err)
			}
			outside := filepath.Join(dir, "../outside") // beside the root
			if err := os.Mkdir(outside, 0o700); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(outside) })
			tt.plant(t, p, outside)
			var got string
			testkit.Within(t, 2*time.Second, func() { got, err = root.PrivateDir(cache, false) })
			if !errors.Is(err, hostfs.ErrNotPrivate) {
				t.Errorf("without create: %q, %v; want ErrNotPrivate", got, err)
			}
			if got, err = root.PrivateDir(cache, true); err != nil || got != p {
				t.Fatalf("with create: %q, %v", got, err)
			}
			if ents, _ := os.ReadDir(p); len(ents) != 0 {
				t.Errorf("the cache was not emptied: %v", ents)
			}
			if data, err := os.ReadFile(filepath.Join(outside, "victim")); err == nil && string(data) != "keep" {
				t.Errorf("emptying the cache changed a file outside: %q", data)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		root, dir := tree(t)
		if _, err := root.PrivateDir(cache, false); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("without create: %v, want ErrNotExist", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "run/nodeprep")); err == nil {
			t.Error("PrivateDir without create made a directory")
		}
	})
}
