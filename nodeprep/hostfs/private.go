package hostfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
)

// MaxPrivateEntries bounds the files and directories PrivateDir checks in
// a private directory (a shader cache holds a few hundred): a tree larger
// than this is treated as one nodeprep does not control.
const MaxPrivateEntries = 10000

// ErrNotPrivate is returned (wrapped) by PrivateDir for a directory, or
// something in it, that nodeprep does not control.
var ErrNotPrivate = errors.New("not a private directory nodeprep controls")

// PrivateDir returns where the private directory hostPath is on this
// machine, for a program that writes into it by path (the drivers' shader
// caches). Its parent resolves as every host path does, inside the root;
// hostPath itself must be a directory at its own name (not a link) owned
// by this user and writable by no one else, and everything in it must be
// too: directories of this user's that no one else can write and regular
// files of this user's with one link, no symlink, FIFO, device or socket
// (a link planted inside would send the writes elsewhere on the host), at
// most MaxPrivateEntries of them. With create, a missing directory is made
// (mode 0700) and one that fails these checks is emptied and made anew
// (the caller holds the host lock); without it, a missing directory gives
// an error satisfying errors.Is(err, fs.ErrNotExist) and a failing one an
// error wrapping ErrNotPrivate, and nothing is written.
func (r *Root) PrivateDir(hostPath string, create bool) (string, error) {
	parent, err := r.dirHandle(path.Dir(hostPath), create)
	if err != nil {
		return "", err
	}
	defer parent.Close()
	name := path.Base(hostPath)
	if create {
		if err := unix.Mkdirat(int(parent.Fd()), name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return "", &fs.PathError{Op: "mkdir", Path: hostPath, Err: err}
		}
	}
	d, err := openPrivate(parent, name)
	if err == nil {
		err = checkPrivate(d, hostPath, new(int))
		if create && errors.Is(err, ErrNotPrivate) {
			// Under the lock: what is in it is thrown away, not used.
			if eerr := emptyDir(d); eerr != nil {
				err = fmt.Errorf("%w; emptying it: %w", err, eerr)
			} else {
				err = checkPrivate(d, hostPath, new(int))
			}
		}
	}
	if err != nil {
		if d != nil {
			d.Close()
		}
		if errors.Is(err, unix.ENOENT) {
			return "", &fs.PathError{Op: "open", Path: hostPath, Err: fs.ErrNotExist}
		}
		return "", err
	}
	defer d.Close()
	// The path the drivers get is where the handle is now, and it must be
	// under the root: the name was swapped otherwise.
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil {
		return "", err
	}
	if p != r.dir && !strings.HasPrefix(p, strings.TrimSuffix(r.dir, "/")+"/") {
		return "", fmt.Errorf("%s: the directory moved out of the root, to %s: %w", hostPath, p, ErrNotPrivate)
	}
	return p, nil
}

// openPrivate opens dir/name as a directory without following a link and
// checks that it is this user's and writable by no one else.
func openPrivate(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			st, serr := statAt(dir, name)
			if serr == nil {
				return nil, fmt.Errorf("%s is %s: %w", name, bounded.DescribeMode(modeOf(st)), ErrNotPrivate)
			}
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		f.Close()
		return nil, fmt.Errorf("%s is not private to this user (owner %d, mode %s): others could put shaders in it: %w", name, st.Uid, modeOf(&st), ErrNotPrivate)
	}
	return f, nil
}

// checkPrivate checks everything under the open directory d (shown as
// shown) with PrivateDir's rules, counting entries in n.
func checkPrivate(d *os.File, shown string, n *int) error {
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if *n++; *n > MaxPrivateEntries {
			return fmt.Errorf("%s holds more than %d entries: %w", shown, MaxPrivateEntries, ErrNotPrivate)
		}
		p := shown + "/" + name
		st, err := statAt(d, name)
		if err != nil {
			return err
		}
		m := modeOf(st)
		switch {
		case m.IsDir():
			sub, err := openPrivate(d, name)
			if err != nil {
				return fmt.Errorf("in %s: %w", shown, err)
			}
			err = checkPrivate(sub, p, n)
			sub.Close()
			if err != nil {
				return err
			}
		case !m.IsRegular():
			return fmt.Errorf("%s is %s: %w", p, bounded.DescribeMode(m), ErrNotPrivate)
		case int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0:
			return fmt.Errorf("%s is not private to this user (owner %d, mode %s): %w", p, st.Uid, m, ErrNotPrivate)
		case st.Nlink > 1:
			// A hard link to a file elsewhere: a write into it lands there.
			return fmt.Errorf("%s has %d hard links: %w", p, st.Nlink, ErrNotPrivate)
		}
	}
	return nil
}

// errEmptyFailed marks emptyDir's errors.
var errEmptyFailed = errors.New("could not be emptied")

// emptyDir removes everything in the open directory d, by handle, never
// following a link (a link is removed, not what it names).
func emptyDir(d *os.File) error {
	if _, err := d.Seek(0, 0); err != nil {
		return fmt.Errorf("%w: %w", errEmptyFailed, err)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%w: %w", errEmptyFailed, err)
	}
	for _, name := range names {
		err := unix.Unlinkat(int(d.Fd()), name, 0)
		if errors.Is(err, unix.EISDIR) {
			fd, oerr := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if oerr != nil {
				return fmt.Errorf("%w: %s: %w", errEmptyFailed, name, oerr)
			}
			sub := os.NewFile(uintptr(fd), name)
			err = emptyDir(sub)
			sub.Close()
			if err == nil {
				err = unix.Unlinkat(int(d.Fd()), name, unix.AT_REMOVEDIR)
			}
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			if errors.Is(err, errEmptyFailed) {
				return err
			}
			return fmt.Errorf("%w: %s: %w", errEmptyFailed, name, err)
		}
	}
	if _, err := d.Seek(0, 0); err != nil {
		return fmt.Errorf("%w: %w", errEmptyFailed, err)
	}
	return nil
}
