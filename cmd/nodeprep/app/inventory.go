package app

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// inventoryFlags are --simulate and --nvml-lib, shared by every command that
// needs the GPU inventory (inspect, cdi check, join, selftest, up).
type inventoryFlags struct {
	simulate string
	nvmlLib  string
}

func (f *inventoryFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.simulate, "simulate", "", "use a built-in simulated server instead of NVML: dgx-a100, dgx-h100, dgx-h200 or dgx-b200")
	fs.StringVar(&f.nvmlLib, "nvml-lib", "", "path of libnvidia-ml.so.1 (default: the dynamic linker's search)")
}

// inventory builds the inventory from the simulated server or from NVML.
// STUB: the inventory issue replaces this body.
func (f *inventoryFlags) inventory(g *globals, fs *pflag.FlagSet) (*gpu.Inventory, error) {
	_ = flagOr(fs, "nvml-lib", f.nvmlLib, g.cfg.NVML.Library)
	return nil, errors.New("inventory: not implemented yet")
}
