package nodeprep

import (
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
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

// CommandRepatch is Report.Command of a status report that a re-patch
// after boot wrote (`nodeprep cdi patch`, `nodeprep cdi watch`, the NixOS
// path unit): the last report with its cdi stage judged again.
const CommandRepatch = "cdi patch"

// commandHealth is Report.Command of a `nodeprep health` report.
const commandHealth = "health"

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
	BootVerdict string `json:"bootVerdict,omitempty" yaml:"bootVerdict,omitempty"` // see BootReady
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
	// Trimmed is set in a status file written trimmed, and says what was
	// left out: the report was over what the file's readers read
	// (bounded.MaxStatus), so the stages' detailed results, the stage
	// reasons past the first 20 and the long texts are not kept.
	Trimmed  string `json:"trimmed,omitempty" yaml:"trimmed,omitempty"`
	stageErr error  // the error of the stage that stopped the run
}

// Err is nil for a ready node; otherwise the stopping stage's error, whose
// fault kind gives the exit code (a failed self-test or check: 1; NVML
// missing: 69; a malformed spec: 65; ...).
func (r *Report) Err() error { return r.stageErr }

// judge sets the verdict from the stages and Ready: "not ready: " and the
// first failed stage's first reason, "ready, tainted …" or "ready".
func (r *Report) judge() {
	switch {
	case !r.Ready:
		r.Verdict = "not ready: " + firstReason(r)
	case r.Tainted:
		r.Verdict = "ready, tainted " + nodepolicy.UnhealthyTaint + " (self-test failed)"
	default:
		r.Verdict = "ready"
	}
}

func firstReason(r *Report) string {
	for _, s := range r.Stages {
		if s.Status == StatusFailed && len(s.Reasons) > 0 {
			return s.Name + ": " + s.Reasons[0]
		}
	}
	return "unknown"
}

// vulkanMatched counts the GPUs of the self-test's report matched to a
// Vulkan adapter whose compute dispatch verified (0 for no report).
func vulkanMatched(rep *selftest.Report) int {
	n := 0
	if rep != nil {
		for _, m := range rep.Matches {
			if m.Vulkan {
				n++
			}
		}
	}
	return n
}

// cudaMatched counts the GPUs of the self-test's report whose CUDA device
// passed the CUDA probe (0 for no report, or no CUDA probe).
func cudaMatched(rep *selftest.Report) int {
	n := 0
	if rep != nil {
		for _, m := range rep.Matches {
			if m.CUDA {
				n++
			}
		}
	}
	return n
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
