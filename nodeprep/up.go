package nodeprep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
)

// Stage names, in pipeline order.
const (
	StageInventory = "inventory" // GPU inventory from NVML
	StageCDI       = "cdi"       // CDI spec patch and device-name check
	StageSelftest  = "selftest"  // adapter self-test (and in-container, when configured)
	StageJoin      = "join"      // the k3s drop-in
)

// Stage statuses.
const (
	StatusOK      = "ok"      // passed
	StatusWarning = "warning" // passed with a caveat (e.g. tainted)
	StatusFailed  = "failed"  // made the node unsafe; later stages are skipped
	StatusSkipped = "skipped" // an earlier stage failed
)

// Notifier tells the service manager how the run goes: the cmd layer
// passes one over sd_notify(3) (github.com/coreos/go-systemd daemon);
// nil means nothing is sent.
type Notifier interface {
	// Notify sends a state string such as "READY=1\nSTATUS=ready".
	Notify(state string) error
}

// UpOptions is everything `nodeprep up` needs; the cmd layer fills it from
// flags and the config file.
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

// StageResult is one stage's outcome.
type StageResult struct {
	Name   string `json:"name" yaml:"name"`     // one of the Stage* constants
	Status string `json:"status" yaml:"status"` // one of the Status* constants
	// DurationMS is the stage's wall time in milliseconds.
	DurationMS float64 `json:"durationMs" yaml:"durationMs"`
	// Summary is the stage's key facts in one line.
	Summary string `json:"summary,omitempty" yaml:"summary,omitempty"`
	// Reasons say why a stage failed or warned, one per problem.
	Reasons []string `json:"reasons,omitempty" yaml:"reasons,omitempty"`
}

// Report is the result of `nodeprep up`, written to the status file and
// printed by `up -o json`.
type Report struct {
	Version string `json:"version" yaml:"version"` // nodeprep's version
	// Command is "health" for a `nodeprep health` report, CommandRepatch
	// for a re-patch after boot, empty for `up`.
	Command string `json:"command,omitempty" yaml:"command,omitempty"`
	// ExpectedGPUs are the UUIDs of the GPUs the node booted with (the
	// inventory of the last `up`), which `health` requires still present.
	ExpectedGPUs []string `json:"expectedGPUs,omitempty" yaml:"expectedGPUs,omitempty"`
	// BootReady and BootVerdict are, in a `health` report, the verdict of
	// the `up` the node booted with, carried from report to report: a node
	// `up` did not make ready is never ready by health.
	BootReady   *bool  `json:"bootReady,omitempty" yaml:"bootReady,omitempty"`
	BootVerdict string `json:"bootVerdict,omitempty" yaml:"bootVerdict,omitempty"`
	// Ready is true when the node may join: every stage ok, or the
	// self-test failed under nodepolicy.PolicyTaint (then Tainted is true).
	Ready   bool `json:"ready" yaml:"ready"`
	Tainted bool `json:"tainted" yaml:"tainted"` // see Ready
	// Simulated is true when the inventory came from --simulate.
	Simulated bool `json:"simulated" yaml:"simulated"`
	// Verdict is "ready", "ready, tainted" or "not ready: <first reason>".
	Verdict    string        `json:"verdict" yaml:"verdict"`
	StartedAt  time.Time     `json:"startedAt" yaml:"startedAt"`   // when the run started, UTC
	DurationMS float64       `json:"durationMs" yaml:"durationMs"` // the whole run, ms
	Stages     []StageResult `json:"stages" yaml:"stages"`         // every stage in order, skipped ones included
	// FilesChanged are the host paths this run wrote (besides the status
	// and metrics files).
	FilesChanged []string         `json:"filesChanged" yaml:"filesChanged"`
	Inventory    *gpu.Inventory   `json:"inventory,omitempty" yaml:"inventory,omitempty"` // the inventory stage's result
	CDI          *cdi.PatchResult `json:"cdi,omitempty" yaml:"cdi,omitempty"`             // the CDI stage's result
	Selftest     *selftest.Report `json:"selftest,omitempty" yaml:"selftest,omitempty"`   // the self-test's result
	// Container is the in-container self-test, when configured.
	Container *container.Report `json:"container,omitempty" yaml:"container,omitempty"`
	Join      *k3s.Result       `json:"join,omitempty" yaml:"join,omitempty"` // the join stage's result
	// PeakRSSMiB is this nodeprep process's peak resident memory in MiB
	// (getrusage(2) ru_maxrss), without the probe children, which load the
	// driver.
	PeakRSSMiB  float64 `json:"peakRSSMiB" yaml:"peakRSSMiB"`
	StatusFile  string  `json:"statusFile" yaml:"statusFile"`                       // host path of the status file
	MetricsFile string  `json:"metricsFile,omitempty" yaml:"metricsFile,omitempty"` // host path of the metrics file, if any
	stageErr    error   // the error of the stage that stopped the run
}

