// Package fault names the kinds of failure that nodeprep's commands map to
// exit codes (docs/exit-codes.md). Domain packages mark an error with
// its kind; only cmd/ turns kinds into numbers.
//
// A marked error keeps its own message: the kind is found with errors.Is
// (errors.Is(err, fault.ErrMalformed)) and the cause with errors.As/Unwrap.
package fault

import "errors"

// The kinds. Each is a sentinel for errors.Is; the comment gives the exit
// code cmd/ maps it to.
var (
	// ErrCheckFailed: a check found problems, or the node is not ready (exit 1).
	ErrCheckFailed = errors.New("check failed")
	// ErrUsage: the command line is wrong (exit 2).
	ErrUsage = errors.New("usage error")
	// ErrMalformed: an input file or value is malformed or invalid (exit 65,
	// EX_DATAERR).
	ErrMalformed = errors.New("malformed input")
	// ErrUnavailable: a required file, service or library is missing, such
	// as NVML, the Vulkan loader or the CDI spec (exit 69, EX_UNAVAILABLE).
	ErrUnavailable = errors.New("unavailable")
	// ErrCantWrite: an output could not be written (exit 73, EX_CANTCREAT).
	ErrCantWrite = errors.New("cannot write output")
	// ErrLocked: another nodeprep holds the lock (exit 75, EX_TEMPFAIL).
	ErrLocked = errors.New("locked by another nodeprep")
)

// Error is an error marked with a kind. Its message is the cause's message.
type Error struct {
	Kind error // one of the Err* sentinels above
	Err  error // the cause
}

// Error is the cause's message.
func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns both the kind and the cause, so errors.Is and errors.As see
// through to either.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

func mark(kind, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: kind, Err: err}
}

// CheckFailed marks err as a failed check (exit 1). It returns nil for nil.
func CheckFailed(err error) error { return mark(ErrCheckFailed, err) }

// Usage marks err as a usage error (exit 2). It returns nil for nil.
func Usage(err error) error { return mark(ErrUsage, err) }

// Malformed marks err as malformed input (exit 65). It returns nil for nil.
func Malformed(err error) error { return mark(ErrMalformed, err) }

// Unavailable marks err as a missing service or library (exit 69). It returns
// nil for nil.
func Unavailable(err error) error { return mark(ErrUnavailable, err) }

// CantWrite marks err as an output that could not be written (exit 73). It
// returns nil for nil.
func CantWrite(err error) error { return mark(ErrCantWrite, err) }

// Locked marks err as a held lock (exit 75). It returns nil for nil.
func Locked(err error) error { return mark(ErrLocked, err) }
