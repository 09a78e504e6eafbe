package container

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// Reasons only the in-container self-test gives; the probes' reasons are
// the host self-test's (selftest.Reason*).
const (
	// ReasonRuntimeMissing: no OCI runtime could be found or run.
	ReasonRuntimeMissing selftest.ReasonKind = "runtime-missing"
	// ReasonRootfsUnavailable: the rootfs is missing, or its overlay could
	// not be mounted.
	ReasonRootfsUnavailable selftest.ReasonKind = "rootfs-unavailable"
	// ReasonCDIUnresolvable: the CDI library could not inject a device
	// under test; the message is the library's error.
	ReasonCDIUnresolvable selftest.ReasonKind = "cdi-unresolvable"
	// ReasonMountSourceMissing: a mount the spec adds names a host path
	// that does not exist (the runtime would refuse to start).
	ReasonMountSourceMissing selftest.ReasonKind = "mount-source-missing"
	// ReasonRuntimeFailed: the OCI runtime could not start the container.
	ReasonRuntimeFailed selftest.ReasonKind = "runtime-failed"
)

// ErrFailed wraps every failed in-container verdict (Report.Err).
var ErrFailed = errors.New("in-container self-test failed")

// Report is the in-container self-test's result, the `container` section
// of `nodeprep selftest --container`'s report.
type Report struct {
	// Passed is the verdict: true when Reasons is empty.
	Passed bool `json:"passed" yaml:"passed"`
	// Reasons are every container's failures; with more than one container
	// each message starts with the devices it was given.
	Reasons []selftest.Reason `json:"reasons,omitempty" yaml:"reasons,omitempty"`
	// Runtime is the OCI runtime's path; Rootfs the image directory; Spec
	// the host path of the CDI spec whose directory was loaded.
	Runtime string `json:"runtime,omitempty" yaml:"runtime,omitempty"`
	// RuntimeVersion is the first line of the runtime's --version.
	RuntimeVersion string `json:"runtimeVersion,omitempty" yaml:"runtimeVersion,omitempty"`
	// Handler is the runtime handler's program the containers were created
	// through (Options.Handler), "" when the CDI library injected the
	// devices.
	Handler string `json:"handler,omitempty" yaml:"handler,omitempty"`
	Rootfs  string `json:"rootfs" yaml:"rootfs"` // the image's directory on this machine
	Spec    string `json:"spec" yaml:"spec"`     // host path of the CDI spec whose directory the devices came from
	// Containers has one entry per device set: one for all GPUs, or one per
	// GPU (Options.PerGPU).
	Containers []Container `json:"containers" yaml:"containers"`
	// DurationMS is the whole in-container self-test in milliseconds.
	DurationMS float64 `json:"durationMs" yaml:"durationMs"`
}

// Container is one device set's result: the devices injected, what had to
// change for a host tree, and the probes' verdict.
type Container struct {
	// Devices are the fully qualified CDI device names injected
	// ("nvidia.com/gpu=GPU-…").
	Devices []string `json:"devices" yaml:"devices"`
	// Notes say what was adapted to run on a host tree (--root other than
	// "/"): device nodes that are not devices here, hooks that cannot run.
	Notes []string `json:"notes,omitempty" yaml:"notes,omitempty"`
	// Reasons are the failures before a probe could run (CDI injection,
	// mount sources, rootfs, runtime). When set, Selftest is nil.
	Reasons []selftest.Reason `json:"reasons,omitempty" yaml:"reasons,omitempty"`
	// Selftest is selftest.Evaluate's verdict over the container's GPUs and
	// the two probes that ran inside.
	Selftest *selftest.Report `json:"selftest,omitempty" yaml:"selftest,omitempty"`
	// DurationMS is this container set's time in milliseconds: building,
	// both probe containers (run at the same time) and cleanup.
	DurationMS float64 `json:"durationMs" yaml:"durationMs"`
}

// Err returns nil when the in-container self-test passed; otherwise an error
// wrapping ErrFailed with the reasons, marked fault.ErrUnavailable when what
// was missing is the runtime, the rootfs or a library of the image (exit 69),
// else fault.ErrCheckFailed (exit 1; a CDI injection failure carries the
// library's message).
func (r *Report) Err() error {
	if r.Passed {
		return nil
	}
	var msgs []string
	unavailable := false
	for _, x := range r.Reasons {
		msgs = append(msgs, string(x.Kind)+": "+x.Message)
		switch x.Kind {
		case ReasonRuntimeMissing, ReasonRootfsUnavailable, selftest.ReasonLoaderNotFound, selftest.ReasonEGLNotFound, selftest.ReasonCUDANotFound:
			unavailable = true
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "no reason recorded")
	}
	err := fmt.Errorf("%w: %s", ErrFailed, strings.Join(msgs, "; "))
	if unavailable {
		return fault.Unavailable(err)
	}
	return fault.CheckFailed(err)
}

func (r *Report) fail(kind selftest.ReasonKind, format string, args ...any) {
	r.Reasons = append(r.Reasons, selftest.Reason{Kind: kind, Message: fmt.Sprintf(format, args...)})
}

func (c *Container) fail(kind selftest.ReasonKind, format string, args ...any) {
	c.Reasons = append(c.Reasons, selftest.Reason{Kind: kind, Message: fmt.Sprintf(format, args...)})
}
