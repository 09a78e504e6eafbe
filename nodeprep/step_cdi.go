package nodeprep

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// cdiStep is up's cdi stage: every GPU spec in the runtime's view patched
// with the graphics mounts and checked for the inventory's device names.
// It plans (reads, patches in memory and checks: planCDI) before anything
// is written, and applies (writes the specs that changed: applyCDI) first.
var cdiStep = step{
	name:  StageCDI,
	plan:  (*env).planCDI,
	apply: (*env).applyCDI,
	notApplied: func(e *env, cause string) string {
		return fmt.Sprintf("%s not patched: nothing written (the %s stage's input is invalid)", e.opts.CDI.Spec, cause)
	},
}

// repatchTries is how often a re-patch plans again when a writer replaces
// a spec between the plan and the write (cdi.ErrSpecChanged).
const repatchTries = 5

// planCDI reads the spec, patches it in memory and checks the result
// (device names, host paths, the CDI library's validation). It writes
// nothing; findings that are errors fail the stage.
func (e *env) planCDI(st *StageResult) error {
	opts, err := expectOptions(e.opts.CDI, e.inv, e.opts.DeviceNames)
	if err != nil {
		return err
	}
	e.expect = len(opts.Expect)
	plan, err := specset.PlanPatch(e.host, opts)
	if err != nil {
		return err
	}
	e.patch = plan
	res := plan.Result
	e.report.CDI = res
	judged := cdiStage(res, e.expect, nil)
	st.Reasons = judged.Reasons
	switch judged.Status {
	case StatusFailed:
		st.Summary = judged.Summary
		return fault.CheckFailed(fmt.Errorf("CDI spec %q: %s, nothing written", res.Spec, count(res.Findings.Errors(), "problem")))
	case StatusWarning:
		st.Status = StatusWarning
	}
	return nil
}

// applyCDI writes the specs the plan patched, when they changed; a SIGTERM
// while planning stops it before the first write.
func (e *env) applyCDI(ctx context.Context, st *StageResult) error {
	if err := ctx.Err(); err != nil { // SIGTERM while planning
		st.Summary = e.cdiSummary("not patched: nothing written")
		return fault.CheckFailed(fmt.Errorf("stopped before the first write: %w", err))
	}
	if err := specset.ApplyPatch(e.host, e.patch); err != nil {
		return err
	}
	res := e.patch.Result
	for _, r := range append([]*cdi.PatchResult{res}, res.Related...) {
		if r.Written {
			e.report.FilesChanged = append(e.report.FilesChanged, r.Spec)
		}
	}
	verb := "unchanged"
	if res.Written {
		verb = fmt.Sprintf("patched (%s)", count(len(res.Changes), "change"))
	}
	st.Summary = e.cdiSummary(verb)
	return nil
}

// cdiSummary is up's cdi stage summary, with verb saying what became of
// the spec.
func (e *env) cdiSummary(verb string) string {
	return viewSummary(e.patch.Result, e.patch.Result.Spec+" "+verb, e.expect)
}

// healthCDIStep is health's cdi stage (healthCDI) for the spec opts names,
// the device names of the strategies names and, when set, the runtime's
// findings.
func healthCDIStep(opts cdi.FileOptions, names []string, runtime func() cdi.Findings) step {
	return step{name: StageCDI, apply: func(e *env, ctx context.Context, st *StageResult) error {
		return e.healthCDI(ctx, st, opts, names, runtime)
	}}
}

