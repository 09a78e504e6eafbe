package nodeprep

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"slices"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

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
// it is the report's verdict, and Report.Err is set. A named spec that is
// gone, and a view that cannot be loaded (fault.ErrMalformed: a spec
// directory that is not one, a spec file that is not a regular file),
// are both (viewFailed): the error is returned with a result whose report
// says not ready.
func Repatch(ctx context.Context, host *hostfs.Root, opts RepatchOptions) (*RepatchResult, error) {
	opts.Now, opts.Log = defaults(opts.Now, opts.Log)
	start := opts.Now()
	prev := lastReport(host, opts.StatusFile)
	copts := opts.CDI
	expect := 0
	if prev != nil && prev.Inventory != nil {
		inv := *prev.Inventory
		inv.GPUs = inv.Healthy()
		var err error
		if copts, err = expectOptions(copts, &inv, opts.DeviceNames); err != nil {
			return nil, err
		}
		expect = len(copts.Expect)
	}
	res := &RepatchResult{Wrote: []string{}}
	var err error
	if res.Patch, res.Wrote, res.Files, res.Retries, err = patchView(ctx, host, copts, opts.Log); err != nil {
		if prev != nil && errors.Is(err, fs.ErrNotExist) && !host.Exists(copts.Spec) {
			return viewFailed(host, prev, err, opts.CDI.Spec+" not patched: it is gone", opts, start)
		}
		if prev != nil && errors.Is(err, fault.ErrMalformed) {
			// What health's cdi stage fails on too (a spec directory that
			// is a file, a FIFO named *.json): not ready now, not at the
			// next health run.
			return viewFailed(host, prev, err, "the CDI specs were not patched: the view cannot be read", opts, start)
		}
		return nil, err
	}
	if prev == nil {
		return res, nil
	}
	st, _ := judgeView(res.Patch, expect, res.Wrote, opts.Runtime, opts.Log)
	st.DurationMS = ms(opts.Now().Sub(start))
	rep := rejudge(prev, st, opts, start)
	rep.CDI = res.Patch
	rep.FilesChanged = slices.Clone(res.Wrote)
	res.Report = rep
	if len(res.Wrote) == 0 && rep.Ready == prev.Ready && rep.Verdict == prev.Verdict && slices.Equal(stageReasons(rep, StageCDI), stageReasons(prev, StageCDI)) {
		return res, nil // nothing changed: status and metrics stay as they are
	}
	if err := (statusFiles{host: host, status: opts.StatusFile, metrics: opts.MetricsFile, now: opts.Now}).write(rep); err != nil {
		return res, err
	}
	res.StatusWritten = true
	return res, nil
}

// viewFailed is a re-patch's result when the view could not be patched
// for a reason health's cdi stage fails on too, and there is a status
// report: the spec `up` patched (opts.CDI.Spec) does not exist any more,
// removed or a link to nothing, or the view cannot be loaded. The cdi
// stage fails with err (summary says what), so status.json and
// nodeprep_ready turn not ready now, naming the cause, rather than at the
// next health run. The status and metrics are written when the verdict
// changed. It returns the result (Patch nil, Report set) and err, or the
// write's error.
func viewFailed(host *hostfs.Root, prev *Report, err error, summary string, opts RepatchOptions, start time.Time) (*RepatchResult, error) {
	st := StageResult{Name: StageCDI, Status: StatusFailed, Summary: summary, Reasons: []string{err.Error()}}
	st.DurationMS = ms(opts.Now().Sub(start))
	rep := rejudge(prev, st, opts, start)
	rep.CDI, rep.FilesChanged = nil, []string{}
	res := &RepatchResult{Wrote: []string{}, Report: rep}
	if rep.Ready == prev.Ready && rep.Verdict == prev.Verdict && slices.Equal(stageReasons(rep, StageCDI), stageReasons(prev, StageCDI)) {
		return res, err // said already
	}
	if werr := (statusFiles{host: host, status: opts.StatusFile, metrics: opts.MetricsFile, now: opts.Now}).write(rep); werr != nil {
		return res, errors.Join(err, werr)
	}
	res.StatusWritten = true
	return res, err
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
	rep.judge()
	if !bootReady {
		rep.Verdict = "not ready: the last nodeprep up left the node not ready (" + bootVerdict + ")"
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
