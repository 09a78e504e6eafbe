package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/child/serve"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// inventoryFlags are --simulate and --nvml-lib, shared by every command that
// needs the GPU inventory (inspect, cdi check, join, selftest, up).
type inventoryFlags struct {
	simulate    string
	nvmlLib     string
	nvmlTimeout time.Duration
}

func (f *inventoryFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.simulate, "simulate", "", "use a built-in simulated server instead of NVML: dgx-a100, dgx-h100, dgx-h200 or dgx-b200, optionally with +FAULT (fabric-not-started, fabric-in-progress, fabric-error, fabric-degraded, fabric-not-supported)")
	fs.StringVar(&f.nvmlLib, "nvml-lib", "", "path of libnvidia-ml.so.1 (default: the dynamic linker's search)")
	fs.DurationVar(&f.nvmlTimeout, "nvml-timeout", gpu.DefaultTimeout, "how long NVML may take to initialise and answer before it is reported hung")
}

// check validates --simulate, --nvml-lib and --nvml-timeout without
// building anything, so that a command can refuse them (exit 2) before it
// takes the lock, starts the probes or writes anything.
func (f *inventoryFlags) check(fs *pflag.FlagSet) error {
	if f.simulate == "" {
		if fs.Changed("simulate") { // --simulate '' must not quietly mean the real GPUs
			return fault.Usage(fmt.Errorf("--simulate is empty: want one of %s", strings.Join(gpu.SimulatedNames(), ", ")))
		}
		if fs.Changed("nvml-timeout") && f.nvmlTimeout <= 0 {
			return fault.Usage(fmt.Errorf("--nvml-timeout %s: want a positive duration", f.nvmlTimeout))
		}
		return nil
	}
	if fs.Changed("nvml-lib") {
		return fault.Usage(errors.New("--simulate and --nvml-lib exclude each other"))
	}
	_, err := gpu.Simulated(f.simulate)
	return err
}

// inventory builds the inventory from the simulated server (--simulate) or
// from NVML, loaded from --nvml-lib, else the config's nvml.library, else
// through the dynamic linker, in a child process (serve.Inventory,
// served by childExecutable) bounded by --nvml-timeout (nvml.timeout) and
// the command's context.
func (f *inventoryFlags) inventory(g *globals, fs *pflag.FlagSet) (*gpu.Inventory, error) {
	if err := f.check(fs); err != nil {
		return nil, err
	}
	if f.simulate != "" {
		return gpu.Simulate(f.simulate)
	}
	lib := flagOr(fs, "nvml-lib", f.nvmlLib, g.cfg.NVML.Library)
	g.log.Debug("reading the GPU inventory from NVML", "library", lib)
	timeout := flagOr(fs, "nvml-timeout", f.nvmlTimeout, g.cfg.NVML.Timeout)
	if timeout <= 0 { // an explicit --nvml-timeout 0 is refused by check
		timeout = gpu.DefaultTimeout
	}
	exe, lean, err := childExecutable()
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("finding nodeprep's own executable for the NVML child: %w", err))
	}
	g.log.Debug("NVML child", "executable", exe, "lean", lean)
	ctx := g.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	inv, err := gpu.FromNVMLChild(ctx, gpu.Child{Path: exe, Args: []string{serve.Inventory, "--" + serve.ReportPipeFlag}}, lib, timeout)
	return inv, nvmlHint(err, hostSysfs())
}

// newInventoryCommand is the hidden NVML child: `nodeprep __inventory
// --report-pipe REQUEST` reads the inventory in this process and reports
// it on the report pipe (newChildCommand).
func newInventoryCommand(g *globals) *cobra.Command {
	return newChildCommand(g, serve.Inventory, "REQUEST", "Read the GPU inventory from NVML (internal: the NVML child process)",
		"report on the private pipe (fd 3) of nodeprep/child")
}
