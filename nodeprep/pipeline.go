package nodeprep

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"syscall"
	"time"

	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
)

// step is one stage of the pipeline. A run has two phases, as terraform's
// plan and apply: plan reads and validates every stage's inputs (the
// inventory, the patched spec, the k3s config files, drop-ins, labels and
// taints) and writes nothing; apply runs the stages that act (the spec
// write, the self-test, the drop-in write). Bad input of any stage is
// therefore found before the first write. Each phase runs as part of the
// stage's result (env.run): a phase that fails fails the stage.
type step struct {
	name string // one of the Stage* constants
	// plan reads and validates the stage's inputs and writes nothing; nil
	// for a stage with nothing to plan.
	plan func(e *env, st *StageResult) error
	// start, once the inventory is in, starts work that needs nothing
	// else and writes nothing of the host's, so that it runs while the
	// later stages plan (the self-test's probe children).
	start func(e *env, ctx context.Context)
	// apply acts on the plan; nil for a stage that only plans.
	apply func(e *env, ctx context.Context, st *StageResult) error
	// dryRunPlan: the plan rehearses apply (which runs again with the
	// earlier stages' results), so its result is dropped before apply.
	dryRunPlan bool
	// notApplied is the summary of a stage that was planned but not
	// applied because the plan of the later stage named cause failed.
	notApplied func(e *env, cause string) string
}

// env is the environment the steps share: the host, the options, the
// report they fill in, and what one stage hands the next.
type env struct {
	host   *hostfs.Root
	opts   UpOptions
	report *Report
	stages []StageResult // one per step, in order; Status "" until the stage runs
	// outputs are the files the run writes whose paths are known before
	// it starts (the status and metrics files, up's drop-in): checked
	// (CheckOutputs) before anything runs, and found writable (preflight)
	// before anything is written.
	outputs []Output
	inv     *gpu.Inventory     // healthy GPUs only, for the self-test and labels
	patch   *specset.PatchPlan // the cdi stage's plan: every GPU spec in the runtime's view
	expect  int                // device names the spec was checked for
	// joinPlan is the join planned for a self-test that passed (Plan
	// reports it as the join's result).
	joinPlan *k3s.Result
	// probes are the self-test's children, started as soon as the
	// inventory is in (they test the host's drivers, not the plan) so
	// that they run while the other stages plan; stopProbes stops them.
	probes *selftest.Probes
}

// defaults are the clock and the logger a run uses: time.Now and a
// logger that discards, where none is given.
func defaults(now func() time.Time, log *slog.Logger) (func() time.Time, *slog.Logger) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return now, log
}

// newEnv is the environment of a run of command ("" for up) through
// steps: opts with their defaults, and a report started now. outputs are
// the files it writes (UpOptions.Outputs, HealthOptions.Outputs); an
// error, marked fault.ErrUsage, names two that are one file or one that
// names a directory (CheckOutputs).
func newEnv(host *hostfs.Root, command string, opts UpOptions, steps []step, outputs []Output) (*env, error) {
	opts.Now, opts.Log = defaults(opts.Now, opts.Log)
	if err := CheckOutputs(outputs...); err != nil {
		return nil, err
	}
	e := &env{host: host, opts: opts, outputs: outputs, report: &Report{
		Version: opts.Version, Command: command, StartedAt: opts.Now().UTC(),
		StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile, FilesChanged: []string{},
	}}
	for _, s := range steps {
		e.stages = append(e.stages, StageResult{Name: s.name})
	}
	return e, nil
}

// plan runs the steps' plans in order. Once the first step (the
// inventory) is in, it starts the steps' early work (step.start), which
// runs while the later steps plan. When a step's plan fails, the stages
// planned before it that would have acted are marked skipped: nothing of
// theirs was applied.
func (e *env) plan(ctx context.Context, steps []step) error {
	for i, s := range steps {
		if s.plan != nil {
			if err := e.run(i, func(st *StageResult) error { return s.plan(e, st) }); err != nil {
				e.notApplied(steps[:i], s.name)
				return err
			}
		}
		if i == 0 {
			for _, s := range steps {
				if s.start != nil {
					s.start(e, ctx)
				}
			}
		}
	}
	return nil
}