// healthCDI is health's cdi stage: the pod path re-checked. Every GPU spec
// in the runtime's view is patched again (a spec written since boot gets
// its graphics mounts) and judged with the current inventory's device
// names; a spec that serves GPUs and cannot be patched fails the stage,
// naming it, and the node is not ready.
func (e *env) healthCDI(ctx context.Context, st *StageResult, opts cdi.FileOptions, names []string, runtime func() cdi.Findings) error {
	opts, err := expectOptions(opts, e.inv, names)
	if err != nil {
		return err
	}
	res, wrote, _, _, err := patchView(ctx, e.host, opts, e.opts.Log)
	if err != nil {
		return err
	}
	e.report.CDI = res
	e.report.FilesChanged = append(e.report.FilesChanged, wrote...)
	judged, runtimeErr := judgeView(res, len(opts.Expect), wrote, runtime, e.opts.Log)
	st.Status, st.Summary, st.Reasons = judged.Status, judged.Summary, judged.Reasons
	switch {
	case res.Findings.Errors() > 0:
		st.Status = StatusOK // run marks it failed from the error
		// foldRuntime keeps the specs' own errors first.
		return fault.CheckFailed(fmt.Errorf("CDI spec %q: %s", res.Spec, judged.Reasons[0]))
	case runtimeErr != "":
		st.Status = StatusOK
		return cannotServe(runtimeErr)
	}
	return nil
}

// expectOptions is opts for a patch judged against inv: the device names
// its GPUs must have under the strategies names
// (nodepolicy.ExpectedCDIDevices) and its driver version.
func expectOptions(opts cdi.FileOptions, inv *gpu.Inventory, names []string) (cdi.FileOptions, error) {
	expect, err := nodepolicy.ExpectedCDIDevices(inv, names)
	if err != nil {
		return opts, err
	}
	opts.Expect = expect
	opts.Discover.DriverVersion = inv.DriverVersion
	return opts, nil
}

// patchView plans and applies the patch of the runtime's view, planning
// again (at most repatchTries times) when a writer replaced a spec
// between the plan and the write. It returns the result, the host paths
// and Stats of the specs written, and how often it planned again. Errors:
// those of specset.PlanPatch and ApplyPatch; a SIGTERM before the write.
func patchView(ctx context.Context, host *hostfs.Root, opts cdi.FileOptions, log *slog.Logger) (*cdi.PatchResult, []string, []fs.FileInfo, int, error) {
	retries := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, retries, fault.CheckFailed(fmt.Errorf("patching CDI spec %q: stopped before writing: %w", opts.Spec, err))
		}
		plan, err := specset.PlanPatch(host, opts)
		if err != nil {
			return nil, nil, nil, retries, err
		}
		if err := ctx.Err(); err != nil { // SIGTERM while planning: write nothing
			return nil, nil, nil, retries, fault.CheckFailed(fmt.Errorf("patching CDI spec %q: stopped before writing: %w", opts.Spec, err))
		}
		err = specset.ApplyPatch(host, plan)
		if errors.Is(err, cdi.ErrSpecChanged) && retries+1 < repatchTries {
			retries++
			log.Debug("a spec changed while it was patched; planning again", "err", err)
			continue
		}
		if err != nil {
			return nil, nil, nil, retries, err
		}
		wrote, files := []string{}, []fs.FileInfo{}
		for _, r := range append([]*cdi.PatchResult{plan.Result}, plan.Result.Related...) {
			if r.Written {
				wrote = append(wrote, r.Spec)
				files = append(files, r.File())
			}
		}
		return plan.Result, wrote, files, retries, nil
	}
}

// judgeView is the cdi stage's result for a patch of the runtime's view
// (cdiStage) with, when runtime is set, the findings of the runtime k3s
// runs judged in it (foldRuntime); it returns the first of those that is
// an error too ("" for none).
func judgeView(res *cdi.PatchResult, expect int, wrote []string, runtime func() cdi.Findings, log *slog.Logger) (StageResult, string) {
	st := cdiStage(res, expect, wrote)
	if runtime == nil {
		return st, ""
	}
	first := foldRuntime(&st, res.Findings.Errors(), runtime(), log)
	return st, first
}

