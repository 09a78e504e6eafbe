package hostfs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// LockPath is the host path of the advisory lock that keeps one nodeprep
// at a time on a host.
const LockPath = "/run/nodeprep/lock"

// Lock takes the host's advisory lock (flock(2) on LockPath under the root),
// waiting up to wait for it (0: do not wait). It returns the function that
// releases it. A lock held by another process past the wait gives an error
// marked fault.ErrLocked; a lock file that cannot be created, one marked
// fault.ErrCantWrite.
func (r *Root) Lock(ctx context.Context, wait time.Duration) (unlock func() error, err error) {
	p, err := r.Path(LockPath)
	if err != nil {
		return nil, fault.CantWrite(fmt.Errorf("taking lock %q: %w", LockPath, err))
	}
	if err := MkdirAll(filepath.Dir(p)); err != nil {
		return nil, fault.CantWrite(fmt.Errorf("taking lock %q: %w", LockPath, err))
	}
	fl := flock.New(p, flock.SetPermissions(0o600))
	ok, err := fl.TryLock()
	if err == nil && !ok && wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		ok, err = fl.TryLockContext(wctx, 50*time.Millisecond)
		if errors.Is(err, context.DeadlineExceeded) {
			err = nil
		}
		if errors.Is(err, context.Canceled) { // SIGTERM while waiting
			return nil, fault.Locked(fmt.Errorf("lock %q is held by another nodeprep; stopped while waiting for it", LockPath))
		}
	}
	if err != nil {
		return nil, fault.CantWrite(fmt.Errorf("taking lock %q: %w", LockPath, err))
	}
	if !ok {
		return nil, fault.Locked(fmt.Errorf("lock %q is held by another nodeprep (waited %s; use --wait to wait longer)", LockPath, wait))
	}
	return fl.Unlock, nil
}