// notApplied marks skipped the stages of steps that were planned and
// would have acted, because the plan of the stage named cause failed.
func (e *env) notApplied(steps []step, cause string) {
	for i, s := range steps {
		st := &e.stages[i]
		if s.apply == nil || st.Status == "" || st.Status == StatusFailed {
			continue
		}
		st.Status, st.Summary, st.Reasons = StatusSkipped, "", nil
		if s.notApplied != nil {
			st.Summary = s.notApplied(e, cause)
		}
	}
}

// apply runs the steps' applies in order and stops at the first that
// fails; the stages after it are skipped.
func (e *env) apply(ctx context.Context, steps []step) error {
	for i, s := range steps {
		if s.dryRunPlan {
			e.stages[i] = StageResult{Name: s.name}
		}
	}
	for i, s := range steps {
		if s.apply == nil {
			continue
		}
		if err := e.run(i, func(st *StageResult) error { return s.apply(e, ctx, st) }); err != nil {
			return err
		}
	}
	return nil
}

// run runs f as part of stage i, adding its time to the stage's and
// marking the stage failed when f fails.
func (e *env) run(i int, f func(st *StageResult) error) error {
	st := &e.stages[i]
	if st.Status == "" {
		st.Status = StatusOK
	}
	t0 := e.opts.Now()
	before := len(st.Reasons)
	err := f(st)
	st.DurationMS += ms(e.opts.Now().Sub(t0))
	if err != nil {
		st.Status = StatusFailed
		if len(st.Reasons) == before {
			// f said nothing of this failure itself (a write that failed
			// after the plan's warnings): the error leads the reasons.
			msg := err.Error()
			if e.opts.Hint != nil {
				if h := e.opts.Hint(err); h != "" {
					msg += " (" + h + ")"
				}
			}
			st.Reasons = append([]string{msg}, st.Reasons...)
		}
		// The report carries the reason; logging it louder would say it
		// twice on a terminal and in the journal.
		e.opts.Log.Debug("stage failed", "stage", st.Name, "err", err)
	}
	return err
}

// preflight checks, before any stage writes, everything the run will
// write or need that can be known in advance: the outputs can be written
// (a probe file in each directory, so a read-only mount or an over-long
// name fails now, not after the spec was patched), and the in-container
// self-test's rootfs and runtime exist. The directories of the outputs
// are created, except a metrics file's of its own, which is
// node_exporter's and must exist. Nothing else is written.
func (e *env) preflight() error {
	// The container's inputs first: the output checks create directories.
	if e.opts.Container != nil {
		if err := container.Preflight(*e.opts.Container); err != nil {
			return err
		}
	}
	sameDir := e.opts.StatusFile != "" && path.Dir(e.opts.MetricsFile) == path.Dir(e.opts.StatusFile)
	for _, o := range e.outputs {
		if o.Path == "" {
			continue
		}
		if !path.IsAbs(o.Path) {
			return fault.Usage(fmt.Errorf("%s %q: want an absolute host path", o.What, o.Path))
		}
		mkdir := o.Path != e.opts.MetricsFile || sameDir
		if err := e.host.CheckWritable(o.Path, mkdir); err != nil {
			return fmt.Errorf("%s: %w", o.What, err)
		}
	}
	return nil
}

// end finishes the report: every stage in order (one that never ran is
// skipped), the run's duration since start, the peak RSS, readiness
// (stopped is the error of the stage that stopped the run) and the
// verdict. It writes the report to the status and metrics files and tells
// the service manager the verdict. Its error is the outputs'
// (statusFiles.write).
func (e *env) end(start time.Time, stopped error) (*Report, error) {
	r := e.report
	for _, st := range e.stages {
		if st.Status == "" {
			st.Status = StatusSkipped
		}
		r.Stages = append(r.Stages, st)
	}
	r.DurationMS = ms(e.opts.Now().Sub(start))
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024 // Linux reports KiB
	}
	r.stageErr = stopped
	r.Ready = stopped == nil
	r.judge()
	err := statusFiles{host: e.host, status: e.opts.StatusFile, metrics: e.opts.MetricsFile, now: e.opts.Now}.write(r)
	if r.Ready {
		e.notify("READY=1\nSTATUS=" + r.Verdict)
	} else {
		e.notify("STATUS=" + r.Verdict)
	}
	return r, err
}

func (e *env) notify(state string) {
	if e.opts.Notifier == nil {
		return
	}
	if err := e.opts.Notifier.Notify(state); err != nil {
		e.opts.Log.Warn("sd_notify failed", "err", err)
	}
}
