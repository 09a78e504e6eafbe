package app

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
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

// check validates --simulate and --nvml-lib without building anything, so
// that a command can refuse them (exit 2) before it takes the lock or
// writes anything.
func (f *inventoryFlags) check(fs *pflag.FlagSet) error {
	if f.simulate == "" {
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
// through the dynamic linker.
func (f *inventoryFlags) inventory(g *globals, fs *pflag.FlagSet) (*gpu.Inventory, error) {
	if f.simulate != "" {
		if fs.Changed("nvml-lib") {
			return nil, fault.Usage(errors.New("--simulate and --nvml-lib exclude each other"))
		}
		return gpu.Simulate(f.simulate)
	}
	lib := flagOr(fs, "nvml-lib", f.nvmlLib, g.cfg.NVML.Library)
	g.log.Debug("reading the GPU inventory from NVML", "library", lib)
	inv, err := gpu.FromNVML(lib)
	if errors.Is(err, gpu.ErrLibraryNotFound) {
		err = fmt.Errorf("%w (name the library with --nvml-lib or nvml.library in the config file)", err)
	}
	return inv, err
}
