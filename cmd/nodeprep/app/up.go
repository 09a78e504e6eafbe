package app

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
)

// upOptions are `nodeprep up`'s flags: every stage's, plus the policy and
// the output files.
type upOptions struct {
	specFlags
	joinFlags
	selftestFlags
	ctr               containerFlags
	inv               inventoryFlags
	node              nodeReportFlags
	deviceNames       []string
	onSelftestFailure string
	statusFile        string
	metricsFile       string
	wait              time.Duration
}

func newUpCommand(g *globals) *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the whole boot pipeline: inventory, CDI patch, self-test, join (for the systemd unit)",
		Long: `up inspects the GPUs through NVML, patches the CDI spec and checks its device
names, runs the Vulkan and EGL adapter self-test, and writes the k3s join
drop-in, in that order, stopping at the first stage that makes the node
unsafe. It always writes the status file (--status-file) and, with
--metrics-file, a Prometheus textfile; under systemd it sends READY=1 once
the node is ready.

When the node has registered before (the kubelet's kubeconfig exists), up
also reports its verdict to the Node as health does, within a few seconds.

When the self-test fails, --on-selftest-failure=block (default) exits 1 and
writes no drop-in, so k3s.service, which requires nodeprep.service, does not
start; =taint joins with nodeprep.dev/gpu-unhealthy=true:NoExecute and exits 0.

Exit status: 0 ready, 1 not ready, and the stage's own code for bad input
(65), a missing NVML or spec (69), an unwritable file (73), a held lock (75).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, g) },
	}
	f := cmd.Flags()
	o.specFlags.add(cmd)
	o.joinFlags.add(f)
	o.selftestFlags.add(f)
	o.ctr.add(f, false)
	o.inv.add(f)
	o.node.add(f)
	f.StringSliceVar(&o.deviceNames, "device-names", []string{nodepolicy.DeviceNameUUID}, "device names the CDI spec must serve per GPU: uuid and/or index")
	f.StringVar(&o.onSelftestFailure, "on-selftest-failure", nodepolicy.PolicyBlock, "what a failed self-test does: block (exit 1, no drop-in) or taint (join tainted)")
	f.StringVar(&o.statusFile, "status-file", "/run/nodeprep/status.json", "host path of the status report written after every run")
	f.StringVar(&o.metricsFile, "metrics-file", "", "host path of a Prometheus textfile for node_exporter (default: none)")
	addWaitFlag(cmd, &o.wait)
	return cmd
}

func (o *upOptions) run(cmd *cobra.Command, g *globals) error {
	fs := cmd.Flags()
	cfg := g.cfg
	if err := o.inv.check(fs); err != nil {
		return err
	}
	policy := flagOr(fs, "on-selftest-failure", o.onSelftestFailure, cfg.Up.OnSelftestFailure)
	js, err := o.joinFlags.resolve(g, fs)
	if err != nil {
		return err
	}
	st, err := o.selftestFlags.options(g, fs, o.inv.simulate != "")
	if err != nil {
		return err
	}
	cdiOpts := o.specFlags.options(g, cmd)
	var ctr *container.Options
	if copts, ok, err := o.ctr.options(g, fs, &o.selftestFlags, o.inv.simulate != "", cdiOpts.Spec); err != nil {
		return err
	} else if ok {
		copts.SpecDirs = cdiOpts.SpecDirs
		ctr = &copts
	}
	uopts := nodeprep.UpOptions{
		Inventory:         func() (*gpu.Inventory, error) { return o.inv.inventory(g, fs) },
		CDI:               cdiOpts,
		DeviceNames:       flagOr(fs, "device-names", o.deviceNames, cfg.CDI.DeviceNames),
		Selftest:          st,
		Container:         ctr,
		Join:              js.opts,
		GFDLabels:         js.gfd,
		MIGStrategy:       js.mig,
		ExtraLabels:       js.extra,
		OnSelftestFailure: policy,
		StatusFile:        flagOr(fs, "status-file", o.statusFile, cfg.Up.StatusFile),
		MetricsFile:       flagOr(fs, "metrics-file", o.metricsFile, cfg.Up.MetricsFile),
		Notifier:          systemdNotifier{},
		Log:               g.log,
		Version:           currentVersion().Version,
		Hint:              func(err error) string { return rootHint(fs, g.rootDir, err) },
	}
	// Before the lock, whose file a refused run must not create either.
	if err := nodeprep.CheckOutputs(uopts.Outputs()...); err != nil {
		return err
	}
	unlock, err := lock(cmd.Context(), g, cmd, o.wait)
	if err != nil {
		return err
	}
	defer unlock() //nolint:errcheck // closing the lock file releases it

	rep, err := nodeprep.Up(cmd.Context(), g.host, uopts)
	if rep != nil {
		dataDir := ""
		if rep.Join != nil {
			dataDir = rep.Join.DataDir
		}
		// At boot k3s is not running yet, and an agent reaches the API
		// server through k3s's own load balancer: the report fails fast
		// then, and the health timer makes it.
		reportNode(cmd.Context(), g, &o.node, rep, dataDir, true)
	}
	return finishReport(g, rep, err)
}

// systemdNotifier sends sd_notify(3) messages when NOTIFY_SOCKET is set
// (github.com/coreos/go-systemd/v22/daemon); without it, nothing.
type systemdNotifier struct{}

// Notify sends state over NOTIFY_SOCKET; without one it does nothing.
func (systemdNotifier) Notify(state string) error {
	_, err := daemon.SdNotify(false, state)
	return err
}

func writeUpText(w io.Writer, r *nodeprep.Report) error {
	var b strings.Builder
	if r.Simulated {
		fmt.Fprintf(&b, "simulated GPUs (%s): no real driver was used\n", r.Inventory.Server)
	}
	// The stage that stopped the run: a later stage's invalid input can
	// stop the stages before it too (up plans every stage before it acts).
	failed := ""
	for _, s := range r.Stages {
		if s.Status == nodeprep.StatusFailed {
			failed = s.Name
			break
		}
	}
	for _, s := range r.Stages {
		mark := map[string]string{nodeprep.StatusOK: "✓", nodeprep.StatusWarning: "!", nodeprep.StatusFailed: "✗", nodeprep.StatusSkipped: "-"}[s.Status]
		if s.Status == nodeprep.StatusSkipped {
			fmt.Fprintf(&b, "%s %-9s skipped (%s failed)\n", mark, s.Name, failed)
			continue
		}
		summary, reasons := s.Summary, s.Reasons
		if summary == "" && len(reasons) > 0 { // the reason is the summary
			summary, reasons = reasons[0], reasons[1:]
		}
		fmt.Fprintf(&b, "%s %-9s %8.1f ms  %s\n", mark, s.Name, s.DurationMS, summary)
		for _, reason := range reasons {
			fmt.Fprintf(&b, "    %s\n", reason)
		}
	}
	for _, f := range r.FilesChanged {
		fmt.Fprintf(&b, "wrote %s\n", f)
	}
	if r.StatusFile != "" {
		fmt.Fprintf(&b, "status %s\n", r.StatusFile)
	}
	if r.MetricsFile != "" {
		fmt.Fprintf(&b, "metrics %s\n", r.MetricsFile)
	}
	// The failed stage's reasons are printed above; the verdict names the
	// stage instead of saying them again.
	verdict := r.Verdict
	if !r.Ready && failed != "" {
		verdict = "not ready: " + failed + " failed"
	}
	fmt.Fprintf(&b, "%s (%.1f ms)\n", verdict, r.DurationMS)
	_, err := io.WriteString(w, b.String())
	return err
}

// finishReport prints the report of `up` or `health` (when there is one)
// and turns the run into its error: the run's own error, else a failed
// print (fault.ErrCantWrite), else the node's verdict (not ready: exit 1,
// its reason already printed).
func finishReport(g *globals, rep *nodeprep.Report, err error) error {
	if rep != nil {
		if perr := g.print(rep, func(w io.Writer) error { return writeUpText(w, rep) }); perr != nil && err == nil {
			err = fault.CantWrite(fmt.Errorf("printing the report: %w", perr))
		}
	}
	if err != nil {
		return err
	}
	if rerr := rep.Err(); rerr != nil {
		return silentIfPrinted(g, fmt.Errorf("node not ready: %w", rerr))
	}
	return nil
}
