package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nodeprep/nodeprep/nodeprep/child"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// DefaultTimeout bounds the NVML child (nvml.timeout, --nvml-timeout):
// nvmlInit and the queries of a healthy 8-GPU server take well under a
// second; a driver that has not answered in 5 s is hung.
const DefaultTimeout = 5 * time.Second

// Errors of the NVML child, each marked fault.ErrUnavailable (exit 69).
var (
	// ErrHung: NVML did not answer within the timeout (a hung nvmlInit or
	// query: a GPU that fell off the bus, a wedged kernel module); the
	// child was killed.
	ErrHung = errors.New("NVML did not answer in time")
	// ErrCrashed: the NVML child died of a signal (a crash in the driver)
	// or exited without an inventory (the dynamic linker ended it).
	ErrCrashed = errors.New("NVML crashed")
	// ErrCancelled: nodeprep was asked to stop (SIGTERM) while NVML ran.
	ErrCancelled = errors.New("cancelled while reading NVML")
	// ErrReportTooLarge: the NVML child's inventory was longer than
	// child.MaxReport (tens of thousands of GPUs): it did not crash, and
	// nothing of it is used.
	ErrReportTooLarge = errors.New("NVML inventory report too large")
)

// Child says how to start the NVML child: Path and Args are the command
// line that answers with ServeInventory (nodeprep passes its own
// executable and "__inventory --report-pipe"); the request is appended.
type Child struct {
	Path string
	Args []string
	Env  []string // nil: inherit
}

// inventoryRequest is the NVML child's only argument, as JSON.
type inventoryRequest struct {
	Library string `json:"library"` // "" = DefaultLibrary through the dynamic linker
}

// inventoryReply is the NVML child's report: an inventory or an error.
type inventoryReply struct {
	Inventory *Inventory  `json:"inventory,omitempty"`
	Error     *replyError `json:"error,omitempty"`
}

