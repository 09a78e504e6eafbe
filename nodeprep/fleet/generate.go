package fleet

import (
	"encoding/json"
	"fmt"

	"github.com/nodeprep/nodeprep/cdi/generate"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// Generator is the SpecGenerator of facts f: the CDI spec the toolkit's
// generator unit would write on the assembled tree, predicted by
// cdi/generate (equal to what the real nvidia-ctk 1.17 and 1.20 write on
// every NixOS host tree of the project's tests) for f.Toolkit.Version and
// the unit's arguments, on the simulated server of f (its GPUs and device
// nodes) with inv's driver version, followed by the NixOS module's mounts
// step (f.Toolkit.Mounts, each only where its host path exists). Errors:
// those of generate.Spec (fault.ErrMalformed wrapping
// generate.ErrRejected where the real generator would fail, or
// generate.ErrNotModelled), and generate.Simulated's.
func Generator(f *Facts) SpecGenerator {
	return func(root *hostfs.Root, inv *gpu.Inventory, args []string) ([]byte, error) {
		host, err := generate.Simulated(f.SimulatedServer(), 0)
		if err != nil {
			return nil, fmt.Errorf("simulating %s for the generator: %w", f.SimulatedServer(), err)
		}
		if inv != nil && inv.DriverVersion != "" {
			host.DriverVersion = inv.DriverVersion
		}
		spec, err := generate.Spec(root, host, f.Toolkit.Version, args)
		if err != nil {
			return nil, err
		}
		mounts := make([]generate.Mount, 0, len(f.Toolkit.Mounts))
		for _, m := range f.Toolkit.Mounts {
			mounts = append(mounts, generate.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath})
		}
		generate.AddModuleMounts(spec, root, mounts)
		return json.Marshal(spec)
	}
}
