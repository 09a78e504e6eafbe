package nodeprep

import (
	"context"
	"errors"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// CommandPlan is Report.Command of a report Plan made.
const CommandPlan = "plan"

// Plan runs up's plan phase alone, for a host tree that is not a running
// node (a configuration checked in CI): the inventory, the CDI patch
// planned in memory and the patched specs checked, and the join planned
// as k3s would read it, with the containerd k3s runs judged, exactly as
// Up plans them. It starts no self-test (there is no GPU to probe) and
// writes nothing, not even the status file: opts' StatusFile,
// MetricsFile, Notifier, Selftest and Container are not used. The join is
// planned for a self-test that passed.
//
// A usage error from the inventory returns (nil, error). Otherwise the
// report's Ready and Err say whether up would go on to apply; its
// selftest stage is skipped, its Join is the join planned (when the plan
// got that far) and its CDI the patch planned.
func Plan(ctx context.Context, host *hostfs.Root, opts UpOptions) (*Report, error) {
	opts.Selftest, opts.Container, opts.Notifier = nil, nil, nil
	steps := []step{inventoryStep, cdiStep, selftestStep, joinStep}
	planned := []step{inventoryStep, cdiStep, joinStep}
	e, err := newEnv(host, CommandPlan, opts, steps, nil)
	if err != nil {
		return nil, err
	}
	start := e.opts.Now()
	stopped := e.planOnly(ctx, planned)
	if errors.Is(stopped, fault.ErrUsage) {
		return nil, stopped
	}
	r := e.report
	for _, st := range e.stages {
		if st.Status == "" {
			st.Status = StatusSkipped
		}
		r.Stages = append(r.Stages, st)
	}
	r.Join = e.joinPlan
	r.DurationMS = ms(e.opts.Now().Sub(start))
	r.stageErr = stopped
	r.Ready = stopped == nil
	r.judge()
	return r, nil
}

// planOnly runs the plans of steps, whose results go to the stages of the
// same name, without starting any step's early work.
func (e *env) planOnly(_ context.Context, steps []step) error {
	for _, s := range steps {
		i := e.stageIndex(s.name)
		if s.plan == nil {
			continue
		}
		if err := e.run(i, func(st *StageResult) error { return s.plan(e, st) }); err != nil {
			return err
		}
	}
	return nil
}

// stageIndex is the index of the stage named name.
func (e *env) stageIndex(name string) int {
	for i, st := range e.stages {
		if st.Name == name {
			return i
		}
	}
	panic("nodeprep: no stage " + name)
}