// replyError carries an error of FromNVML across the process boundary:
// the sentinel by name, the nvml.Return, the message, and a LibraryError's
// fields.
type replyError struct {
	Kind     string `json:"kind"`
	Return   int32  `json:"return"`
	Message  string `json:"message"`
	Library  string `json:"library,omitempty"`
	Searched string `json:"searched,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

var sentinels = map[string]error{
	"library-not-found": ErrLibraryNotFound,
	"driver-not-loaded": ErrDriverNotLoaded,
	"version-mismatch":  ErrVersionMismatch,
	"init":              ErrInit,
}

// ServeInventory is the NVML child's body: it decodes request, installs
// the crash report (child.InstallCrashReport), reads the inventory with
// FromNVML in this process and writes "report <JSON>" to report (the
// private pipe, child.ChildReport). FromNVML's error travels in the
// report; the error returned is for a bad request or a failed write.
func ServeInventory(request string, report *os.File) error {
	var req inventoryRequest
	if err := json.Unmarshal([]byte(request), &req); err != nil {
		return fault.Usage(fmt.Errorf("bad inventory request: %w", err))
	}
	if err := child.InstallCrashReport(report); err != nil {
		return err
	}
	var reply inventoryReply
	inv, err := FromNVML(req.Library)
	if err != nil {
		reply.Error = toReply(err)
	} else {
		reply.Inventory = inv
	}
	data, err := json.Marshal(reply)
	if err != nil {
		return fmt.Errorf("encoding the inventory: %w", err)
	}
	if _, err := report.Write(append(append([]byte("report "), data...), '\n')); err != nil {
		return fmt.Errorf("writing the inventory: %w", err)
	}
	return nil
}

func toReply(err error) *replyError {
	r := &replyError{Kind: "other", Message: err.Error()}
	for k, s := range sentinels {
		if errors.Is(err, s) {
			r.Kind = k
		}
	}
	var ret nvml.Return
	if errors.As(err, &ret) {
		r.Return = int32(ret)
	}
	if le, ok := errors.AsType[*LibraryError](err); ok {
		r.Library, r.Searched, r.Detail = le.Library, le.Searched, le.Detail
	}
	return r
}

// remoteError is an error of the NVML child rebuilt in the parent: its
// message, and the sentinel and nvml.Return it wrapped.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

func (r *replyError) err() error {
	ret := nvml.Return(r.Return)
	if r.Kind == "library-not-found" {
		return fault.Unavailable(&LibraryError{Library: r.Library, Searched: r.Searched, Detail: r.Detail, Return: ret})
	}
	e := &remoteError{msg: r.Message}
	if s, ok := sentinels[r.Kind]; ok {
		e.errs = append(e.errs, s)
	}
	if r.Return != 0 {
		e.errs = append(e.errs, ret)
	}
	return fault.Unavailable(e)
}

// FromNVMLChild reads the inventory like FromNVML, but in a child process
// (c, which must answer with ServeInventory) bounded by timeout (0:
// DefaultTimeout) and ctx: a hung nvmlInit or query, a crash in the
// driver, or a library without a symbol go-nvml calls cannot take nodeprep
// with them. Why a child and not a watchdog: docs/faults.md.
//
// Errors: those of FromNVML (rebuilt: errors.Is finds the same sentinels
// and nvml.Return); ErrHung after the timeout, ErrCancelled when ctx
// ends, ErrCrashed when the child died or exited without an inventory,
// ErrReportTooLarge when its report was longer than child.MaxReport,
// each marked fault.ErrUnavailable and quoting what the child printed.
func FromNVMLChild(ctx context.Context, c Child, libraryPath string, timeout time.Duration) (*Inventory, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	req, err := json.Marshal(inventoryRequest{Library: libraryPath})
	if err != nil {
		return nil, err
	}
	lib := libraryPath
	if lib == "" {
		lib = DefaultLibrary
	}
	res := child.Run(ctx, child.Spec{Path: c.Path, Args: append(append([]string{}, c.Args...), string(req)), Env: c.Env, Timeout: timeout})
	if res.ReportTooLarge && res.Crash == nil {
		return nil, fault.Unavailable(fmt.Errorf("%w: the NVML child's report (%s) was longer than the %d MiB nodeprep reads (child.MaxReport), so nothing of it is used; an 8-GPU inventory is about 10 KiB, so NVML reported far more GPUs than a node has", ErrReportTooLarge, lib, child.MaxReport>>20))
	}
	if res.Report != nil && res.Crash == nil {
		var reply inventoryReply
		dec := json.NewDecoder(strings.NewReader(string(res.Report)))
		dec.DisallowUnknownFields()
		switch err := dec.Decode(&reply); {
		case err != nil:
			return nil, fault.Unavailable(fmt.Errorf("%w: reading the NVML child's report: %w", ErrCrashed, err))
		case reply.Error != nil:
			return nil, reply.Error.err()
		case reply.Inventory == nil:
			return nil, fault.Unavailable(fmt.Errorf("%w: the NVML child reported neither an inventory nor an error", ErrCrashed))
		}
		return reply.Inventory, nil
	}
	what := fmt.Sprintf("reading the GPU inventory from NVML (%s): the NVML child %s%s", lib, res.Describe(timeout), res.Note())
	switch res.Ending {
	case child.EndTimeout, child.EndStuck:
		return nil, fault.Unavailable(fmt.Errorf("%w: %s (a hung driver, or a GPU that fell off the bus? see dmesg for Xid errors; nvml.timeout / --nvml-timeout sets the bound)", ErrHung, what))
	case child.EndCancelled:
		return nil, fault.Unavailable(fmt.Errorf("%w: %s", ErrCancelled, what))
	case child.EndNotRun:
		return nil, fault.Unavailable(fmt.Errorf("reading the GPU inventory: %w", res.Err))
	}
	return nil, fault.Unavailable(fmt.Errorf("%w: %s", ErrCrashed, what))
}
