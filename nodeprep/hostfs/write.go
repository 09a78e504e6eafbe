package hostfs

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// Every write under the root goes through a handle to its directory,
// opened once by pathrs-lite (github.com/cyphar/filepath-securejoin): it
// resolves the path with openat2(RESOLVE_IN_ROOT) where the kernel has it,
// else component by component, so an absolute symlink on the way is
// re-rooted (as Path does) and no link, ".." or rename can carry the
// lookup out of the root. From then on the temporary file, the rename, the
// fsync and the stale-file cleanup are *at calls on that handle: swapping
// the directory for a link to somewhere else after it was opened cannot
// move a write, because nothing is looked up by path again. renameio (the
// atomic write library nodeprep used before) works on path names only, so
// the atomic write is ours: about 60 lines over the same steps.

// dirHandle opens the directory hostDir under the root as a readable
// directory file, creating it and its missing parents (DirMode, whatever
// the umask) when create is set. The lookup never leaves the root.
func (r *Root) dirHandle(hostDir string, create bool) (*os.File, error) {
	if !path.IsAbs(hostDir) {
		return nil, fmt.Errorf("host path %q is not absolute", hostDir)
	}
	rootDir, err := os.OpenFile(r.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	var h *os.File
	if create {
		missing := missingDirs(rootDir, hostDir)
		if h, err = pathrs.MkdirAllHandle(rootDir, hostDir, DirMode); err != nil {
			return nil, fmt.Errorf("creating %s: %w", hostDir, err)
		}
		// MkdirAllHandle's modes are narrowed by the umask (systemd's
		// UMask=0077, say): set DirMode on what it made, by handle.
		for _, d := range missing {
			if err := chmodIn(rootDir, d, DirMode); err != nil {
				h.Close()
				return nil, fmt.Errorf("creating %s: %w", d, err)
			}
		}
	} else if h, err = pathrs.OpenatInRoot(rootDir, hostDir); err != nil {
		return nil, err
	}
	defer h.Close()
	// An O_PATH handle serves the *at calls but not fsync or getdents:
	// reopen the very directory it names (".", no lookup by name).
	fd, err := unix.Openat(int(h.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: hostDir, Err: err}
	}
	return os.NewFile(uintptr(fd), r.dir+hostDir), nil
}

// missingDirs lists hostDir and those of its parents that do not resolve
// under root now, outermost first.
func missingDirs(root *os.File, hostDir string) []string {
	var missing []string
	for d := path.Clean(hostDir); d != "/"; d = path.Dir(d) {
		h, err := pathrs.OpenatInRoot(root, d)
		if err == nil {
			h.Close()
			break
		}
		missing = append([]string{d}, missing...)
	}
	return missing
}

// chmodIn sets mode on the directory hostDir under root, by handle.
func chmodIn(root *os.File, hostDir string, mode fs.FileMode) error {
	h, err := pathrs.OpenatInRoot(root, hostDir)
	if err != nil {
		return err
	}
	defer h.Close()
	fd, err := unix.Openat(int(h.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, uint32(mode.Perm()))
}

// statAt is fstatat(dir, name) without following a link at name.
func statAt(dir *os.File, name string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	return &st, nil
}

// modeOf is the fs.FileMode of a stat result's type and permission bits.
func modeOf(st *unix.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	return m
}

// WriteOptions tunes WriteFile.
type WriteOptions struct {
	// Mode is the mode of a new file. An existing file keeps its own mode
	// unless ForceMode is set.
	Mode fs.FileMode
	// ForceMode applies Mode even when the file exists.
	ForceMode bool
	// MkdirAll creates missing parent directories (DirMode).
	MkdirAll bool
	// Validate, when set, is called with a path to the fully written and
	// synced temporary file (through the directory's handle,
	// /proc/self/fd/N/name) before it replaces the target; an error from
	// it aborts the write, removes the temporary file and is returned as
	// is.
	Validate func(tmpPath string) error
	// Written, when set, is called with the Stat of the fully written
	// temporary file before it replaces the target: its inode, size and
	// modification time are the target's once renamed, so a watcher can
	// tell the event of this write from a later writer's (package
	// cdi/specwatch) with no window between the rename and a stat.
	Written func(fs.FileInfo)
}

// WriteFile replaces the file at hostPath with data atomically and durably:
// a temporary file in the same directory is written and fsynced, renamed
// over the target, and the directory is fsynced, all through one handle to
// the directory (see dirHandle), so a directory swapped for a link while
// it writes cannot move the write out of the root. On any error the old
// file is left as it was. It refuses to write through a symlink at
// hostPath, and to replace anything but a regular file. Temporary files
// an earlier, killed write left for the same target ("."+name+digits) are
// removed first; callers hold the host lock (Lock), so no other nodeprep
// is writing them. Errors are marked fault.ErrCantWrite.
func (r *Root) WriteFile(hostPath string, data []byte, opts WriteOptions) error {
	err := r.writeFile(hostPath, data, opts)
	var v validateError
	if errors.As(err, &v) {
		return v.err
	}
	if err != nil {
		return fault.CantWrite(fmt.Errorf("writing %q: %w", hostPath, err))
	}
	return nil
}

// validateError carries WriteOptions.Validate's error out as is.
type validateError struct{ err error }

func (v validateError) Error() string { return v.err.Error() }

func (r *Root) writeFile(hostPath string, data []byte, opts WriteOptions) error {
	base := path.Base(hostPath)
	dir, err := r.dirHandle(path.Dir(hostPath), opts.MkdirAll)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := removeStaleTemps(dir, base); err != nil {
		return err
	}
	mode := opts.Mode
	if mode == 0 {
		mode = 0o644
	}
	owner, group := -1, -1
	if st, err := statAt(dir, base); err == nil {
		m := modeOf(st)
		switch {
		case m&fs.ModeSymlink != 0:
			return errors.New("refusing to write through a symlink")
		case !m.IsRegular():
			return fmt.Errorf("it is %s, not a regular file", bounded.DescribeMode(m))
		}
		if !opts.ForceMode {
			mode = m.Perm()
		}
		owner, group = int(st.Uid), int(st.Gid)
	} else if !errors.Is(err, unix.ENOENT) {
		return &fs.PathError{Op: "stat", Path: hostPath, Err: err}
	}
	tmp, f, err := createTemp(dir, base)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = unix.Unlinkat(int(dir.Fd()), tmp, 0)
		}
	}()
	// The mode is set, not asked for: open's mode is narrowed by the umask.
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if owner >= 0 {
		// The replacement keeps the old file's owner; only root can give a
		// file away, and then a failure is an error.
		if err := f.Chown(owner, group); err != nil && os.Geteuid() == 0 {
			return fmt.Errorf("keeping its owner: %w", err)
		}
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if opts.Written != nil {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		opts.Written(st)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if opts.Validate != nil {
		if err := opts.Validate("/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + tmp); err != nil {
			return validateError{err}
		}
	}
	if err := unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), base); err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: base, Err: err}
	}
	done = true
	// Without the directory's fsync a crash can lose the rename.
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("syncing directory: %w", err)
	}
	return nil
}

