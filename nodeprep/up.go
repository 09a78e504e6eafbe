package nodeprep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/ctrtest"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// Self-test failure policies (UpOptions.OnSelftestFailure).
const (
	// PolicyBlock: exit 1 and write no drop-in, so k3s.service (which
	// requires nodeprep.service) does not start.
	PolicyBlock = "block"
	// PolicyTaint: write the drop-in with UnhealthyTaint and a label, and
	// report ready-but-tainted (exit 0).
	PolicyTaint = "taint"
)

// UnhealthyTaint is the taint PolicyTaint adds when the self-test fails. Like
// every taint it reaches a Node only when it first registers.
const UnhealthyTaint = "nodeprep.dev/gpu-unhealthy=true:NoExecute"

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
	// device-name strategies the spec must serve (DeviceNameUUID, ...).
	CDI         cdi.FileOptions
	DeviceNames []string // device-name strategies the spec must serve (DeviceNameUUID, ...)
	// Selftest are the self-test's options (child command, loader, timeout).
	Selftest []selftest.Option
	// Container, when set, also runs the self-test inside an OCI container
	// started with the patched spec's devices (selftest.container).
	Container *ctrtest.Options
	// Join is the k3s drop-in to write; its Labels are computed here from
	// the inventory and the self-test (GFD labels when GFDLabels), with
	// ExtraLabels added; its Taints are used as given (plus UnhealthyTaint
	// under PolicyTaint).
	Join        k3s.Options
	GFDLabels   bool        // add GFD's nvidia.com/ labels
	ExtraLabels []k3s.Label // the user's labels; they win over generated ones
	// OnSelftestFailure is PolicyBlock (default) or PolicyTaint.
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
	// Ready is true when the node may join: every stage ok, or the
	// self-test failed under PolicyTaint (then Tainted is true).
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
	Container *ctrtest.Report `json:"container,omitempty" yaml:"container,omitempty"`
	Join      *k3s.Result     `json:"join,omitempty" yaml:"join,omitempty"` // the join stage's result
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

// step is one stage of the pipeline: it fills its part of the report and
// returns an error when the node is unsafe and the run must stop.
type step struct {
	name string
	run  func(u *upRun, ctx context.Context, st *StageResult) error
}

// upRun is the environment the steps share.
type upRun struct {
	host   *hostfs.Root
	opts   UpOptions
	report *Report
	inv    *gpu.Inventory // healthy GPUs only, for the self-test and labels
}

