// Package hostfs is the host root: every host path nodeprep reads or writes
// is resolved under one directory (the --root flag, "/" on a real node), and
// absolute symlinks are re-rooted, so a host tree under testdata/ behaves
// like the machine it copies. Paths given to and returned by a Root are host
// paths ("/run/opengl-driver/lib"), never prefixed with the root.
//
// Resolution uses github.com/cyphar/filepath-securejoin (a link can never
// leave the root). Writes (WriteFile, CheckWritable, Lock, PrivateDir) go
// through a handle to their directory that its pathrs-lite package opens
// inside the root (openat2 RESOLVE_IN_ROOT), then temp file, fsync,
// rename and directory fsync by that handle: a directory swapped for a
// link while nodeprep writes cannot move a write out of the root. Every
// file is opened with O_NONBLOCK and its type checked before it is used,
// so a FIFO, device or socket in place of a file cannot block nodeprep.
package hostfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// Root is a host file system seen under a directory. The zero value is not
// usable; call New.
type Root struct {
	dir string
}

// New returns the Root for dir, which must be an existing directory. A
// relative dir is made absolute. The error is marked fault.ErrUsage.
func New(dir string) (*Root, error) {
	if dir == "" {
		// filepath.Abs("") is the working directory: from "/" an empty
		// $ROOT would quietly mean the real host.
		return nil, fault.Usage(errors.New("host root is empty"))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fault.Usage(fmt.Errorf("host root %q: %w", dir, err))
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fault.Usage(fmt.Errorf("host root: %w", err))
	}
	if !st.IsDir() {
		return nil, fault.Usage(fmt.Errorf("host root %q is not a directory", dir))
	}
	return &Root{dir: abs}, nil
}

// Dir returns the absolute directory the root stands for.
func (r *Root) Dir() string { return r.dir }

// Path returns where hostPath is on this machine: hostPath joined under the
// root with every symlink on the way resolved inside the root. Components
// that do not exist are kept as written. hostPath must be absolute.
func (r *Root) Path(hostPath string) (string, error) {
	if !path.IsAbs(hostPath) {
		return "", fmt.Errorf("host path %q is not absolute", hostPath)
	}
	p, err := securejoin.SecureJoin(r.dir, hostPath)
	if err != nil {
		return "", fmt.Errorf("resolving %q under %q: %w", hostPath, r.dir, err)
	}
	return p, nil
}

// Resolve returns the host path that hostPath finally names after every
// symlink is followed (inside the root), e.g. "/run/opengl-driver/lib/x" →
// "/nix/store/<h>-nvidia-x11/lib/x". The target need not exist.
func (r *Root) Resolve(hostPath string) (string, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return "", err
	}
	return r.hostPathOf(p), nil
}

func (r *Root) hostPathOf(p string) string {
	if r.dir == "/" {
		return p
	}
	rel := strings.TrimPrefix(p, r.dir)
	if rel == "" {
		return "/"
	}
	return rel
}

// Stat returns the file info of what hostPath names, following symlinks
// inside the root. A missing file gives an error that satisfies
// errors.Is(err, fs.ErrNotExist).
func (r *Root) Stat(hostPath string) (fs.FileInfo, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	return os.Stat(p)
}

// Lstat returns the file info of hostPath itself: its parent directories
// are resolved, its last component is not followed.
func (r *Root) Lstat(hostPath string) (fs.FileInfo, error) {
	dir, err := r.Path(path.Dir(hostPath))
	if err != nil {
		return nil, err
	}
	return os.Lstat(filepath.Join(dir, path.Base(hostPath)))
}

// Exists reports whether hostPath names an existing file or directory after
// symlinks are followed (a dangling link does not exist).
func (r *Root) Exists(hostPath string) bool {
	_, err := r.Stat(hostPath)
	return err == nil
}

// ErrNotRegular is returned (wrapped) by ReadFile for a directory, FIFO,
// device or socket.
var ErrNotRegular = errors.New("not a regular file")

// MaxFileSize is the most ReadFile reads of any file, in bytes (64 MiB,
// the size a CDI spec may have, cdi.MaxSpecSize): a larger file is
// refused with ErrTooLarge before anything is read, so no file nodeprep
// reads (a 2 GB sparse manifest, say) can take its size in memory. Files
// with a smaller limit of their own are read with ReadFileLimit.
const MaxFileSize = 64 << 20

