package nodeprep

import (
	"context"
	"fmt"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
)

// joinStep is the join stage: the k3s drop-in that makes the node
// register with its labels and taints. Its plan (planJoin) is a dry run
// of every outcome the self-test may have; it applies (join) after the
// self-test, with its result.
var joinStep = step{name: StageJoin, plan: (*env).planJoin, apply: (*env).join, dryRunPlan: true}

// planJoin validates the join stage's inputs before anything is written:
// the labels (the user's, duplicates included, and the generated ones as
// they will be if the self-test passes, and under nodepolicy.PolicyTaint also if it
// fails), the taints, and the k3s config file, drop-ins and arguments
// merged as k3s would (k3s.Plan: malformed YAML, misspelt keys, invalid
// entries, FIFOs, later files that undo nodeprep's entries). The stage
// runs again for real after the self-test, with its actual result.
func (e *env) planJoin(st *StageResult) error {
	if err := e.checkJoin(st); err != nil {
		st.Summary = "invalid input: nothing written"
		return err
	}
	st.Summary = "planned: " + e.opts.Join.DropInPath()
	return nil
}

// checkJoin plans the drop-in for each outcome of the self-test the policy
// lets join, and judges the containerd k3s runs with the drop-in of a
// self-test that passed.
func (e *env) checkJoin(st *StageResult) error {
	adapters := len(e.inv.GPUs)
	for _, r := range []struct {
		verdict string
		tainted bool
	}{{nodepolicy.SelftestPassed, false}, {nodepolicy.SelftestFailed, true}} {
		if r.tainted && e.opts.OnSelftestFailure != nodepolicy.PolicyTaint {
			continue
		}
		res, err := e.planDropIn(r.verdict, adapters, r.tainted)
		if err != nil {
			return err
		}
		if !r.tainted {
			e.joinPlan = res
			if err := e.containerdVerdict(st, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// containerdVerdict judges the containerd k3s runs as `cdi check` does,
// before anything is written: an error finding there (CDI off for the
// containerd installed, the spec's directory not in cdi_spec_dirs, an
// nvidia runtime handler that cannot run) is an error here too, and the
// node is not ready. One fact, one verdict: `cdi check`, `up` and the
// status agree. The warnings stay on the join stage (join reports them).
func (e *env) containerdVerdict(st *StageResult, res *k3s.Result) error {
	findings, _ := podpath.ContainerdFindings(e.host, res, e.opts.CDI.Spec, e.opts.CDI.Discover.DriverRoot)
	errs, _ := findingLines(findings)
	if len(errs) == 0 {
		return nil
	}
	st.Reasons = append(st.Reasons, errs...)
	return cannotServe(errs[0])
}

// planDropIn computes the node's labels for a self-test verdict and plans
// the drop-in with them (k3s.Plan; nothing is written).
func (e *env) planDropIn(verdict string, adapters int, tainted bool) (*k3s.Result, error) {
	labels, err := nodepolicy.NodeLabels(e.report.Inventory, nodepolicy.NodeLabelOptions{GFD: e.opts.GFDLabels, MIGStrategy: e.opts.MIGStrategy, Selftest: verdict, VulkanAdapters: &adapters, Extra: e.opts.ExtraLabels})
	if err != nil {
		return nil, err
	}
	opts := e.opts.Join
	opts.Labels = labels
	if tainted {
		t, err := k3s.ParseTaint(nodepolicy.UnhealthyTaint)
		if err != nil {
			return nil, err
		}
		opts.Taints = append(append([]k3s.Taint(nil), opts.Taints...), t)
	}
	return k3s.Plan(e.host, opts)
}

// join writes the drop-in with the labels of the self-test's result (and
// the unhealthy taint when the report is tainted); a SIGTERM stops it
// before the write. The warnings of k3s's config and of the containerd k3s
// runs make the stage a warning.
func (e *env) join(ctx context.Context, st *StageResult) error {
	if err := ctx.Err(); err != nil {
		return fault.CheckFailed(fmt.Errorf("stopped before writing the drop-in: %w", err))
	}
	result := nodepolicy.SelftestPassed
	adapters := 0
	if rep := e.report.Selftest; rep != nil {
		if !rep.Passed || e.report.Container != nil && !e.report.Container.Passed {
			result = nodepolicy.SelftestFailed
		}
		adapters = vulkanMatched(rep)
	}
	res, err := e.planDropIn(result, adapters, e.report.Tainted)
	if err != nil {
		return err
	}
	e.report.Join = res
	for _, w := range res.Warnings {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, w)
	}
	if err := k3s.Apply(e.host, res); err != nil {
		return err
	}
	if res.Written {
		e.report.FilesChanged = append(e.report.FilesChanged, res.DropInPath)
	}
	findings, notes := podpath.ContainerdFindings(e.host, res, e.opts.CDI.Spec, e.opts.CDI.Discover.DriverRoot)
	for _, n := range notes {
		e.opts.Log.Debug(n)
	}
	for _, f := range findings {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, f.Code+": "+f.Message)
	}
	st.Summary = fmt.Sprintf("%s: %s, %s", res.DropInPath, count(len(res.Labels), "label"), count(len(res.Taints), "taint"))
	return nil
}
