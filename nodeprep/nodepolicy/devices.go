package nodepolicy

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// Device-name strategies: how a consumer names a GPU when it asks the CDI
// spec for it. The k8s device plugin's default id strategy asks for
// nvidia.com/gpu=GPU-<uuid>; "index" asks for nvidia.com/gpu=0.
const (
	DeviceNameUUID  = "uuid"  // the GPU's UUID, GPU-<uuid>: what the k8s device plugin asks for
	DeviceNameIndex = "index" // the GPU's NVML index, "0"
)

// CheckDeviceNames returns an error (unmarked: callers give it the kind)
// naming every strategy that is not DeviceNameUUID or DeviceNameIndex, or
// saying the list is empty: an empty list would check no device name, and
// a spec that serves none of the GPUs would pass.
func CheckDeviceNames(strategies []string) error {
	if len(strategies) == 0 {
		return fmt.Errorf("no device-name strategy: want %q and/or %q (an empty list would check no device name)", DeviceNameUUID, DeviceNameIndex)
	}
	var errs []error
	for _, s := range strategies {
		if s != DeviceNameUUID && s != DeviceNameIndex {
			errs = append(errs, fmt.Errorf("device-name strategy %q: want %q or %q", s, DeviceNameUUID, DeviceNameIndex))
		}
	}
	return errors.Join(errs...)
}

// Self-test failure policies (the config's up.onSelftestFailure; nodeprep.UpOptions.OnSelftestFailure).
const (
	// PolicyBlock: exit 1 and write no drop-in, so k3s.service (which
	// requires nodeprep.service) does not start.
	PolicyBlock = "block"
	// PolicyTaint: write the drop-in with UnhealthyTaint and a label, and
	// report ready-but-tainted (exit 0).
	PolicyTaint = "taint"
)

// UnhealthyTaint is the taint PolicyTaint adds when the self-test fails. Like
// every taint it reaches a Node only when it first registers.
const UnhealthyTaint = "nodeprep.dev/gpu-unhealthy=true:NoExecute"

// CheckPolicy returns an error (unmarked) unless p is PolicyBlock or
// PolicyTaint.
func CheckPolicy(p string) error {
	if p != PolicyBlock && p != PolicyTaint {
		return fmt.Errorf("self-test failure policy %q: want %s or %s", p, PolicyBlock, PolicyTaint)
	}
	return nil
}

// ExpectedCDIDevices returns the devices the CDI spec must serve for the
// healthy GPUs of inv under the given strategies (FIELD-REPORTS F6): per
// GPU its UUID and/or index, with /dev/nvidia<minor> in its edits; with MIG
// on, each MIG device by its UUID ("MIG-…", uuid strategy) or as
// "<gpu>:<mig>" (index strategy, nvidia-ctk's naming). An unknown strategy
// is an error marked fault.ErrMalformed.
func ExpectedCDIDevices(inv *gpu.Inventory, strategies []string) ([]cdi.ExpectedDevice, error) {
	var out []cdi.ExpectedDevice
	if err := CheckDeviceNames(strategies); err != nil {
		return nil, fault.Malformed(err)
	}
	for _, g := range inv.Healthy() {
		node := fmt.Sprintf("/dev/nvidia%d", g.Minor)
		for _, s := range strategies {
			// The name or For carries the UUID, never both: a finding
			// names each UUID once.
			name, who := g.UUID, fmt.Sprintf("GPU %d", g.Index)
			if s == DeviceNameIndex {
				name, who = strconv.Itoa(g.Index), fmt.Sprintf("GPU %d, %s", g.Index, g.UUID)
			}
			out = append(out, cdi.ExpectedDevice{Name: name, DeviceNodes: []string{node}, For: who})
		}
		if g.MIG == nil || !g.MIG.Current {
			continue
		}
		for _, m := range g.MIG.Devices {
			for _, s := range strategies {
				name := m.UUID
				if s == DeviceNameIndex {
					name = fmt.Sprintf("%d:%d", g.Index, m.Index)
				}
				out = append(out, cdi.ExpectedDevice{Name: name, For: fmt.Sprintf("MIG device %d of GPU %d", m.Index, g.Index), MIG: true})
			}
		}
	}
	return out, nil
}

// CodeMIGNoDevices is the finding for a GPU in MIG mode with no MIG device.
const CodeMIGNoDevices = "mig-no-devices"

// InventoryFindings are the warnings the inventory gives `cdi check`: each
// GPU whose MIG mode is on but that has no MIG device configured, so pods
// asking for it get nothing useful (gpu.Inventory.Warnings).
func InventoryFindings(inv *gpu.Inventory) cdi.Findings {
	var fs cdi.Findings
	for _, w := range inv.Warnings() {
		fs = append(fs, cdi.Finding{Severity: cdi.SeverityWarning, Code: CodeMIGNoDevices, Message: w})
	}
	return fs
}
