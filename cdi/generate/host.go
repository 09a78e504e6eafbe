package generate

import (
	"fmt"
	"io/fs"
	"path"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// Device is one full GPU as NVML reports it to the generator.
type Device struct {
	// Index is NVML's index, the name the index strategy gives.
	Index int
	// UUID is "GPU-…", the name the uuid strategy gives.
	UUID string
	// PCIBusID is "0000:18:00.0": where the generator finds the GPU's DRM
	// nodes (/sys/bus/pci/devices/<id>/drm).
	PCIBusID string
	// Minor is the device minor number: the GPU's node is /dev/nvidia<Minor>.
	Minor int
	// DRM are the names of the GPU's DRM nodes under /dev/dri ("card1",
	// "renderD128"), as /sys/bus/pci/devices/<PCIBusID>/drm lists them.
	DRM []string
	// MIG is true when the GPU is in MIG mode: the generator then writes
	// its MIG devices instead of the GPU, which the model does not cover
	// (Spec gives ErrNotModelled).
	MIG bool
}

// Node is a device node on the host, as stat(2) reports it.
type Node struct {
	Path         string      // "/dev/nvidia0"
	Major, Minor int64       // device numbers
	Mode         fs.FileMode // permission bits (0666)
}

// Link is a symbolic link under /dev/dri/by-path: Path
// ("/dev/dri/by-path/pci-0000:18:00.0-card") and its text, Target
// ("../card1").
type Link struct {
	Path, Target string
}

// Host is what the generator reads from the machine besides the driver's
// files: the driver version and the GPUs (from NVML), the device nodes
// under /dev and the DRM by-path links. A node or link that is not listed
// is absent.
type Host struct {
	DriverVersion string
	Devices       []Device
	Nodes         []Node
	ByPath        []Link
}

func (h *Host) node(p string) (Node, bool) {
	for _, n := range h.Nodes {
		if n.Path == p {
			return n, true
		}
	}
	return Node{}, false
}

// Simulated returns the Host of the first count GPUs (all when count is 0)
// of the simulated server name (gpu.SimulatedNames) as an NVIDIA host
// presents them: /dev/nvidia<minor> (char 195/<minor>, 0666),
// /dev/nvidia-modeset (195/254), /dev/nvidiactl (195/255),
// /dev/nvidia-uvm and -uvm-tools (508/0 and 508/1: the nvidia-uvm module's
// major is dynamic, 508 where nothing else took it), each GPU's DRM
// card<index+1> (226, 0660) and renderD<128+index> (226, 0666) with
// their by-path links. These are the nodes scripts/gen-testhosts.sh gives
// the NixOS host trees. Errors are gpu.Simulate's (an unknown name is
// marked fault.ErrUsage), or count out of range, marked the same way.
func Simulated(name string, count int) (Host, error) {
	inv, err := gpu.Simulate(name)
	if err != nil {
		return Host{}, err
	}
	if count < 0 || count > len(inv.GPUs) {
		return Host{}, fault.Usage(fmt.Errorf("simulated server %s has %d GPUs, not %d", name, len(inv.GPUs), count))
	}
	if count == 0 {
		count = len(inv.GPUs)
	}
	h := Host{DriverVersion: inv.DriverVersion}
	h.Nodes = append(h.Nodes, Node{"/dev/null", 1, 3, 0o666})
	for _, g := range inv.GPUs[:count] {
		h.Nodes = append(h.Nodes, Node{fmt.Sprintf("/dev/nvidia%d", g.Minor), 195, int64(g.Minor), 0o666})
	}
	h.Nodes = append(h.Nodes,
		Node{"/dev/nvidia-modeset", 195, 254, 0o666},
		Node{"/dev/nvidiactl", 195, 255, 0o666},
		Node{"/dev/nvidia-uvm", 508, 0, 0o666},
		Node{"/dev/nvidia-uvm-tools", 508, 1, 0o666})
	for _, g := range inv.GPUs[:count] {
		card, render := fmt.Sprintf("card%d", g.Index+1), fmt.Sprintf("renderD%d", 128+g.Index)
		h.Nodes = append(h.Nodes,
			Node{"/dev/dri/" + card, 226, int64(g.Index + 1), 0o660},
			Node{"/dev/dri/" + render, 226, int64(128 + g.Index), 0o666})
		h.Devices = append(h.Devices, Device{Index: g.Index, UUID: g.UUID, PCIBusID: g.PCIBusID, Minor: g.Minor, DRM: []string{card, render},
			MIG: g.MIG != nil && g.MIG.Current})
	}
	for _, g := range inv.GPUs[:count] {
		for _, n := range h.Devices[g.Index].DRM {
			kind := "card"
			if n[0] == 'r' {
				kind = "render"
			}
			h.ByPath = append(h.ByPath, Link{Path: path.Join("/dev/dri/by-path", "pci-"+g.PCIBusID+"-"+kind), Target: "../" + n})
		}
	}
	return h, nil
}
