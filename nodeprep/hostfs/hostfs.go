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
// so a FIFO, device or socket in place of a file cannot block nodeprep;
// reads go through package bounded, with the size limit of what is read.
package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
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

// ReadFile reads the regular file hostPath names, following symlinks
// inside the root, of at most limit bytes (one of bounded's Max* limits):
// bounded.ReadFile on the path under the root, with its errors (wrapping
// bounded.ErrTooLarge for a larger file, bounded.ErrNotRegular for a
// directory, FIFO, device or socket, which is opened without blocking, so
// a FIFO in place of a spec or config cannot hang a boot).
func (r *Root) ReadFile(hostPath string, limit int64) ([]byte, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	return bounded.ReadFile(p, limit)
}

// OpenRegular opens the regular file hostPath names for reading, following
// symlinks inside the root, without blocking: bounded.Open on the path
// under the root, so a FIFO, device, socket or directory gives an error
// wrapping bounded.ErrNotRegular and a reader that needs a file handle
// (debug/buildinfo on a binary) cannot hang on a FIFO. The caller closes
// the file.
func (r *Root) OpenRegular(hostPath string) (*os.File, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	f, _, err := bounded.Open(p)
	return f, err
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