// cdiStage is the cdi stage's result for a patch of the view, as `up`
// words it: error findings fail it, warnings make it a warning.
func cdiStage(res *cdi.PatchResult, expect int, wrote []string) StageResult {
	st := StageResult{Name: StageCDI, Status: StatusOK}
	errs, warns := findingLines(res.Findings)
	st.Reasons = append(errs, warns...)
	subject := res.Spec + " unchanged"
	switch {
	case len(errs) > 0:
		st.Status = StatusFailed
		subject = res.Spec + " not patched: nothing written"
	case len(wrote) > 0:
		subject = "re-patched " + strings.Join(wrote, ", ") // the specs written, which need not include res.Spec
	}
	if len(errs) == 0 && len(warns) > 0 {
		st.Status = StatusWarning
	}
	st.Summary = viewSummary(res, subject, expect)
	return st
}

// viewSummary is the cdi stage's summary: subject (the spec and what
// became of it), the graphics files, the device names checked, and the
// specs left alone.
func viewSummary(res *cdi.PatchResult, subject string, expect int) string {
	files := 0
	if res.Graphics != nil {
		files = len(res.Graphics.Files)
	}
	return fmt.Sprintf("%s, %s, %s checked%s", subject, count(files, "graphics file"), count(expect, "device name"), leftAlone(res))
}

// leftAlone is the summary's note of the GPU specs the runtime serves that
// nodeprep leaves as they are (cdi.PatchResult.Skipped; cdi check names
// them with the reason), "" when there are none.
func leftAlone(res *cdi.PatchResult) string {
	if len(res.Skipped) == 0 {
		return ""
	}
	return fmt.Sprintf("; %s left as they are (cdi check names them)", count(len(res.Skipped), "spec"))
}

// findingLines are findings as a stage's reasons, "code: message", those
// of the errors apart from the warnings'.
func findingLines(fs cdi.Findings) (errs, warns []string) {
	for _, f := range fs {
		line := f.Code + ": " + f.Message
		if f.Severity == cdi.SeverityError {
			errs = append(errs, line)
		} else {
			warns = append(warns, line)
		}
	}
	return errs, warns
}

// foldRuntime judges the findings of the runtime k3s runs (containerd's
// config, the pod path through its runtime handlers: podpath.RuntimeFindings, as
// `cdi check` reports them) in the cdi stage st, as `up` judges them in
// its join stage: an error fails the stage (its reasons after the first
// specErrs of st's, the specs' own errors, and before the warnings), a warning
// makes it a warning, and containerd.CodeNotWritten (k3s has not rendered
// its config yet: nothing to judge) is logged only. One fact, one verdict:
// `cdi check`, `up`, `health` and a re-patch agree. It returns the first
// error's reason, "" for none.
func foldRuntime(st *StageResult, specErrs int, fs cdi.Findings, log *slog.Logger) string {
	var judged cdi.Findings
	for _, f := range fs {
		if f.Code == containerd.CodeNotWritten {
			log.Debug("containerd config not judged", "reason", f.Message)
			continue
		}
		judged = append(judged, f)
	}
	errs, warns := findingLines(judged)
	if len(errs) == 0 && len(warns) == 0 {
		return ""
	}
	// The specs' own errors first (up's cdi stage stops on them before its
	// join stage judges the runtime, so that is the reason up gives),
	// then the runtime's, then every warning.
	specErrs = min(specErrs, len(st.Reasons))
	reasons := append(slices.Clone(st.Reasons[:specErrs]), errs...)
	reasons = append(reasons, st.Reasons[specErrs:]...)
	st.Reasons = append(reasons, warns...)
	switch {
	case len(errs) > 0:
		st.Status = StatusFailed
		st.Summary += fmt.Sprintf("; the containerd k3s runs: %s", count(len(errs), "error"))
		return errs[0]
	case st.Status == StatusOK:
		st.Status = StatusWarning
	}
	return ""
}

// cannotServe is the error of a stage that found the containerd k3s runs
// unable to serve the patched spec, for reason, the first error finding.
func cannotServe(reason string) error {
	return fault.CheckFailed(fmt.Errorf("the containerd k3s runs cannot serve the patched spec: %s", reason))
}
