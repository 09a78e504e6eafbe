package nodeprep

import (
	"log/slog"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
)

// Notifier tells the service manager how the run goes: the cmd layer
// passes one over sd_notify(3) (github.com/coreos/go-systemd daemon);
// nil means nothing is sent.
type Notifier interface {
	// Notify sends a state string such as "READY=1\nSTATUS=ready".
	Notify(state string) error
}

// UpOptions is everything `nodeprep up` needs; the cmd layer fills it from
// flags and the config file. The steps read their options from it, so
// health fills in the fields its stages use.
type UpOptions struct {
	// Inventory builds the GPU inventory (NVML or a simulated server).
	Inventory func() (*gpu.Inventory, error)
	// CDI names the spec and the driver root; DeviceNames are the
	// device-name strategies the spec must serve (nodepolicy.DeviceNameUUID, ...).
	CDI         cdi.FileOptions
	DeviceNames []string // device-name strategies the spec must serve (nodepolicy.DeviceNameUUID, ...)
	// Selftest are the self-test's options (child command, loader, timeout).
	Selftest []selftest.Option
	// Container, when set, also runs the self-test inside an OCI container
	// started with the patched spec's devices (selftest/container).
	Container *container.Options
	// Join is the k3s drop-in to write; its Labels are computed here from
	// the inventory and the self-test (GFD labels when nodepolicy.GFDLabels), with
	// ExtraLabels added; its Taints are used as given (plus nodepolicy.UnhealthyTaint
	// under nodepolicy.PolicyTaint).
	Join        k3s.Options
	GFDLabels   bool        // add GFD's nvidia.com/ labels
	MIGStrategy string      // GFD's MIG strategy for the MIG labels (nodepolicy.MIGStrategyNone, …)
	ExtraLabels []k3s.Label // the user's labels; they win over generated ones
	// OnSelftestFailure is nodepolicy.PolicyBlock (default) or nodepolicy.PolicyTaint.
	OnSelftestFailure string
	// StatusFile is the host path of the status report (written always).
	StatusFile string
	// MetricsFile is the host path of the Prometheus textfile ("" = none).
	MetricsFile string
	Notifier    Notifier     // sd_notify, or nil
	Log         *slog.Logger // diagnostics (nil: discarded)
	// Now is the clock (time.Now when nil).
	Now     func() time.Time
	Version string // nodeprep's version, for the report
	// Hint, when set, returns advice for a stage's error (the command
	// layer names the flag that helps: --root under --simulate), put
	// after the error in its reason in parentheses; "" for none.
	Hint func(error) string
}