// Err is nil for a ready node; otherwise the stopping stage's error, whose
// fault kind gives the exit code (a failed self-test or check: 1; NVML
// missing: 69; a malformed spec: 65; ...).
func (r *Report) Err() error { return r.stageErr }

// upRun is the environment the stages share. The run has two phases, as
// terraform's plan and apply: plan reads and validates every stage's inputs
// (the inventory, the patched spec, the k3s config files, drop-ins, labels
// and taints) and writes nothing; apply runs the stages that act (the spec
// write, the self-test, the drop-in write). Bad input of any stage is
// therefore found before the first write.
type upRun struct {
	host   *hostfs.Root
	opts   UpOptions
	report *Report
	inv    *gpu.Inventory     // healthy GPUs only, for the self-test and labels
	stages [4]StageResult     // inventory, cdi, selftest, join; Status "" until the stage runs
	patch  *specset.PatchPlan // the cdi stage's plan: every GPU spec in the runtime's view
	expect int                // device names the spec was checked for
	// probes are the self-test's children, started as soon as the
	// inventory is in (they test the host's drivers, not the plan) so
	// that they run while the other stages plan; Up stops them on return.
	probes *selftest.Probes
}

// stage indexes into upRun.stages, in pipeline order.
const (
	iInventory = iota
	iCDI
	iSelftest
	iJoin
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
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnSelftestFailure == "" {
		opts.OnSelftestFailure = nodepolicy.PolicyBlock
	}
	if err := nodepolicy.CheckPolicy(opts.OnSelftestFailure); err != nil {
		return nil, fault.Usage(err)
	}
	if err := CheckOutputs(Output{"status file", opts.StatusFile}, Output{"metrics file", opts.MetricsFile}, Output{"k3s drop-in", opts.Join.DropInPath()}); err != nil {
		return nil, err
	}
	u := &upRun{host: host, opts: opts, report: &Report{
		Version: opts.Version, StartedAt: opts.Now().UTC(), StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile,
		FilesChanged: []string{},
	}}
	for i, name := range []string{StageInventory, StageCDI, StageSelftest, StageJoin} {
		u.stages[i].Name = name
	}
	start := opts.Now()
	u.notify("STATUS=inspecting GPUs")
	// A failed plan, preflight or spec write leaves the early probes
	// running: none may outlive the run.
	defer func() {
		if u.probes != nil {
			u.probes.Stop()
		}
	}()
	stopped := u.plan(ctx)
	if errors.Is(stopped, fault.ErrUsage) {
		return nil, stopped
	}
	if stopped == nil {
		if err := u.preflight(); err != nil {
			return nil, err
		}
		stopped = u.apply(ctx)
	}
	u.finish(start, stopped, iInventory, iCDI, iSelftest, iJoin)
	r := u.report
	switch {
	case !r.Ready:
		r.Verdict = "not ready: " + firstReason(r)
	case r.Tainted:
		r.Verdict = "ready, tainted " + nodepolicy.UnhealthyTaint + " (self-test failed)"
	default:
		r.Verdict = "ready"
	}
	err := u.writeOutputs()
	if r.Ready {
		u.notify("READY=1\nSTATUS=" + r.Verdict)
	} else {
		u.notify("STATUS=" + r.Verdict)
	}
	return r, err
}