// ReadFile reads the regular file hostPath names, following symlinks inside
// the root, of at most MaxFileSize bytes (else an error wrapping
// ErrTooLarge). Anything else (a directory, a FIFO, a device) gives an
// error wrapping ErrNotRegular; a FIFO is opened without blocking, so a
// FIFO in place of a spec or config cannot hang a boot.
func (r *Root) ReadFile(hostPath string) ([]byte, error) {
	return r.ReadFileLimit(hostPath, MaxFileSize)
}

// ErrTooLarge is returned (wrapped) by ReadFileLimit for a file larger
// than its limit.
var ErrTooLarge = errors.New("file too large")

// ReadFileLimit is ReadFile for a file that may have at most limit bytes
// (a k3s config, nodeprep's config): a larger one gives an error wrapping
// ErrTooLarge before anything is read, so a huge or sparse file cannot
// take its size in memory.
func (r *Root) ReadFileLimit(hostPath string, limit int64) ([]byte, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	return readRegular(p, limit)
}

// ReadRegularFile reads the regular file at path on this machine (not under
// a root), with ReadFileLimit's refusals of anything else and of a file
// over limit bytes.
func ReadRegularFile(path string, limit int64) ([]byte, error) { return readRegular(path, limit) }

// OpenRegular opens the regular file hostPath names for reading, following
// symlinks inside the root, without blocking: a FIFO, device, socket or
// directory gives an error wrapping ErrNotRegular, so a reader that needs
// a file handle (debug/buildinfo on a binary) cannot hang on a FIFO. The
// caller closes the file.
func (r *Root) OpenRegular(hostPath string) (*os.File, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	f, _, err := openRegular(p)
	return f, err
}

// openRegular opens the regular file at path without blocking and
// returns it with its Stat.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENXIO) { // a socket cannot be opened at all
		if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
			return nil, nil, fmt.Errorf("%s is %s: %w", path, DescribeMode(st.Mode()), ErrNotRegular)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s: %w", path, DescribeMode(st.Mode()), ErrNotRegular)
	}
	return f, st, nil
}

// readRegular reads the regular file at path, of at most limit bytes
// (also when it grows while it is read).
func readRegular(path string, limit int64) ([]byte, error) {
	f, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, tooLarge(path, st.Size(), limit)
	}
	// One buffer of the file's size (and a little to see the end):
	// io.ReadAll's doubling would hold up to twice a big spec.
	buf := make([]byte, 0, st.Size()+512)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if int64(len(buf)) > limit {
			return nil, tooLarge(path, int64(len(buf)), limit)
		}
		if len(buf) == cap(buf) { // the file grew while we read it
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// tooLarge is the ErrTooLarge error for a file of size bytes over limit.
func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s has %d bytes, more than the %s this file may have: %w", path, size, sizeText(limit), ErrTooLarge)
}

// sizeText writes a limit in MiB or KiB when it is a whole number of them.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadDir lists the directory hostPath names, sorted by name.
func (r *Root) ReadDir(hostPath string) ([]fs.DirEntry, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	return os.ReadDir(p)
}

// Glob returns the host paths that match pattern, in byte order. Only the
// last path element may hold wildcards (filepath.Match syntax); the
// directory part is resolved under the root, and the results keep it as
// written, so a match under "/run/opengl-driver/share" is returned under
// that stable path, not under the store path the link points to.
func (r *Root) Glob(pattern string) ([]string, error) {
	dir, base := path.Split(pattern)
	if strings.ContainsAny(dir, "*?[") {
		return nil, fmt.Errorf("glob %q: wildcards are allowed only in the last element", pattern)
	}
	if _, err := filepath.Match(base, ""); err != nil {
		return nil, fmt.Errorf("glob %q: %w", pattern, err)
	}
	entries, err := r.ReadDir(path.Clean(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("glob %q: %w", pattern, err)
	}
	var out []string
	for _, e := range entries {
		if ok, _ := filepath.Match(base, e.Name()); ok {
			out = append(out, path.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// DescribeMode names a file's type for messages ("a named pipe (FIFO)",
// "a directory"), for the refusals of what is not a regular file.
func DescribeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "not a regular file (mode " + m.String() + ")"
}
