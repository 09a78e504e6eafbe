package nodeprep

import (
	"context"
	"fmt"
	"slices"

	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
)

// selftestStep is the self-test stage: the Vulkan and EGL adapters matched
// to the inventory's GPUs by UUID (and, when configured, the self-test in
// a container started with the patched spec's devices). Its probe
// children start as soon as the inventory is in (startProbes); it applies
// by waiting for them (selftest).
var selftestStep = step{name: StageSelftest, start: (*env).startProbes, apply: (*env).selftest}

// startProbes starts the self-test's probe children (selftest.Start) early,
// before the plan is validated: they write nothing of the host's (the
// shader cache is used only when it exists, selftest.
// WithShaderCacheCreation), and SIGTERM cancels them, as Up's return does
// after a failed plan or write. An error starting them (no probe command)
// is left for the selftest stage to report.
func (e *env) startProbes(ctx context.Context) {
	if p, err := selftest.Start(ctx, append(slices.Clip(e.opts.Selftest), selftest.WithShaderCacheCreation(false))...); err == nil {
		e.probes = p
	}
}

// stopProbes stops the probe children startProbes started, if any: none
// may outlive the run.
func (e *env) stopProbes() {
	if e.probes != nil {
		e.probes.Stop()
	}
}

// selftest waits for the probe children (starting them now when they
// were not started early) and judges their report, then runs the
// in-container self-test when configured. A failed self-test fails the
// stage, or under nodepolicy.PolicyTaint makes it a warning and the
// report tainted.
func (e *env) selftest(ctx context.Context, st *StageResult) error {
	e.notify("STATUS=running the adapter self-test")
	p := e.probes
	if p == nil { // health, or an early start that failed: start them now
		var err error
		if p, err = selftest.Start(ctx, e.opts.Selftest...); err != nil {
			return err
		}
	}
	t0 := e.opts.Now()
	rep, err := p.Wait(e.inv)
	if err != nil {
		return err
	}
	// The stage took as long as the probes, which started with the plan,
	// plus what follows (the in-container self-test); run adds the time
	// spent here.
	st.DurationMS += rep.DurationMS - ms(e.opts.Now().Sub(t0))
	e.report.Selftest = rep
	st.Summary = fmt.Sprintf("%d/%d GPUs matched a Vulkan adapter; adapters found: %d Vulkan, %d EGL", vulkanMatched(rep), len(e.inv.GPUs), len(rep.Vulkan.Adapters), len(rep.EGL.Devices))
	if rep.StandIn {
		st.Summary += " (CPU stand-in for simulated GPUs)"
	}
	st.Summary += cudaSummary(rep, len(e.inv.GPUs))
	failure := rep.Err()
	for _, r := range rep.Reasons {
		st.Reasons = append(st.Reasons, r.String())
	}
	if e.opts.Container != nil {
		e.notify("STATUS=running the self-test inside a container")
		crep, err := container.Run(ctx, e.host, e.inv, *e.opts.Container)
		if err != nil {
			return err
		}
		e.report.Container = crep
		verdict := "passed"
		if !crep.Passed {
			verdict = "failed"
			for _, r := range crep.Reasons {
				st.Reasons = append(st.Reasons, "container: "+r.String())
			}
			if failure == nil {
				failure = crep.Err()
			}
		}
		st.Summary += fmt.Sprintf("; in a container (%s): %s, %.0f ms", crep.Runtime, verdict, crep.DurationMS)
	}
	if failure == nil {
		return nil
	}
	// A self-test cut short by SIGTERM says nothing of the GPUs, and the
	// drop-in is not written after it: the node does not join tainted.
	if e.opts.OnSelftestFailure == nodepolicy.PolicyTaint && ctx.Err() == nil {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, "policy taint: joining with "+nodepolicy.UnhealthyTaint+"; a taint reaches a Node only at its first registration")
		e.report.Tainted = true
		// The stage's reasons and the verdict say it; a warning would say
		// it a third time.
		e.opts.Log.Debug("self-test failed; joining tainted", "taint", nodepolicy.UnhealthyTaint)
		return nil
	}
	return failure // marked by selftest's and the container self-test's Report.Err: 69 for a missing library or runtime, else 1
}

// cudaSummary is the CUDA probe's part of the self-test stage's summary:
// "; CUDA 12.4: 8/8 GPUs verified", or why CUDA was not probed where
// that does not fail the stage (no libcuda with --simulate); "" when the
// CUDA probe did not run.
func cudaSummary(rep *selftest.Report, gpus int) string {
	c := rep.CUDA
	switch {
	case c == nil:
		return ""
	case (c.Stage == cudaprobe.StageLoad || c.Stage == cudaprobe.StageSym) && !rep.RequireCUDA:
		return "; CUDA not probed (" + c.Library + " cannot be opened; not required here)"
	}
	v := ""
	if c.DriverVersion != "" {
		v = " " + c.DriverVersion
	}
	return fmt.Sprintf("; CUDA%s: %d/%d GPUs verified", v, cudaMatched(rep), gpus)
}