// finish puts the stages at the indexes idx into the report (a stage that
// never ran is skipped) and sets its duration, peak RSS and readiness.
func (u *upRun) finish(start time.Time, stopped error, idx ...int) {
	r := u.report
	for _, i := range idx {
		st := u.stages[i]
		if st.Status == "" {
			st.Status = StatusSkipped
		}
		r.Stages = append(r.Stages, st)
	}
	r.DurationMS = ms(u.opts.Now().Sub(start))
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024 // Linux reports KiB
	}
	r.stageErr = stopped
	r.Ready = stopped == nil
}

// run runs f as part of stage i, adding its time to the stage's and
// marking the stage failed when f fails.
func (u *upRun) run(i int, f func(st *StageResult) error) error {
	st := &u.stages[i]
	if st.Status == "" {
		st.Status = StatusOK
	}
	t0 := u.opts.Now()
	before := len(st.Reasons)
	err := f(st)
	st.DurationMS += ms(u.opts.Now().Sub(t0))
	if err != nil {
		st.Status = StatusFailed
		if len(st.Reasons) == before {
			// f said nothing of this failure itself (a write that failed
			// after the plan's warnings): the error leads the reasons.
			msg := err.Error()
			if u.opts.Hint != nil {
				if h := u.opts.Hint(err); h != "" {
					msg += " (" + h + ")"
				}
			}
			st.Reasons = append([]string{msg}, st.Reasons...)
		}
		// The report carries the reason; logging it louder would say it
		// twice on a terminal and in the journal.
		u.opts.Log.Debug("stage failed", "stage", st.Name, "err", err)
	}
	return err
}

// plan reads and validates every stage's inputs and writes nothing. When a
// later stage's plan fails, the stages planned before it are marked skipped:
// nothing of theirs was applied. Once the inventory is in, it starts the
// self-test's probe children (startProbes), which run while the cdi and
// join stages plan.
func (u *upRun) plan(ctx context.Context) error {
	if err := u.run(iInventory, u.inventory); err != nil {
		return err
	}
	u.startProbes(ctx)
	if err := u.run(iCDI, u.planCDI); err != nil {
		return err
	}
	if err := u.run(iJoin, u.planJoin); err != nil {
		u.stages[iJoin].Summary = "invalid input: nothing written"
		if st := &u.stages[iCDI]; st.Status != StatusFailed {
			st.Status = StatusSkipped
			st.Summary = fmt.Sprintf("%s not patched: nothing written (the %s stage's input is invalid)", u.opts.CDI.Spec, StageJoin)
			st.Reasons = nil
		}
		return err
	}
	return nil
}

// apply runs the stages that act, in order, on the plan.
func (u *upRun) apply(ctx context.Context) error {
	// The join stage was only planned: it runs for real, with the
	// self-test's labels, or is skipped when a stage before it fails.
	u.stages[iJoin] = StageResult{Name: StageJoin}
	if err := u.run(iCDI, func(st *StageResult) error {
		if err := ctx.Err(); err != nil { // SIGTERM while planning
			st.Summary = u.cdiSummary("not patched: nothing written")
			return fault.CheckFailed(fmt.Errorf("stopped before the first write: %w", err))
		}
		return u.applyCDI(st)
	}); err != nil {
		return err
	}
	if err := u.run(iSelftest, func(st *StageResult) error { return u.selftest(ctx, st) }); err != nil {
		return err
	}
	return u.run(iJoin, func(st *StageResult) error {
		if err := ctx.Err(); err != nil {
			return fault.CheckFailed(fmt.Errorf("stopped before writing the drop-in: %w", err))
		}
		return u.join(st)
	})
}

