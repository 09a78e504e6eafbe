// Package hostfs is the host root: every host path nodeprep reads or writes
// is resolved under one directory (the --root flag, "/" on a real node), and
// absolute symlinks are re-rooted, so a host tree under testdata/ behaves
// like the machine it copies. Paths given to and returned by a Root are host
// paths ("/run/opengl-driver/lib"), never prefixed with the root.
//
// Resolution uses github.com/cyphar/filepath-securejoin (a link can never
// leave the root); writes use github.com/google/renameio/v2 (temp file in
// the same directory, fsync, rename) followed by an fsync of the directory.
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
	"github.com/google/renameio/v2"

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

// ReadFile reads the regular file hostPath names, following symlinks inside
// the root. Anything else (a directory, a FIFO, a device) gives an error
// wrapping ErrNotRegular; a FIFO is opened without blocking, so a FIFO in
// place of a spec or config cannot hang a boot.
func (r *Root) ReadFile(hostPath string) ([]byte, error) {
	p, err := r.Path(hostPath)
	if err != nil {
		return nil, err
	}
	return ReadRegularFile(p)
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
// a root), with ReadFile's refusal of anything else.
func ReadRegularFile(path string) ([]byte, error) { return readRegular(path, -1) }

// readRegular reads the regular file at path; limit < 0 means no limit.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s: %w", path, DescribeMode(st.Mode()), ErrNotRegular)
	}
	if limit >= 0 && st.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d this file may have: %w", path, st.Size(), limit, ErrTooLarge)
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
		if len(buf) == cap(buf) { // the file grew while we read it
			buf = append(buf, 0)[:len(buf)]
		}
	}
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

// WriteOptions tunes WriteFile.
type WriteOptions struct {
	// Mode is the mode of a new file. An existing file keeps its own mode
	// unless ForceMode is set.
	Mode fs.FileMode
	// ForceMode applies Mode even when the file exists.
	ForceMode bool
	// MkdirAll creates missing parent directories (mode 0755).
	MkdirAll bool
	// Validate, when set, is called with the path of the fully written and
	// synced temporary file before it replaces the target; an error from it
	// aborts the write, removes the temporary file and is returned as is.
	Validate func(tmpPath string) error
}

// WriteFile replaces the file at hostPath with data atomically and durably:
// a temporary file in the same directory is written and fsynced, renamed
// over the target, and the directory is fsynced. On any error the old file
// is left as it was. It refuses to write through a symlink at hostPath.
// Temporary files an earlier, killed write left for the same target
// (renameio's ".<name><digits>") are removed first; callers hold the host
// lock (Lock), so no other nodeprep is writing them.
// Errors other than the validator's are marked fault.ErrCantWrite.
func (r *Root) WriteFile(hostPath string, data []byte, opts WriteOptions) error {
	dir, err := r.Path(path.Dir(hostPath))
	if err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	if opts.MkdirAll {
		if err := MkdirAll(dir); err != nil {
			return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
		}
	}
	target := filepath.Join(dir, path.Base(hostPath))
	if err := removeStaleTemps(dir, path.Base(hostPath)); err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	mode := opts.Mode
	if mode == 0 {
		mode = 0o644
	}
	owner := -1
	var group int
	if st, err := os.Lstat(target); err == nil {
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			return fault.CantWrite(fmt.Errorf("writing %q: refusing to write through a symlink", hostPath))
		case !st.Mode().IsRegular():
			return fault.CantWrite(fmt.Errorf("writing %q: it is %s, not a regular file", hostPath, DescribeMode(st.Mode())))
		}
		if !opts.ForceMode {
			mode = st.Mode().Perm()
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			owner, group = int(sys.Uid), int(sys.Gid)
		}
	}
	// WithTempDir: the temporary file goes in the target's own directory
	// (renameio otherwise tries the system temp dir first, outside the root).
	pf, err := renameio.NewPendingFile(target, renameio.WithTempDir(dir), renameio.WithStaticPermissions(mode))
	if err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	defer pf.Cleanup() //nolint:errcheck // a no-op after a successful replace
	if owner >= 0 {
		// The replacement keeps the old file's owner; only root can give a
		// file away, and then a failure is an error.
		if err := pf.Chown(owner, group); err != nil && os.Geteuid() == 0 {
			return fault.CantWrite(fmt.Errorf("writing %q: keeping its owner: %w", hostPath, err))
		}
	}
	if _, err := pf.Write(data); err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	if err := pf.Sync(); err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	if opts.Validate != nil {
		if err := opts.Validate(pf.Name()); err != nil {
			return err
		}
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	// renameio syncs the file but not the directory that holds the new name;
	// without this a crash can lose the rename.
	if err := syncDir(dir); err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: syncing directory: %w", hostPath, err))
	}
	return nil
}

