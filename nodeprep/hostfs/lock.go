package hostfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// LockPath is the host path of the advisory lock that keeps one nodeprep
// at a time on a host.
const LockPath = "/run/nodeprep/lock"

// lockPoll is how often Lock retries a lock another process holds.
const lockPoll = 50 * time.Millisecond

// Lock takes the host's advisory lock (flock(2) on LockPath under the root),
// waiting up to wait for it (0: do not wait) or until ctx ends. It returns
// the function that releases it. The lock file is opened through a handle
// to its directory (never leaving the root), without following a link and
// with O_NONBLOCK, and must be a regular file: a FIFO, device or socket at
// LockPath is refused at once instead of blocking the open, so nothing put
// there can hang a boot. Errors: a lock held by another process past the
// wait, or while ctx ended, is marked fault.ErrLocked; a lock file that
// cannot be created or is not a regular file (or a symlink), fault.ErrCantWrite.
func (r *Root) Lock(ctx context.Context, wait time.Duration) (unlock func() error, err error) {
	f, err := r.openLockFile()
	if err != nil {
		return nil, fault.CantWrite(fmt.Errorf("taking lock %q: %w", LockPath, err))
	}
	fd := int(f.Fd())
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() error {
				return errors.Join(unix.Flock(fd, unix.LOCK_UN), f.Close())
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fault.CantWrite(fmt.Errorf("taking lock %q: %w", LockPath, err))
		}
		left := time.Until(deadline)
		if left <= 0 {
			f.Close()
			return nil, fault.Locked(fmt.Errorf("lock %q is held by another nodeprep (waited %s; use --wait to wait longer)", LockPath, wait))
		}
		t := time.NewTimer(min(left, lockPoll))
		select {
		case <-ctx.Done(): // SIGTERM while waiting
			t.Stop()
			f.Close()
			return nil, fault.Locked(fmt.Errorf("lock %q is held by another nodeprep; stopped while waiting for it", LockPath))
		case <-t.C:
		}
	}
}

// openLockFile opens (creating, mode 0600) the regular file at LockPath.
func (r *Root) openLockFile() (*os.File, error) {
	dir, err := r.dirHandle(path.Dir(LockPath), true)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	name := path.Base(LockPath)
	// Look before opening: a device is not even opened.
	if st, err := statAt(dir, name); err == nil && !modeOf(st).IsRegular() {
		return nil, fmt.Errorf("it is %s, not a regular file", bounded.DescribeMode(modeOf(st)))
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, errors.New("it is a symlink, not a regular file")
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: LockPath, Err: err}
	}
	f := os.NewFile(uintptr(fd), LockPath)
	// And after: what was swapped in between the two.
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("it is %s, not a regular file", bounded.DescribeMode(st.Mode()))
	}
	return f, nil
}