// preflight checks, before any stage writes, everything the run will
// write or need that can be known in advance: the status and metrics files
// and the k3s drop-in can be written (a probe file in each directory, so a
// read-only mount or an over-long name fails now, not after the spec was
// patched), and the in-container self-test's rootfs and runtime exist.
// The status file's directory is created, and so is the metrics file's when
// it is the same; a metrics directory of its own is node_exporter's and
// must exist. Nothing else is written.
func (u *upRun) preflight() error {
	check := func(what, p string, mkdir bool) error {
		if p == "" {
			return nil
		}
		if !path.IsAbs(p) {
			return fault.Usage(fmt.Errorf("%s %q: want an absolute host path", what, p))
		}
		if err := u.host.CheckWritable(p, mkdir); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	// The container's inputs first: the output checks create directories.
	if u.opts.Container != nil {
		if err := container.Preflight(*u.opts.Container); err != nil {
			return err
		}
	}
	sameDir := u.opts.StatusFile != "" && path.Dir(u.opts.MetricsFile) == path.Dir(u.opts.StatusFile)
	dropIn := u.opts.Join.DropInPath()
	if u.report.Command == "health" { // health writes no drop-in
		dropIn = ""
	}
	for _, c := range []struct {
		what, path string
		mkdir      bool
	}{
		{"status file", u.opts.StatusFile, true},
		{"metrics file", u.opts.MetricsFile, sameDir},
		{"k3s drop-in", dropIn, true},
	} {
		if err := check(c.what, c.path, c.mkdir); err != nil {
			return err
		}
	}
	return nil
}

func firstReason(r *Report) string {
	for _, s := range r.Stages {
		if s.Status == StatusFailed && len(s.Reasons) > 0 {
			return s.Name + ": " + s.Reasons[0]
		}
	}
	return "unknown"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (u *upRun) notify(state string) {
	if u.opts.Notifier == nil {
		return
	}
	if err := u.opts.Notifier.Notify(state); err != nil {
		u.opts.Log.Warn("sd_notify failed", "err", err)
	}
}

func (u *upRun) inventory(st *StageResult) error {
	inv, err := u.opts.Inventory()
	if err != nil {
		return err
	}
	u.report.Inventory = inv
	u.report.Simulated = inv.Simulated
	if u.report.Command == "" {
		for _, g := range inv.GPUs {
			u.report.ExpectedGPUs = append(u.report.ExpectedGPUs, g.UUID)
		}
	}
	healthy := inv.Healthy()
	for _, g := range inv.GPUs {
		if !g.Health.Healthy {
			st.Status = StatusWarning
			st.Reasons = append(st.Reasons, fmt.Sprintf("GPU %d (%s) unhealthy: %s; it is left out", g.Index, g.UUID, strings.Join(g.Health.Reasons, ", ")))
		}
	}
	// A GPU in MIG mode with no MIG device passes NVML's health checks
	// but gives a pod nothing to compute on: `inspect` and `cdi check`
	// warn, and so does `up`, in its summary and its reasons.
	if w := inv.Warnings(); len(w) > 0 {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, w...)
	}
	st.Summary = fmt.Sprintf("%s (%d healthy), driver %s, CUDA %s", count(len(inv.GPUs), "GPU"), len(healthy), inv.DriverVersion, inv.CUDADriverVersion)
	if n := len(inv.Warnings()); n > 0 {
		st.Summary += fmt.Sprintf(", %s in MIG mode without a MIG device", count(n, "GPU"))
	}
	if inv.Simulated {
		st.Summary += ", simulated " + inv.Server
	}
	if len(healthy) == 0 {
		err := fault.CheckFailed(errors.New("no healthy GPU"))
		st.Reasons = append([]string{err.Error()}, st.Reasons...)
		return err
	}
	only := *inv
	only.GPUs = healthy
	u.inv = &only
	return nil
}

// planCDI reads the spec, patches it in memory and checks the result
// (device names, host paths, the CDI library's validation). It writes
// nothing; findings that are errors fail the stage.
func (u *upRun) planCDI(st *StageResult) error {
	expect, err := nodepolicy.ExpectedCDIDevices(u.inv, u.opts.DeviceNames)
	if err != nil {
		return err
	}
	u.expect = len(expect)
	opts := u.opts.CDI
	opts.Expect = expect
	opts.Discover.DriverVersion = u.inv.DriverVersion
	plan, err := specset.PlanPatch(u.host, opts)
	if err != nil {
		return err
	}
	u.patch = plan
	res := plan.Result
	u.report.CDI = res
	var warnings []string
	for _, f := range res.Findings {
		if f.Severity == cdi.SeverityError {
			st.Reasons = append(st.Reasons, f.Code+": "+f.Message)
		} else {
			warnings = append(warnings, f.Code+": "+f.Message)
		}
	}
	if len(st.Reasons) > 0 {
		st.Summary = u.cdiSummary("not patched: nothing written")
		st.Reasons = append(st.Reasons, warnings...)
		return fault.CheckFailed(fmt.Errorf("CDI spec %q: %s, nothing written", res.Spec, count(len(st.Reasons)-len(warnings), "problem")))
	}
	if len(warnings) > 0 {
		st.Status = StatusWarning
		st.Reasons = warnings
	}
	return nil
}

// applyCDI writes the spec the plan patched, when it changed.
func (u *upRun) applyCDI(st *StageResult) error {
	if err := specset.ApplyPatch(u.host, u.patch); err != nil {
		return err
	}
	res := u.patch.Result
	for _, r := range append([]*cdi.PatchResult{res}, res.Related...) {
		if r.Written {
			u.report.FilesChanged = append(u.report.FilesChanged, r.Spec)
		}
	}
	verb := "unchanged"
	if res.Written {
		verb = fmt.Sprintf("patched (%s)", count(len(res.Changes), "change"))
	}
	st.Summary = u.cdiSummary(verb)
	return nil
}

func (u *upRun) cdiSummary(verb string) string {
	res := u.patch.Result
	return fmt.Sprintf("%s %s, %s, %s checked%s", res.Spec, verb, count(len(res.Graphics.Files), "graphics file"), count(u.expect, "device name"), leftAlone(res))
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

// startProbes starts the self-test's probe children (selftest.Start) early,
// before the plan is validated: they write nothing of the host's (the
// shader cache is used only when it exists, selftest.
// WithShaderCacheCreation), and SIGTERM cancels them, as Up's return does
// after a failed plan or write. An error starting them (no probe command)
// is left for the selftest stage to report.
func (u *upRun) startProbes(ctx context.Context) {
	if p, err := selftest.Start(ctx, append(slices.Clip(u.opts.Selftest), selftest.WithShaderCacheCreation(false))...); err == nil {
		u.probes = p
	}
}

func (u *upRun) selftest(ctx context.Context, st *StageResult) error {
	u.notify("STATUS=running the adapter self-test")
	p := u.probes
	if p == nil { // health, or an early start that failed: start them now
		var err error
		if p, err = selftest.Start(ctx, u.opts.Selftest...); err != nil {
			return err
		}
	}
	t0 := u.opts.Now()
	rep, err := p.Wait(u.inv)
	if err != nil {
		return err
	}
	// The stage took as long as the probes, which started with the plan,
	// plus what follows (the in-container self-test); run adds the time
	// spent here.
	st.DurationMS += rep.DurationMS - ms(u.opts.Now().Sub(t0))
	u.report.Selftest = rep
	matched := 0
	for _, m := range rep.Matches {
		if m.Vulkan {
			matched++
		}
	}
	st.Summary = fmt.Sprintf("%d/%d GPUs matched a Vulkan adapter; adapters found: %d Vulkan, %d EGL", matched, len(u.inv.GPUs), len(rep.Vulkan.Adapters), len(rep.EGL.Devices))
	if rep.StandIn {
		st.Summary += " (CPU stand-in for simulated GPUs)"
	}
	failure := rep.Err()
	for _, r := range rep.Reasons {
		st.Reasons = append(st.Reasons, r.String())
	}
	if u.opts.Container != nil {
		u.notify("STATUS=running the self-test inside a container")
		crep, err := container.Run(ctx, u.host, u.inv, *u.opts.Container)
		if err != nil {
			return err
		}
		u.report.Container = crep
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
	if u.opts.OnSelftestFailure == nodepolicy.PolicyTaint && ctx.Err() == nil {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, "policy taint: joining with "+nodepolicy.UnhealthyTaint+"; a taint reaches a Node only at its first registration")
		u.report.Tainted = true
		// The stage's reasons and the verdict say it; a warning would say
		// it a third time.
		u.opts.Log.Debug("self-test failed; joining tainted", "taint", nodepolicy.UnhealthyTaint)
		return nil
	}
	return failure // marked by selftest's and the container self-test's Report.Err: 69 for a missing library or runtime, else 1
}

// planJoin validates the join stage's inputs before anything is written:
// the labels (the user's, duplicates included, and the generated ones as
// they will be if the self-test passes, and under nodepolicy.PolicyTaint also if it
// fails), the taints, and the k3s config file, drop-ins and arguments
// merged as k3s would (k3s.Plan: malformed YAML, misspelt keys, invalid
// entries, FIFOs, later files that undo nodeprep's entries). The stage
// runs again for real after the self-test, with its actual result.
func (u *upRun) planJoin(st *StageResult) error {
	adapters := len(u.inv.GPUs)
	for _, r := range []struct {
		verdict string
		tainted bool
	}{{nodepolicy.SelftestPassed, false}, {nodepolicy.SelftestFailed, true}} {
		if r.tainted && u.opts.OnSelftestFailure != nodepolicy.PolicyTaint {
			continue
		}
		res, err := u.planDropIn(r.verdict, adapters, r.tainted)
		if err != nil {
			return err
		}
		if !r.tainted {
			if err := u.containerdVerdict(st, res); err != nil {
				return err
			}
		}
	}
	st.Summary = "planned: " + u.opts.Join.DropInPath()
	return nil
}

// containerdVerdict judges the containerd k3s runs as `cdi check` does,
// before anything is written: an error finding there (CDI off for the
// containerd installed, the spec's directory not in cdi_spec_dirs, an
// nvidia runtime handler that cannot run) is an error here too, and the
// node is not ready. One fact, one verdict: `cdi check`, `up` and the
// status agree. The warnings stay on the join stage (join reports them).
func (u *upRun) containerdVerdict(st *StageResult, res *k3s.Result) error {
	findings, _ := podpath.ContainerdFindings(u.host, res, u.opts.CDI.Spec, u.opts.CDI.Discover.DriverRoot)
	var errs []string
	for _, f := range findings {
		if f.Severity == cdi.SeverityError {
			errs = append(errs, f.Code+": "+f.Message)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	st.Reasons = append(st.Reasons, errs...)
	return fault.CheckFailed(fmt.Errorf("the containerd k3s runs cannot serve the patched spec: %s", errs[0]))
}

// planDropIn computes the node's labels for a self-test verdict and plans
// the drop-in with them (k3s.Plan; nothing is written).
func (u *upRun) planDropIn(verdict string, adapters int, tainted bool) (*k3s.Result, error) {
	labels, err := nodepolicy.NodeLabels(u.report.Inventory, nodepolicy.NodeLabelOptions{GFD: u.opts.GFDLabels, MIGStrategy: u.opts.MIGStrategy, Selftest: verdict, VulkanAdapters: &adapters, Extra: u.opts.ExtraLabels})
	if err != nil {
		return nil, err
	}
	opts := u.opts.Join
	opts.Labels = labels
	if tainted {
		t, err := k3s.ParseTaint(nodepolicy.UnhealthyTaint)
		if err != nil {
			return nil, err
		}
		opts.Taints = append(append([]k3s.Taint(nil), opts.Taints...), t)
	}
	return k3s.Plan(u.host, opts)
}

func (u *upRun) join(st *StageResult) error {
	result := nodepolicy.SelftestPassed
	adapters := 0
	if rep := u.report.Selftest; rep != nil {
		if !rep.Passed || u.report.Container != nil && !u.report.Container.Passed {
			result = nodepolicy.SelftestFailed
		}
		for _, m := range rep.Matches {
			if m.Vulkan {
				adapters++
			}
		}
	}
	res, err := u.planDropIn(result, adapters, u.report.Tainted)
	if err != nil {
		return err
	}
	u.report.Join = res
	for _, w := range res.Warnings {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, w)
	}
	if err := k3s.Apply(u.host, res); err != nil {
		return err
	}
	if res.Written {
		u.report.FilesChanged = append(u.report.FilesChanged, res.DropInPath)
	}
	findings, notes := podpath.ContainerdFindings(u.host, res, u.opts.CDI.Spec, u.opts.CDI.Discover.DriverRoot)
	for _, n := range notes {
		u.opts.Log.Debug(n)
	}
	for _, f := range findings {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, f.Code+": "+f.Message)
	}
	st.Summary = fmt.Sprintf("%s: %s, %s", res.DropInPath, count(len(res.Labels), "label"), count(len(res.Taints), "taint"))
	return nil
}