// CheckWritable proves, without touching hostPath, that WriteFile could
// replace it: the path is absolute, not a directory, symlink or FIFO, and a
// temporary file named like WriteFile's can be created (and is removed) in
// its directory, which catches read-only mounts and names too long for the
// file system. With mkdir a missing directory is created (as WriteFile's
// MkdirAll would). Errors are marked fault.ErrCantWrite.
func (r *Root) CheckWritable(hostPath string, mkdir bool) error {
	dir, err := r.Path(path.Dir(hostPath))
	if err != nil {
		return fault.CantWrite(fmt.Errorf("checking %q: %w", hostPath, err))
	}
	if mkdir {
		if err := MkdirAll(dir); err != nil {
			return fault.CantWrite(fmt.Errorf("checking %q: %w", hostPath, err))
		}
	}
	target := filepath.Join(dir, path.Base(hostPath))
	if st, err := os.Lstat(target); err == nil {
		if !st.Mode().IsRegular() {
			return fault.CantWrite(fmt.Errorf("checking %q: it is %s, not a regular file", hostPath, DescribeMode(st.Mode())))
		}
		// An immutable file (chattr +i) cannot be replaced by a rename
		// either; opening it for writing (no truncation, nothing
		// written) says so before anything else is written.
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return fault.CantWrite(fmt.Errorf("checking %q: %w", hostPath, err))
		}
		f.Close()
	}
	f, err := os.CreateTemp(dir, "."+path.Base(hostPath)+"*")
	if err != nil {
		return fault.CantWrite(fmt.Errorf("checking %q: %w", hostPath, err))
	}
	cerr := f.Close()
	if err := errors.Join(cerr, os.Remove(f.Name())); err != nil {
		return fault.CantWrite(fmt.Errorf("checking %q: probe file %s: %w", hostPath, f.Name(), err))
	}
	return nil
}

// DirMode is the mode of every directory nodeprep creates (/run/nodeprep,
// the drop-in directory): readable by all, as the files in them are
// (status.json is for monitoring agents), whatever the process's umask.
const DirMode fs.FileMode = 0o755

// MkdirAll creates dir (a path on this machine) and its missing parents
// with DirMode, setting the mode explicitly on each directory it creates
// so that a umask (systemd's UMask=0077, say) cannot narrow it. Existing
// directories are left as they are.
func MkdirAll(dir string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	for _, d := range missing {
		if err := os.Chmod(d, DirMode); err != nil {
			return err
		}
	}
	return nil
}

// isTempName reports whether name is a temporary file renameio made for
// base: "." + base + a decimal number (renameio's openTempFile).
func isTempName(name, base string) bool {
	digits, ok := strings.CutPrefix(name, "."+base)
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// removeStaleTemps removes the regular files in dir that isTempName names
// for base: what a write killed between creating and renaming its
// temporary file (SIGKILL, power loss) left behind.
func removeStaleTemps(dir, base string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && isTempName(e.Name(), base) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing a stale temporary file: %w", err)
			}
		}
	}
	return nil
}

// describeMode names a file type for messages ("a directory").
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
