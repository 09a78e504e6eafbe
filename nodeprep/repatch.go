package nodeprep

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// CommandRepatch is Report.Command of a status report that a re-patch
// after boot wrote (`nodeprep cdi patch`, `nodeprep cdi watch`, the NixOS
// path unit): the last report with its cdi stage judged again.
const CommandRepatch = "cdi patch"

// repatchTries is how often Repatch plans again when a writer replaces a
// spec between the plan and the write (cdi.ErrSpecChanged).
const repatchTries = 5

// RepatchOptions is what a re-patch after boot needs.
type RepatchOptions struct {
	// CDI names the spec, the runtime's spec directories and the driver
	// root, as for `up`; its Expect is filled here.
	CDI cdi.FileOptions
	// DeviceNames are the device-name strategies the specs must serve
	// (nodepolicy.DeviceNameUUID, ...), checked against the GPUs of the last report.
	DeviceNames []string
	// StatusFile is the host path of the status report: read for the
	// node's GPUs and verdict, rewritten when the verdict or a spec
	// changed ("" = none).
	StatusFile string
	// MetricsFile is the host path of the Prometheus textfile ("" = none).
	MetricsFile string
	Log         *slog.Logger // diagnostics (nil: discarded)
	// Now is the clock (time.Now when nil).
	Now     func() time.Time
	Version string // nodeprep's version, for the report
	// Runtime, when set, returns the findings of the runtime k3s runs
	// (containerd's config and the pod path through its runtime handlers),
	// exactly as `cdi check` reports them; they are judged with the specs
	// (foldRuntime), so that a re-patch never makes ready a node whose
	// containerd cannot serve the patched spec. nil: not judged.
	Runtime func() cdi.Findings
}

// RepatchResult is what Repatch did.
type RepatchResult struct {
	// Patch is the patch of the runtime's view: the named spec's result,
	// the other GPU specs in Related.
	Patch *cdi.PatchResult `json:"patch" yaml:"patch"`
	// Wrote are the host paths of the specs written, in the view's order.
	Wrote []string `json:"wrote" yaml:"wrote"`
	// Files are the specs written as they were renamed into place (the
	// same order): a watcher recognises the events of these writes.
	Files []fs.FileInfo `json:"-" yaml:"-"`
	// Report is the status report as it now stands (nil when there is no
	// status file to judge against: no `up` has run).
	Report *Report `json:"report,omitempty" yaml:"report,omitempty"`
	// StatusWritten is true when the status (and metrics) file was
	// rewritten: a spec was written or the verdict changed.
	StatusWritten bool `json:"statusWritten" yaml:"statusWritten"`
	// Retries counts the plans made again because a writer replaced a
	// spec between the plan and the write.
	Retries int `json:"retries" yaml:"retries"`
}

// Changed reports whether the re-patch wrote anything (a spec, the status).
func (r *RepatchResult) Changed() bool { return len(r.Wrote) > 0 || r.StatusWritten }

