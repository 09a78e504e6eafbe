package bounded_test

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestReadFile: a regular file up to its limit is read whole; a larger one
// (a sparse file: no disk used) is refused with bounded.ErrTooLarge naming the
// file and the limit; anything but a regular file is refused with
// bounded.ErrNotRegular at once, never waited on (a FIFO) or read forever
// (/dev/zero).
func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tests := []struct {
		name, path string
		limit      int64
		size       int // the bytes read when there is no error
		want       error
		message    string
	}{
		{"empty", file("empty", 0), bounded.MaxConfig, 0, nil, ""},
		{"at the limit", file("at", 4<<10), 4 << 10, 4 << 10, nil, ""},
		{"one byte over", file("over", bounded.MaxConfig+1), bounded.MaxConfig, 0, bounded.ErrTooLarge, "over has 1048577 bytes, more than the 1 MiB this file may have: file too large"},
		{"3 GiB sparse", file("huge", 3<<30), bounded.MaxCDISpec, 0, bounded.ErrTooLarge, "has 3221225472 bytes, more than the 64 MiB this file may have"},
		{"FIFO", fifo, bounded.MaxConfig, 0, bounded.ErrNotRegular, "fifo is a named pipe (FIFO): not a regular file"},
		{"socket", sock, bounded.MaxConfig, 0, bounded.ErrNotRegular, "sock is a socket: not a regular file"},
		{"directory", dir, bounded.MaxConfig, 0, bounded.ErrNotRegular, "is a directory"},
		{"/dev/zero", "/dev/zero", bounded.MaxConfig, 0, bounded.ErrNotRegular, "/dev/zero is a character device"},
		{"missing", filepath.Join(dir, "nope"), bounded.MaxConfig, 0, fs.ErrNotExist, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				data []byte
				err  error
			)
			testkit.Within(t, 5*time.Second, func() { data, err = bounded.ReadFile(tt.path, tt.limit) })
			if tt.want == nil {
				if err != nil || len(data) != tt.size {
					t.Errorf("bounded.ReadFile = %d bytes, %v; want %d bytes", len(data), err, tt.size)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.message) || data != nil {
				t.Errorf("bounded.ReadFile = %d bytes, %v; want %v naming %q", len(data), err, tt.want, tt.message)
			}
		})
	}
}

// TestReadFileGrowing: a file that grows past its limit while it is read
// (here a file its Stat says is small: /proc's files say 0 bytes) is
// refused once it has read past the limit, not read to its end.
func TestReadFileGrowing(t *testing.T) {
	t.Parallel()
	// /proc/self/maps says 0 bytes and holds more than 16.
	data, err := bounded.ReadFile("/proc/self/maps", 16)
	if !errors.Is(err, bounded.ErrTooLarge) || data != nil {
		t.Errorf("bounded.ReadFile = %d bytes, %v; want bounded.ErrTooLarge", len(data), err)
	}
	if data, err := bounded.ReadFile("/proc/self/maps", bounded.MaxStatus); err != nil || len(data) == 0 {
		t.Errorf("bounded.ReadFile within the limit = %d bytes, %v", len(data), err)
	}
}

// TestOpen: bounded.Open gives a regular file and its Stat, and refuses a FIFO
// without blocking.
func TestOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, st, err := bounded.Open(p)
	if err != nil || st.Size() != 4 {
		t.Fatalf("bounded.Open = %v, %v", st, err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Within(t, 5*time.Second, func() { _, _, err = bounded.Open(fifo) })
	if !errors.Is(err, bounded.ErrNotRegular) {
		t.Errorf("bounded.Open(FIFO) = %v, want bounded.ErrNotRegular", err)
	}
}

// TestReadAll: a stream up to its limit is read whole; a longer one is
// refused with bounded.ErrTooLarge after limit+1 bytes, never read to its end (an
// endless stream here); the stream's own errors come back as they are.
func TestReadAll(t *testing.T) {
	t.Parallel()
	errBroken := errors.New("broken")
	tests := []struct {
		name  string
		r     io.Reader
		limit int64
		size  int
		want  error
	}{
		{"empty", strings.NewReader(""), 10, 0, nil},
		{"at the limit", strings.NewReader("0123456789"), 10, 10, nil},
		{"one byte over", strings.NewReader("0123456789a"), 10, 0, bounded.ErrTooLarge},
		{"endless", testkit.Endless{}, bounded.MaxAPIResponse, 0, bounded.ErrTooLarge},
		{"broken", io.MultiReader(strings.NewReader("abc"), errReader{errBroken}), 10, 0, errBroken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := bounded.ReadAll(tt.r, tt.limit)
			if tt.want == nil {
				if err != nil || len(data) != tt.size {
					t.Errorf("bounded.ReadAll = %d bytes, %v; want %d bytes", len(data), err, tt.size)
				}
				return
			}
			if !errors.Is(err, tt.want) || data != nil {
				t.Errorf("bounded.ReadAll = %d bytes, %v; want %v", len(data), err, tt.want)
			}
		})
	}
	if _, err := bounded.ReadAll(testkit.Endless{}, bounded.MaxAPIResponse); err == nil || !strings.Contains(err.Error(), "more than the 4 MiB nodeprep reads") {
		t.Errorf("bounded.ReadAll's error %v does not name the limit", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// TestDescribeMode names every kind of file a reader may meet in place of
// a regular one.
func TestDescribeMode(t *testing.T) {
	t.Parallel()
	for m, want := range map[fs.FileMode]string{
		fs.ModeNamedPipe:                  "a named pipe (FIFO)",
		fs.ModeSocket:                     "a socket",
		fs.ModeDevice | fs.ModeCharDevice: "a character device",
		fs.ModeDevice:                     "a block device",
		fs.ModeDir:                        "a directory",
		fs.ModeSymlink:                    "a symlink",
		fs.ModeIrregular:                  "not a regular file (mode ?---------)",
	} {
		if got := bounded.DescribeMode(m); got != want {
			t.Errorf("bounded.DescribeMode(%v) = %q, want %q", m, got, want)
		}
	}
}