// createTemp creates a new temporary file for base in dir, named "." +
// base + a decimal number (isTempName), never following a link and never
// opening an existing file.
func createTemp(dir *os.File, base string) (string, *os.File, error) {
	for range 100 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := "." + base + strconv.FormatUint(binary.LittleEndian.Uint64(b[:])>>1, 10)
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, &fs.PathError{Op: "create", Path: name, Err: err}
		}
		return name, os.NewFile(uintptr(fd), name), nil
	}
	return "", nil, fmt.Errorf("creating a temporary file for %s: every name tried exists", base)
}

// CheckWritable proves, without touching hostPath, that WriteFile could
// replace it: the path is absolute, not a directory, symlink or FIFO, and a
// temporary file named like WriteFile's can be created (and is removed) in
// its directory, which catches read-only mounts and names too long for the
// file system. With mkdir a missing directory is created (as WriteFile's
// MkdirAll would). Errors are marked fault.ErrCantWrite.
func (r *Root) CheckWritable(hostPath string, mkdir bool) error {
	if err := r.checkWritable(hostPath, mkdir); err != nil {
		return fault.CantWrite(fmt.Errorf("checking %q: %w", hostPath, err))
	}
	return nil
}

func (r *Root) checkWritable(hostPath string, mkdir bool) error {
	base := path.Base(hostPath)
	if strings.HasSuffix(hostPath, "/") || base == "/" || base == "." {
		return errors.New("it names a directory, not a file")
	}
	dir, err := r.dirHandle(path.Dir(hostPath), mkdir)
	if err != nil {
		return err
	}
	defer dir.Close()
	if st, err := statAt(dir, base); err == nil {
		if m := modeOf(st); !m.IsRegular() {
			return fmt.Errorf("it is %s, not a regular file", bounded.DescribeMode(m))
		}
		// An immutable file (chattr +i) cannot be replaced by a rename
		// either; opening it for writing (no truncation, nothing
		// written) says so before anything else is written. O_NONBLOCK
		// and O_NOFOLLOW: a FIFO or link swapped in since cannot block.
		fd, err := unix.Openat(int(dir.Fd()), base, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: hostPath, Err: err}
		}
		unix.Close(fd)
	}
	tmp, f, err := createTemp(dir, base)
	if err != nil {
		return err
	}
	cerr := f.Close()
	if err := errors.Join(cerr, unix.Unlinkat(int(dir.Fd()), tmp, 0)); err != nil {
		return fmt.Errorf("probe file %s: %w", tmp, err)
	}
	return nil
}

