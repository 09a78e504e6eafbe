package nodeprep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// HealthOptions is everything `nodeprep health` needs.
type HealthOptions struct {
	// Inventory builds the GPU inventory (NVML or a simulated server).
	Inventory func() (*gpu.Inventory, error)
	// Selftest are the self-test's options.
	Selftest []selftest.Option
	// StatusFile is the host path of the status report: read for the GPUs
	// the node booted with, then rewritten.
	StatusFile string
	// MetricsFile is the host path of the Prometheus textfile ("" = none).
	MetricsFile string
	Log         *slog.Logger // diagnostics (nil: discarded)
	// Now is the clock (time.Now when nil).
	Now     func() time.Time
	Version string // nodeprep's version, for the report
	// CDI, when set, re-checks the pod path too (healthCDI): every GPU
	// spec of the runtime's view patched again and judged with the
	// inventory's device names (DeviceNames strategies); nil: no cdi
	// stage.
	CDI         *cdi.FileOptions
	DeviceNames []string // device-name strategies the specs must serve, with CDI
	// Runtime, with CDI, returns the findings of the runtime k3s runs
	// (containerd's config, the pod path through its runtime handlers) as
	// `cdi check` reports them: judged in the cdi stage, an error makes the
	// node not ready (foldRuntime). nil: not judged.
	Runtime func() cdi.Findings
}

// Health re-checks a running node: the inventory, the pod path when
// opts.CDI is set (every GPU spec of the runtime's view patched again and
// judged, healthCDI), and the adapter self-test, with no join, then
// rewrites the status file and the metrics textfile so that nodeprep_ready
// follows the node's GPUs and specs between boots. The node is ready when
// every GPU the last `up` found (the status file's expectedGPUs) is still
// present and healthy, every spec that serves GPUs is patched, and the
// self-test passes; a failed self-test is never ready here, whatever up's
// policy.
// The caller holds the host lock. Errors are the outputs' (preflight or
// write, nothing written on a preflight error); the verdict is
// Report.Ready and Report.Err.
func Health(ctx context.Context, host *hostfs.Root, opts HealthOptions) (*Report, error) {
	base, baselineErr := bootBaseline(host, opts.StatusFile)
	steps := []step{healthInventoryStep(base, baselineErr, opts.StatusFile)}
	if opts.CDI != nil {
		steps = append(steps, healthCDIStep(*opts.CDI, opts.DeviceNames, opts.Runtime))
	}
	steps = append(steps, selftestStep)
	e, err := newEnv(host, commandHealth, UpOptions{
		Inventory: opts.Inventory, Selftest: opts.Selftest, OnSelftestFailure: nodepolicy.PolicyBlock,
		StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile, Log: opts.Log, Now: opts.Now, Version: opts.Version,
	}, steps, opts.Outputs())
	if err != nil {
		return nil, err
	}
	if err := e.preflight(); err != nil {
		return nil, err
	}
	e.report.ExpectedGPUs = base.gpus
	e.report.BootReady, e.report.BootVerdict = &base.ready, base.verdict
	if baselineErr != nil {
		// The status file is kept as it is (rewriting it would make
		// today's GPUs the baseline) until `up` writes it again.
		e.opts.StatusFile, e.report.StatusFile = "", ""
	}
	start := e.opts.Now()
	// health acts at once: its stages have nothing to plan.
	return e.end(start, e.apply(ctx, steps))
}

// baseline is what health judges against: the GPUs the node booted with
// and the verdict of the `up` that booted it.
type baseline struct {
	gpus    []string
	ready   bool
	verdict string
}

// bootBaseline reads the baseline from the last report in the status file
// (ReadStatus): an `up` report's expectedGPUs (else its inventory's UUIDs)
// and verdict, or what a `health` report carried forward (expectedGPUs,
// bootReady, bootVerdict). Errors: ReadStatus's (no status file: no `up`
// has run; a file that does not parse as a report), and a report that
// records no GPU: in each case health cannot tell a lost GPU.
func bootBaseline(host *hostfs.Root, statusFile string) (baseline, error) {
	if statusFile == "" {
		return baseline{}, errors.New("no status file is configured")
	}
	prev, err := ReadStatus(host, statusFile)
	if err != nil {
		return baseline{}, err
	}
	b := baseline{gpus: prev.ExpectedGPUs, ready: prev.Ready, verdict: prev.Verdict}
	if prev.Command == commandHealth || prev.Command == CommandRepatch {
		if prev.BootReady == nil {
			return baseline{}, fmt.Errorf("%s: a health report without the verdict of the up before it", statusFile)
		}
		b.ready, b.verdict = *prev.BootReady, prev.BootVerdict
	}
	if len(b.gpus) == 0 && prev.Command == "" && prev.Inventory != nil {
		for _, g := range prev.Inventory.GPUs {
			b.gpus = append(b.gpus, g.UUID)
		}
	}
	if len(b.gpus) == 0 {
		return baseline{}, fmt.Errorf("%s records no GPU", statusFile)
	}
	return b, nil
}

// healthInventoryStep is health's inventory stage: the inventory judged
// against base, the baseline of the node's boot (healthInventory), when
// it could be read (baselineErr is nil) and the boot made the node ready.
func healthInventoryStep(base baseline, baselineErr error, statusFile string) step {
	return step{name: StageInventory, apply: func(e *env, _ context.Context, st *StageResult) error {
		switch {
		case baselineErr != nil:
			// A status file that cannot be read has lost the GPUs the node
			// booted with: health cannot tell a missing GPU, so the node is
			// not ready.
			st.Summary = "no GPU baseline"
			err := fmt.Errorf("the GPUs the node booted with cannot be read from %s (%v): run nodeprep up to record them again", statusFile, baselineErr)
			if errors.Is(baselineErr, bounded.ErrTooLarge) {
				return fault.Malformed(err)
			}
			return fault.CheckFailed(err)
		case !base.ready:
			// health re-checks a node `up` made ready; it does not undo a
			// verdict `up` reached (a spec it could not patch, a k3s input
			// it refused): k3s stays down until `up` passes.
			st.Summary = "the node did not come up"
			return fault.CheckFailed(fmt.Errorf("the last nodeprep up left the node not ready (%s); health does not undo that: fix it and run nodeprep up", base.verdict))
		}
		return e.healthInventory(st)
	}}
}

// healthInventory is the inventory stage plus the baseline: a GPU the node
// booted with that NVML no longer lists, or lists unhealthy, fails it.
func (e *env) healthInventory(st *StageResult) error {
	if err := e.inventory(st); err != nil {
		return err
	}
	var lost []string
	for _, id := range e.report.ExpectedGPUs {
		if !slices.ContainsFunc(e.inv.GPUs, func(g gpu.GPU) bool { return g.UUID == id }) {
			lost = append(lost, id)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	err := fault.CheckFailed(fmt.Errorf("%d GPU(s) the node booted with are missing or unhealthy: %s", len(lost), strings.Join(lost, ", ")))
	st.Reasons = append([]string{err.Error()}, st.Reasons...)
	return err
}
