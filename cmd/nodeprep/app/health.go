package app

import (
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

type healthOptions struct {
	selftestFlags
	inv         inventoryFlags
	node        nodeReportFlags
	statusFile  string
	metricsFile string
}

func newHealthCommand(g *globals) *cobra.Command {
	o := &healthOptions{}
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Re-check a running node (inventory, the pod path's CDI specs, self-test) and update the status file and metrics",
		Long: `health is the periodic re-check the NixOS module runs from a timer
(services.nodeprep.health.interval): the GPU inventory, the pod path (every
GPU spec in the runtime's CDI directories patched again, as cdi patch does,
and judged with the inventory's device names; the containerd config k3s
renders and its runtime handlers, judged as cdi check judges them) and the
adapter self-test; no join. It rewrites the status file and the metrics
textfile, so nodeprep_ready turns 0 within one interval when a GPU the node
booted with falls off the bus, turns unhealthy or fails its dispatch, when a
spec that serves GPUs (the device plugin's, the DRA driver's, written after
boot) cannot be patched, or when the containerd k3s runs cannot serve the
patched spec: the reason names the spec or the finding.

Once the node has registered (the kubelet's kubeconfig, default
<k3s data-dir>/agent/kubelet.kubeconfig, exists), it also sets the node
condition GPUUnhealthy and the label nodeprep.dev/gpu-ready=true|false on
this node's Node, with the kubelet's credential (through nodeprep-cluster,
installed beside nodeprep). A failed report is logged and tried again at the
next run; it never changes the verdict or the exit status.

When another nodeprep holds the lock (up, cdi patch, join or another health) it skips
this run and exits 0.

Exit status: 0 ready or skipped, 1 not ready, 69 NVML or the Vulkan loader is
unavailable, 73 an output could not be written.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, g) },
	}
	f := cmd.Flags()
	o.inv.add(f)
	o.selftestFlags.add(f)
	o.node.add(f)
	f.StringVar(&o.statusFile, "status-file", "/run/nodeprep/status.json", "host path of the status report (read for the GPUs the node booted with, then rewritten)")
	f.StringVar(&o.metricsFile, "metrics-file", "", "host path of a Prometheus textfile for node_exporter (default: up.metricsFile)")
	return cmd
}

func (o *healthOptions) run(cmd *cobra.Command, g *globals) error {
	fs := cmd.Flags()
	if err := o.inv.check(fs); err != nil { // a bad --simulate is a usage error before anything runs
		return err
	}
	st, err := o.selftestFlags.options(g, fs, o.inv.simulate != "")
	if err != nil {
		return err
	}
	// The pod path as up judged it: the spec, the runtime's directories and
	// the driver root of the config file (health has no CDI flags).
	copts := (&specFlags{arch: runtime.GOARCH}).options(g, cmd)
	hopts := nodeprep.HealthOptions{
		Inventory:   func() (*gpu.Inventory, error) { return o.inv.inventory(g, fs) },
		Selftest:    st,
		StatusFile:  flagOr(fs, "status-file", o.statusFile, g.cfg.Up.StatusFile),
		MetricsFile: flagOr(fs, "metrics-file", o.metricsFile, g.cfg.Up.MetricsFile),
		Log:         g.log,
		Version:     currentVersion().Version,
		CDI:         &copts,
		DeviceNames: g.cfg.CDI.DeviceNames,
		// The runtime judged from the same facts, by the same code, as
		// cdi check judges it.
		Runtime: runtimeJudge(g, copts),
	}
	// Before the lock, whose file a refused run must not create either.
	if err := nodeprep.CheckOutputs(hopts.Outputs()...); err != nil {
		return err
	}
	unlock, err := g.host.Lock(cmd.Context(), 0)
	if errors.Is(err, fault.ErrLocked) {
		g.log.Debug("skipped: another nodeprep holds the lock (up, cdi patch, join or another health)")
		return g.print(map[string]any{"skipped": true, "reason": err.Error()}, func(w io.Writer) error {
			_, err := fmt.Fprintln(w, "skipped: another nodeprep holds the lock")
			return err
		})
	}
	if err != nil {
		return err
	}
	defer unlock() //nolint:errcheck // closing the lock file releases it

	rep, err := nodeprep.Health(cmd.Context(), g.host, hopts)
	if rep != nil {
		reportNode(cmd.Context(), g, &o.node, rep, "", false)
	}
	return finishReport(g, rep, err)
}
