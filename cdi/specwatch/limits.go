package specwatch

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLimit is wrapped by the errors of Run when inotify refused an
// instance or a watch for want of one of the kernel's limits.
var ErrLimit = errors.New("an inotify limit was hit")

// procSys is where the kernel's sysctls are read from: the running
// kernel's, not the host root's, since the limits are the kernel's that
// answers the inotify calls.
const procSys = "/proc/sys"

// limit is one of the kernel's limits inotify's calls run into.
type limit struct {
	sysctl   string // its name for sysctl(8)
	userns   string // the same limit per user namespace (user.*), "" for none
	what     string // what ran out, in words
	consumer string // how to find who holds them
}

var (
	limitInstances = limit{"fs.inotify.max_user_instances", "user.max_inotify_instances", "this user's inotify instances are used up", "the processes holding them: ls -l /proc/*/fd | grep inotify"}
	limitWatches   = limit{"fs.inotify.max_user_watches", "user.max_inotify_watches", "this user's inotify watches are used up", "the watchers holding them: grep -c inotify /proc/*/fdinfo/*"}
	limitFiles     = limit{"fs.file-max", "", "the system's open files are used up", "the processes holding them: lsof"}
)

// LimitError explains err, an error of the inotify call op
// (inotify_init1, inotify_add_watch), when it is a limit of the kernel's:
// EMFILE from inotify_init1 (fs.inotify.max_user_instances, inotify(7);
// or this process's RLIMIT_NOFILE, when its descriptors are used up),
// ENFILE (fs.file-max), ENOSPC from inotify_add_watch
// (fs.inotify.max_user_watches). The error names the limit, its sysctl,
// its current value (read from /proc/sys; a user namespace's own user.*
// limit too when it is lower) and the fix, and wraps ErrLimit and err.
// Any other error is returned as it is.
func LimitError(op string, err error) error {
	var l limit
	switch {
	case errors.Is(err, unix.EMFILE):
		if open, max, ok := descriptors(); ok && open+1 >= max {
			return &limitError{msg: fmt.Sprintf("%s: %v: this process's open files are used up (%d of its RLIMIT_NOFILE %d): raise LimitNOFILE= of its unit, or ulimit -n", op, err, open, max), err: err}
		}
		l = limitInstances
	case errors.Is(err, unix.ENFILE):
		l = limitFiles
	case errors.Is(err, unix.ENOSPC):
		l = limitWatches
	default:
		return err
	}
	value, binding := sysctl(l.sysctl), l.sysctl
	msg := fmt.Sprintf("%s: %v: %s: %s is %s", op, err, l.what, l.sysctl, value)
	if l.userns != "" {
		if v := sysctl(l.userns); v != "unknown" && v != value && lower(v, value) {
			msg += fmt.Sprintf(" and %s, this user namespace's own limit, is %s", l.userns, v)
			binding = l.userns
		}
	}
	msg += fmt.Sprintf(": raise %s (sysctl -w %s=<more>; on NixOS boot.kernel.sysctl.%q), or stop %s", binding, binding, binding, l.consumer)
	return &limitError{msg: msg, err: err}
}

// limitError is LimitError's error: its message, and the errno.
type limitError struct {
	msg string
	err error
}

func (e *limitError) Error() string   { return e.msg }
func (e *limitError) Unwrap() []error { return []error{ErrLimit, e.err} }

// sysctl reads a sysctl's value ("fs.inotify.max_user_watches"), or
// "unknown".
func sysctl(name string) string {
	data, err := os.ReadFile(procSys + "/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(data))
}

// lower reports whether the decimal a is below b (as text, both
// non-negative numbers that fit an int).
func lower(a, b string) bool {
	var x, y int
	if _, err := fmt.Sscan(a, &x); err != nil {
		return false
	}
	if _, err := fmt.Sscan(b, &y); err != nil {
		return true
	}
	return x < y
}

// descriptors returns how many files this process has open and its
// RLIMIT_NOFILE soft limit.
func descriptors() (open, max int, ok bool) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, false
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0, false
	}
	return len(fds), int(min(rl.Cur, 1<<31)), true //nolint:gosec // capped
}
