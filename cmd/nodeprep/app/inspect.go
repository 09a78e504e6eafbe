package app

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// inspectOptions are `nodeprep inspect`'s flags.
type inspectOptions struct {
	inv inventoryFlags
}

func newInspectCommand(g *globals) *cobra.Command {
	o := &inspectOptions{}
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print the GPU inventory from NVML: versions, GPUs, MIG devices, health",
		Long: `inspect reads the GPUs through NVML and prints the driver, NVML and CUDA
versions and, per GPU, its index, UUID, name, PCI bus id, memory (MiB),
compute capability, MIG mode and health verdict, under single-word column
names (INDEX UUID NAME BUS_ID MEMORY_MIB CC MIG HEALTH). -o json and -o yaml
print every field (docs/status-metrics.md has the schema). With --simulate
it says so on stderr.

It exits 0 even when a GPU is unhealthy (the health column says why), and 69
when NVML cannot be loaded or initialised. --simulate runs it on a built-in
simulated server with no GPU.`,
		Example: `  nodeprep inspect
  nodeprep inspect --nvml-lib /run/opengl-driver/lib/libnvidia-ml.so.1 -o json
  nodeprep inspect --simulate dgx-h200`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(g, cmd.Flags()) },
	}
	o.inv.add(cmd.Flags())
	return cmd
}

func (o *inspectOptions) run(g *globals, fs *pflag.FlagSet) error {
	inv, err := o.inv.inventory(g, fs)
	if err != nil {
		return err
	}
	if inv.Simulated {
		// On stderr, so the table on stdout stays a table for awk.
		g.log.Info(fmt.Sprintf("simulated server %s: no real driver was used", inv.Server))
	}
	return g.print(inv, inv.WriteText)
}