// Repatch patches every GPU spec in the runtime's view again and judges
// the view, for a node that is already up: the NVIDIA device plugin and
// the DRA driver write their specs after boot, without the graphics
// mounts. It checks the device names against the GPUs of the last status
// report (no NVML call) and replaces that report's cdi stage with this
// verdict: the node stays ready while every spec that serves GPUs is
// patched or patchable, and turns not ready, naming the spec, when one
// cannot be. A node `up` did not make ready stays not ready. It writes the
// status and metrics files only when a spec was written or the verdict
// changed, so a pass with nothing to do writes nothing at all.
//
// The caller holds the host lock. Errors: those of specset.PlanPatch and
// ApplyPatch (nothing written), a spec that keeps changing under it
// (cdi.ErrSpecChanged after repatchTries plans), and the outputs' writes
// (fault.ErrCantWrite). A view whose findings are errors is not an error:
// it is the report's verdict, and Report.Err is set.
func Repatch(ctx context.Context, host *hostfs.Root, opts RepatchOptions) (*RepatchResult, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	start := opts.Now()
	prev := lastReport(host, opts.StatusFile)
	copts := opts.CDI
	expect := 0
	if prev != nil && prev.Inventory != nil {
		inv := *prev.Inventory
		inv.GPUs = inv.Healthy()
		ex, err := nodepolicy.ExpectedCDIDevices(&inv, opts.DeviceNames)
		if err != nil {
			return nil, err
		}
		copts.Expect, expect = ex, len(ex)
		copts.Discover.DriverVersion = inv.DriverVersion
	}
	res := &RepatchResult{Wrote: []string{}}
	var err error
	if res.Patch, res.Wrote, res.Files, res.Retries, err = patchView(ctx, host, copts, opts.Log); err != nil {
		return nil, err
	}
	if prev == nil {
		return res, nil
	}
	st := cdiStage(res.Patch, expect, res.Wrote)
	if opts.Runtime != nil {
		foldRuntime(&st, res.Patch.Findings.Errors(), opts.Runtime(), opts.Log)
	}
	st.DurationMS = ms(opts.Now().Sub(start))
	rep := rejudge(prev, st, opts, start)
	rep.CDI = res.Patch
	rep.FilesChanged = slices.Clone(res.Wrote)
	res.Report = rep
	if len(res.Wrote) == 0 && rep.Ready == prev.Ready && rep.Verdict == prev.Verdict && slices.Equal(stageReasons(rep, StageCDI), stageReasons(prev, StageCDI)) {
		return res, nil // nothing changed: status and metrics stay as they are
	}
	u := &upRun{host: host, opts: UpOptions{StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile, Now: opts.Now}, report: rep}
	if err := u.writeOutputs(); err != nil {
		return res, err
	}
	res.StatusWritten = true
	return res, nil
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

// healthCDI is health's cdi stage: the pod path re-checked. Every GPU spec
// in the runtime's view is patched again (a spec written since boot gets
// its graphics mounts) and judged with the current inventory's device
// names; a spec that serves GPUs and cannot be patched fails the stage,
// naming it, and the node is not ready.
func (u *upRun) healthCDI(ctx context.Context, st *StageResult, opts cdi.FileOptions, names []string, runtime func() cdi.Findings) error {
	expect, err := nodepolicy.ExpectedCDIDevices(u.inv, names)
	if err != nil {
		return err
	}
	opts.Expect = expect
	opts.Discover.DriverVersion = u.inv.DriverVersion
	res, wrote, _, _, err := patchView(ctx, u.host, opts, u.opts.Log)
	if err != nil {
		return err
	}
	u.report.CDI = res
	u.report.FilesChanged = append(u.report.FilesChanged, wrote...)
	judged := cdiStage(res, len(expect), wrote)
	specsFailed := judged.Status == StatusFailed
	runtimeErr := ""
	if runtime != nil {
		runtimeErr = foldRuntime(&judged, res.Findings.Errors(), runtime(), u.opts.Log)
	}
	st.Status, st.Summary, st.Reasons = judged.Status, judged.Summary, judged.Reasons
	switch {
	case specsFailed:
		st.Status = StatusOK // run marks it failed from the error
		// foldRuntime keeps the specs' own errors first.
		return fault.CheckFailed(fmt.Errorf("CDI spec %q: %s", res.Spec, judged.Reasons[0]))
	case runtimeErr != "":
		st.Status = StatusOK
		return fault.CheckFailed(fmt.Errorf("the containerd k3s runs cannot serve the patched spec: %s", runtimeErr))
	}
	return nil
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
	var errs, warns []string
	for _, f := range fs {
		switch {
		case f.Code == containerd.CodeNotWritten:
			log.Debug("containerd config not judged", "reason", f.Message)
		case f.Severity == cdi.SeverityError:
			errs = append(errs, f.Code+": "+f.Message)
		default:
			warns = append(warns, f.Code+": "+f.Message)
		}
	}
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

// lastReport reads the status file's report (ReadStatus); nil when there
// is none or it cannot be read (health and up report that; a re-patch only
// patches).
func lastReport(host *hostfs.Root, statusFile string) *Report {
	if statusFile == "" {
		return nil
	}
	r, err := ReadStatus(host, statusFile)
	if err != nil {
		return nil
	}
	return r
}

// cdiStage is the cdi stage's result for a patch of the view, as `up`
// words it: error findings fail it, warnings make it a warning.
func cdiStage(res *cdi.PatchResult, expect int, wrote []string) StageResult {
	st := StageResult{Name: StageCDI, Status: StatusOK}
	var warnings []string
	for _, f := range res.Findings {
		if f.Severity == cdi.SeverityError {
			st.Reasons = append(st.Reasons, f.Code+": "+f.Message)
		} else {
			warnings = append(warnings, f.Code+": "+f.Message)
		}
	}
	subject := res.Spec + " unchanged"
	switch {
	case len(st.Reasons) > 0:
		st.Status = StatusFailed
		subject = res.Spec + " not patched: nothing written"
	case len(wrote) > 0:
		subject = "re-patched " + strings.Join(wrote, ", ") // the specs written, which need not include res.Spec
	}
	if len(st.Reasons) == 0 && len(warnings) > 0 {
		st.Status = StatusWarning
	}
	st.Reasons = append(st.Reasons, warnings...)
	files := 0
	if res.Graphics != nil {
		files = len(res.Graphics.Files)
	}
	st.Summary = fmt.Sprintf("%s, %s, %s checked%s", subject, count(files, "graphics file"), count(expect, "device name"), leftAlone(res))
	return st
}

// rejudge is prev with its cdi stage replaced by st: ready when the node's
// boot was ready, no other stage failed and st passed.
func rejudge(prev *Report, st StageResult, opts RepatchOptions, start time.Time) *Report {
	rep := *prev
	rep.Command = CommandRepatch
	rep.Version = opts.Version
	rep.StartedAt = start.UTC()
	bootReady, bootVerdict := prev.Ready, prev.Verdict
	if prev.Command != "" && prev.BootReady != nil {
		bootReady, bootVerdict = *prev.BootReady, prev.BootVerdict
	}
	rep.BootReady, rep.BootVerdict = &bootReady, bootVerdict
	rep.Stages = slices.Clone(prev.Stages)
	replaced := false
	othersOK := true
	for i, s := range rep.Stages {
		if s.Name == StageCDI {
			rep.Stages[i], replaced = st, true
			continue
		}
		if s.Status == StatusFailed {
			othersOK = false
		}
	}
	if !replaced {
		rep.Stages = append(rep.Stages, st)
	}
	rep.DurationMS = st.DurationMS
	rep.Ready = bootReady && othersOK && st.Status != StatusFailed
	switch {
	case rep.Ready && rep.Tainted:
		rep.Verdict = "ready, tainted " + nodepolicy.UnhealthyTaint + " (self-test failed)"
	case rep.Ready:
		rep.Verdict = "ready"
	case !bootReady:
		rep.Verdict = "not ready: the last nodeprep up left the node not ready (" + bootVerdict + ")"
	default:
		rep.Verdict = "not ready: " + firstReason(&rep)
	}
	if !rep.Ready && st.Status == StatusFailed {
		rep.stageErr = fault.CheckFailed(errors.New(st.Reasons[0]))
	}
	return &rep
}

func stageReasons(r *Report, name string) []string {
	for _, s := range r.Stages {
		if s.Name == name {
			return s.Reasons
		}
	}
	return nil
}
