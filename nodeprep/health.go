package nodeprep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// HealthOptions is everything `nodeprep health` needs.
type HealthOptions struct {
	// Inventory builds the GPU inventory (NVML or a simulated server).
	Inventory func() (*gpu.Inventory, error)
	// Selftest are the self-test's options.
	Selftest []selftest.Option
	// StatusFile is the host path of the status report: read for the GPUs
	// the node booted with, then rewritten.
	StatusFile string
	// MetricsFile is the host path of the Prometheus textfile ("" = none).
	MetricsFile string
	Log         *slog.Logger // diagnostics (nil: discarded)
	// Now is the clock (time.Now when nil).
	Now     func() time.Time
	Version string // nodeprep's version, for the report
}

// Health re-checks a running node: the inventory and the adapter self-test,
// with no CDI patch and no join, then rewrites the status file and the
// metrics textfile so that nodeprep_ready follows the node's GPUs between
// boots. The node is ready when every GPU the last `up` found (the status
// file's expectedGPUs) is still present and healthy and the self-test
// passes; a failed self-test is never ready here, whatever up's policy.
// The caller holds the host lock. Errors are the outputs' (preflight or
// write, nothing written on a preflight error); the verdict is
// Report.Ready and Report.Err.
func Health(ctx context.Context, host *hostfs.Root, opts HealthOptions) (*Report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	u := &upRun{host: host, opts: UpOptions{
		Inventory: opts.Inventory, Selftest: opts.Selftest, OnSelftestFailure: PolicyBlock,
		StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile, Log: opts.Log, Now: opts.Now, Version: opts.Version,
	}, report: &Report{
		Version: opts.Version, Command: "health", StartedAt: opts.Now().UTC(),
		StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile, FilesChanged: []string{},
	}}
	if err := u.preflight(); err != nil {
		return nil, err
	}
	expected, baselineErr := expectedGPUs(host, opts.StatusFile)
	u.report.ExpectedGPUs = expected
	for i, name := range []string{StageInventory, StageCDI, StageSelftest, StageJoin} {
		u.stages[i].Name = name
	}
	start := opts.Now()
	var stopped error
	if baselineErr != nil {
		// A status file that cannot be read has lost the GPUs the node
		// booted with: health cannot tell a missing GPU, so the node is
		// not ready, and the file is kept as it is (rewriting it would
		// make today's GPUs the baseline) until `up` writes it again.
		stopped = u.run(iInventory, func(st *StageResult) error {
			st.Summary = "no GPU baseline"
			return fault.CheckFailed(fmt.Errorf("the GPUs the node booted with cannot be read from %s (%v): run nodeprep up to record them again", opts.StatusFile, baselineErr))
		})
		u.opts.StatusFile = ""
		u.report.StatusFile = ""
	} else {
		stopped = u.run(iInventory, u.healthInventory)
	}
	if stopped == nil {
		stopped = u.run(iSelftest, func(st *StageResult) error { return u.selftest(ctx, st) })
	}
	u.finish(start, stopped, iInventory, iSelftest)
	r := u.report
	if r.Ready {
		r.Verdict = "ready"
	} else {
		r.Verdict = "not ready: " + firstReason(r)
	}
	return r, u.writeOutputs()
}

// expectedGPUs reads the GPUs the node booted with from the last report:
// its expectedGPUs, else its inventory's UUIDs. A missing file gives none.
func expectedGPUs(host *hostfs.Root, statusFile string) ([]string, error) {
	if statusFile == "" {
		return nil, nil
	}
	data, err := host.ReadFile(statusFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var prev Report
	if err := json.Unmarshal(data, &prev); err != nil { // a torn file, or "expectedGPUs": 10
		return nil, fmt.Errorf("reading status %q: %w", statusFile, err)
	}
	if len(prev.ExpectedGPUs) > 0 || prev.Inventory == nil {
		return prev.ExpectedGPUs, nil
	}
	var out []string
	for _, g := range prev.Inventory.GPUs {
		out = append(out, g.UUID)
	}
	return out, nil
}

// healthInventory is the inventory stage plus the baseline: a GPU the node
// booted with that NVML no longer lists, or lists unhealthy, fails it.
func (u *upRun) healthInventory(st *StageResult) error {
	if err := u.inventory(st); err != nil {
		return err
	}
	var lost []string
	for _, id := range u.report.ExpectedGPUs {
		if !slices.ContainsFunc(u.inv.GPUs, func(g gpu.GPU) bool { return g.UUID == id }) {
			lost = append(lost, id)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	err := fault.CheckFailed(fmt.Errorf("%d GPU(s) the node booted with are missing or unhealthy: %s", len(lost), strings.Join(lost, ", ")))
	st.Reasons = append([]string{err.Error()}, st.Reasons...)
	return err
}