// RemoveFile removes the regular file hostPath names, by a handle to its
// directory (never leaving the root), and fsyncs the directory. A missing
// file is not an error; anything but a regular file is refused. Errors are
// marked fault.ErrCantWrite.
func (r *Root) RemoveFile(hostPath string) error {
	err := func() error {
		dir, err := r.dirHandle(path.Dir(hostPath), false)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		defer dir.Close()
		base := path.Base(hostPath)
		st, err := statAt(dir, base)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		if m := modeOf(st); !m.IsRegular() {
			return fmt.Errorf("it is %s, not a regular file", bounded.DescribeMode(m))
		}
		if err := unix.Unlinkat(int(dir.Fd()), base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		return dir.Sync()
	}()
	if err != nil {
		return fault.CantWrite(fmt.Errorf("removing %q: %w", hostPath, err))
	}
	return nil
}

// DirMode is the mode of every directory nodeprep creates (/run/nodeprep,
// the drop-in directory): readable by all, as the files in them are
// (status.json is for monitoring agents), whatever the process's umask.
const DirMode fs.FileMode = 0o755

// MkdirAll creates the directory hostDir under the root and its missing
// parents with DirMode, set explicitly on each directory it creates so
// that a umask (systemd's UMask=0077, say) cannot narrow it. Existing
// directories are left as they are. The lookup never leaves the root.
func (r *Root) MkdirAll(hostDir string) error {
	d, err := r.dirHandle(hostDir, true)
	if err != nil {
		return err
	}
	return d.Close()
}

// isTempName reports whether name is a temporary file WriteFile made for
// base: "." + base + a decimal number (createTemp; renameio, used before,
// named them the same way).
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
func removeStaleTemps(dir *os.File, base string) error {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	// Readdirnames moved the directory's offset; the fd serves only *at
	// calls and fsync from here, which do not use it.
	for _, name := range names {
		if !isTempName(name, base) {
			continue
		}
		st, err := statAt(dir, name)
		if err != nil || modeOf(st)&fs.ModeType != 0 {
			continue
		}
		if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing a stale temporary file: %w", err)
		}
	}
	return nil
}
