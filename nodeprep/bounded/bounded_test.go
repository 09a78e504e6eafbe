package bounded

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
)

// within runs f and fails the test when it takes longer than d: a read
// that blocks is the failure these tests look for.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("blocked for more than %v", d)
	}
}

// TestReadFile: a regular file up to its limit is read whole; a larger one
// (a sparse file: no disk used) is refused with ErrTooLarge naming the
// file and the limit; anything but a regular file is refused with
// ErrNotRegular at once, never waited on (a FIFO) or read forever
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
		{"empty", file("empty", 0), MaxConfig, 0, nil, ""},
		{"at the limit", file("at", 4<<10), 4 << 10, 4 << 10, nil, ""},
		{"one byte over", file("over", MaxConfig+1), MaxConfig, 0, ErrTooLarge, "over has 1048577 bytes, more than the 1 MiB this file may have: file too large"},
		{"3 GiB sparse", file("huge", 3<<30), MaxCDISpec, 0, ErrTooLarge, "has 3221225472 bytes, more than the 64 MiB this file may have"},
		{"FIFO", fifo, MaxConfig, 0, ErrNotRegular, "fifo is a named pipe (FIFO): not a regular file"},
		{"socket", sock, MaxConfig, 0, ErrNotRegular, "sock is a socket: not a regular file"},
		{"directory", dir, MaxConfig, 0, ErrNotRegular, "is a directory"},
		{"/dev/zero", "/dev/zero", MaxConfig, 0, ErrNotRegular, "/dev/zero is a character device"},
		{"missing", filepath.Join(dir, "nope"), MaxConfig, 0, fs.ErrNotExist, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				data []byte
				err  error
			)
			within(t, 5*time.Second, func() { data, err = ReadFile(tt.path, tt.limit) })
			if tt.want == nil {
				if err != nil || len(data) != tt.size {
					t.Errorf("ReadFile = %d bytes, %v; want %d bytes", len(data), err, tt.size)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.message) || data != nil {
				t.Errorf("ReadFile = %d bytes, %v; want %v naming %q", len(data), err, tt.want, tt.message)
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
	data, err := ReadFile("/proc/self/maps", 16)
	if !errors.Is(err, ErrTooLarge) || data != nil {
		t.Errorf("ReadFile = %d bytes, %v; want ErrTooLarge", len(data), err)
	}
	if data, err := ReadFile("/proc/self/maps", MaxStatus); err != nil || len(data) == 0 {
		t.Errorf("ReadFile within the limit = %d bytes, %v", len(data), err)
	}
}

// TestOpen: Open gives a regular file and its Stat, and refuses a FIFO
// without blocking.
func TestOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, st, err := Open(p)
	if err != nil || st.Size() != 4 {
		t.Fatalf("Open = %v, %v", st, err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() { _, _, err = Open(fifo) })
	if !errors.Is(err, ErrNotRegular) {
		t.Errorf("Open(FIFO) = %v, want ErrNotRegular", err)
	}
}

// TestReadAll: a stream up to its limit is read whole; a longer one is
// refused with ErrTooLarge after limit+1 bytes, never read to its end (an
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
		{"one byte over", strings.NewReader("0123456789a"), 10, 0, ErrTooLarge},
		{"endless", endless{}, MaxAPIResponse, 0, ErrTooLarge},
		{"broken", io.MultiReader(strings.NewReader("abc"), errReader{errBroken}), 10, 0, errBroken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := ReadAll(tt.r, tt.limit)
			if tt.want == nil {
				if err != nil || len(data) != tt.size {
					t.Errorf("ReadAll = %d bytes, %v; want %d bytes", len(data), err, tt.size)
				}
				return
			}
			if !errors.Is(err, tt.want) || data != nil {
				t.Errorf("ReadAll = %d bytes, %v; want %v", len(data), err, tt.want)
			}
		})
	}
	if _, err := ReadAll(endless{}, MaxAPIResponse); err == nil || !strings.Contains(err.Error(), "more than the 4 MiB nodeprep reads") {
		t.Errorf("ReadAll's error %v does not name the limit", err)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
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
		if got := DescribeMode(m); got != want {
			t.Errorf("DescribeMode(%v) = %q, want %q", m, got, want)
		}
	}
}
