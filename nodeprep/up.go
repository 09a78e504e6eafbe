package nodeprep

import (
	"context"
	"errors"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// Up runs the boot pipeline: inventory, CDI patch, self-test, join, in
// that order, stopping at the first stage that makes the node unsafe.
//
// It first plans: it reads the inventory and every stage's inputs and
// validates them (the spec and its patch, the k3s config files and
// drop-ins, the labels and taints, duplicates included) without writing.
// A plan that fails stops the run before anything but the status and
// metrics files is written. Then it runs the preflight (outputs writable,
// --container inputs present) and applies: writes the spec, runs the
// self-test, writes the drop-in.
//
// A usage error from the inventory (an unknown simulated server) or a
// preflight failure returns (nil, error) and nothing is written, not even
// the status file. Otherwise it writes the status file (and the metrics
// file when set) whatever the verdict, and notifies the service manager;
// when those files cannot be written the verdict becomes "not ready" (the
// verdict printed is the verdict reached) and the returned error, marked
// fault.ErrCantWrite, says why. The node's verdict is Report.Ready and
// Report.Err.
func Up(ctx context.Context, host *hostfs.Root, opts UpOptions) (*Report, error) {
	if opts.OnSelftestFailure == "" {
		opts.OnSelftestFailure = nodepolicy.PolicyBlock
	}
	if err := nodepolicy.CheckPolicy(opts.OnSelftestFailure); err != nil {
		return nil, fault.Usage(err)
	}
	steps := []step{inventoryStep, cdiStep, selftestStep, joinStep}
	e, err := newEnv(host, "", opts, steps, opts.Outputs())
	if err != nil {
		return nil, err
	}
	start := e.opts.Now()
	e.notify("STATUS=inspecting GPUs")
	// A failed plan, preflight or spec write leaves the early probes
	// running: none may outlive the run.
	defer e.stopProbes()
	stopped := e.plan(ctx, steps)
	if errors.Is(stopped, fault.ErrUsage) {
		return nil, stopped
	}
	if stopped == nil {
		if err := e.preflight(); err != nil {
			return nil, err
		}
		stopped = e.apply(ctx, steps)
	}
	return e.end(start, stopped)
}