// Up runs the boot pipeline: inventory, CDI patch, self-test, join, in
// that order, stopping at the first stage that makes the node unsafe.
//
// Before any stage it runs the preflight (outputs writable, --container
// inputs present); a preflight failure returns (nil, error) and nothing is
// written. Otherwise it writes the status file (and the metrics file when
// set) whatever the verdict, and notifies the service manager; the
// returned error is then about those files only, and the node's verdict is
// Report.Ready and Report.Err.
func Up(ctx context.Context, host *hostfs.Root, opts UpOptions) (*Report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.OnSelftestFailure == "" {
		opts.OnSelftestFailure = PolicyBlock
	}
	if err := CheckPolicy(opts.OnSelftestFailure); err != nil {
		return nil, fault.Usage(err)
	}
	u := &upRun{host: host, opts: opts, report: &Report{
		Version: opts.Version, StartedAt: opts.Now().UTC(), StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile,
		FilesChanged: []string{},
	}}
	if err := u.preflight(); err != nil {
		return nil, err
	}
	u.notify("STATUS=inspecting GPUs")
	steps := []step{
		{StageInventory, (*upRun).inventory},
		{StageCDI, (*upRun).cdi},
		{StageSelftest, (*upRun).selftest},
		{StageJoin, (*upRun).join},
	}
	start := opts.Now()
	var stopped error
	for _, s := range steps {
		st := StageResult{Name: s.name, Status: StatusOK}
		if stopped != nil {
			st.Status = StatusSkipped
			u.report.Stages = append(u.report.Stages, st)
			continue
		}
		t0 := opts.Now()
		err := s.run(u, ctx, &st)
		st.DurationMS = ms(opts.Now().Sub(t0))
		if err != nil {
			st.Status = StatusFailed
			if len(st.Reasons) == 0 {
				st.Reasons = []string{err.Error()}
			}
			stopped = err
			opts.Log.Error("stage failed", "stage", s.name, "err", err)
		}
		u.report.Stages = append(u.report.Stages, st)
	}
	r := u.report
	r.DurationMS = ms(opts.Now().Sub(start))
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024 // Linux reports KiB
	}
	r.stageErr = stopped
	r.Ready = stopped == nil
	switch {
	case !r.Ready:
		r.Verdict = "not ready: " + firstReason(r)
	case r.Tainted:
		r.Verdict = "ready, tainted " + UnhealthyTaint + " (self-test failed)"
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
	sameDir := u.opts.StatusFile != "" && path.Dir(u.opts.MetricsFile) == path.Dir(u.opts.StatusFile)
	for _, c := range []struct {
		what, path string
		mkdir      bool
	}{
		{"status file", u.opts.StatusFile, true},
		{"metrics file", u.opts.MetricsFile, sameDir},
		{"k3s drop-in", u.opts.Join.DropInPath(), true},
	} {
		if err := check(c.what, c.path, c.mkdir); err != nil {
			return err
		}
	}
	if u.opts.Container != nil {
		return ctrtest.Preflight(*u.opts.Container)
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

func (u *upRun) inventory(_ context.Context, st *StageResult) error {
	inv, err := u.opts.Inventory()
	if err != nil {
		return err
	}
	u.report.Inventory = inv
	u.report.Simulated = inv.Simulated
	healthy := inv.Healthy()
	for _, g := range inv.GPUs {
		if !g.Health.Healthy {
			st.Status = StatusWarning
			st.Reasons = append(st.Reasons, fmt.Sprintf("GPU %d (%s) unhealthy: %s; it is left out", g.Index, g.UUID, strings.Join(g.Health.Reasons, ", ")))
		}
	}
	st.Summary = fmt.Sprintf("%d GPUs (%d healthy), driver %s, CUDA %s", len(inv.GPUs), len(healthy), inv.DriverVersion, inv.CUDADriverVersion)
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

func (u *upRun) cdi(_ context.Context, st *StageResult) error {
	expect, err := ExpectedCDIDevices(u.inv, u.opts.DeviceNames)
	if err != nil {
		return err
	}
	opts := u.opts.CDI
	opts.Expect = expect
	opts.Discover.DriverVersion = u.inv.DriverVersion
	res, err := specset.Patch(u.host, opts, false)
	if err != nil {
		return err
	}
	u.report.CDI = res
	for _, r := range append([]*cdi.PatchResult{res}, res.Related...) {
		if r.Written {
			u.report.FilesChanged = append(u.report.FilesChanged, r.Spec)
		}
	}
	var warnings []string
	for _, f := range res.Findings {
		if f.Severity == cdi.SeverityError {
			st.Reasons = append(st.Reasons, f.Code+": "+f.Message)
		} else {
			warnings = append(warnings, f.Code+": "+f.Message)
		}
	}
	verb := "unchanged"
	switch {
	case len(st.Reasons) > 0:
		verb = "not patched: nothing written"
	case res.Written:
		verb = fmt.Sprintf("patched (%d changes)", len(res.Changes))
	}
	st.Summary = fmt.Sprintf("%s %s, %d graphics files, %d device names checked", res.Spec, verb, len(res.Graphics.Files), len(expect))
	if len(st.Reasons) > 0 {
		st.Reasons = append(st.Reasons, warnings...)
		return fault.CheckFailed(fmt.Errorf("CDI spec %q: %d problem(s), nothing written", res.Spec, len(st.Reasons)-len(warnings)))
	}
	if len(warnings) > 0 {
		st.Status = StatusWarning
		st.Reasons = warnings
	}
	return nil
}

func (u *upRun) selftest(ctx context.Context, st *StageResult) error {
	u.notify("STATUS=running the adapter self-test")
	rep, err := selftest.Run(ctx, u.inv, u.opts.Selftest...)
	if err != nil {
		return err
	}
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
		crep, err := ctrtest.Run(ctx, u.host, u.inv, *u.opts.Container)
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
	if u.opts.OnSelftestFailure == PolicyTaint {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, "policy taint: joining with "+UnhealthyTaint+"; a taint reaches a Node only at its first registration")
		u.report.Tainted = true
		u.opts.Log.Warn("self-test failed; joining tainted", "taint", UnhealthyTaint)
		return nil
	}
	return failure // marked by selftest's and ctrtest's Report.Err: 69 for a missing library or runtime, else 1
}

func (u *upRun) join(_ context.Context, st *StageResult) error {
	result := SelftestPassed
	adapters := 0
	if rep := u.report.Selftest; rep != nil {
		if !rep.Passed || u.report.Container != nil && !u.report.Container.Passed {
			result = SelftestFailed
		}
		for _, m := range rep.Matches {
			if m.Vulkan {
				adapters++
			}
		}
	}
	labels, err := NodeLabels(u.report.Inventory, NodeLabelOptions{GFD: u.opts.GFDLabels, Selftest: result, VulkanAdapters: &adapters, Extra: u.opts.ExtraLabels})
	if err != nil {
		return err
	}
	opts := u.opts.Join
	opts.Labels = labels
	if u.report.Tainted {
		t, err := k3s.ParseTaint(UnhealthyTaint)
		if err != nil {
			return err
		}
		opts.Taints = append(append([]k3s.Taint(nil), opts.Taints...), t)
	}
	res, err := k3s.Plan(u.host, opts)
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
	st.Summary = fmt.Sprintf("%s: %d labels, %d taints", res.DropInPath, len(res.Labels), len(res.Taints))
	return nil
}
