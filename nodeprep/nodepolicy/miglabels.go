package nodepolicy

import (
	"fmt"
	"strconv"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// The MIG strategies of GPU Feature Discovery and the device plugin
// (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go, --mig-strategy):
// how MIG devices are advertised and labelled.
const (
	MIGStrategyNone   = "none"   // MIG devices are not labelled (GFD's default)
	MIGStrategySingle = "single" // every GPU in one MIG profile: nvidia.com/gpu.* describe the MIG devices
	MIGStrategyMixed  = "mixed"  // nvidia.com/mig-<profile>.* per profile
)

// LabelMIGStrategy is GFD's nvidia.com/mig.strategy, written for the single
// and mixed strategies.
const LabelMIGStrategy = "nvidia.com/mig.strategy"

// CheckMIGStrategy returns an error (unmarked) unless s is "", none, single
// or mixed.
func CheckMIGStrategy(s string) error {
	switch s {
	case "", MIGStrategyNone, MIGStrategySingle, MIGStrategyMixed:
		return nil
	}
	return fmt.Errorf("MIG strategy %q: want none, single or mixed", s)
}

// MIGLabels returns the labels GFD writes for MIG devices under strategy
// (internal/lm/mig-strategy.go newMigLabeler, resource.go
// NewMIGResourceLabeler), as a map from key to value that lays over
// GFDLabels' full-GPU labels:
//   - none (or ""): nothing;
//   - single: nvidia.com/mig.strategy=single, and when any GPU has MIG on,
//     nvidia.com/gpu.{product,count,replicas,memory,multiprocessors,
//     slices.gi,slices.ci,engines.copy,engines.decoder,engines.encoder,
//     engines.jpeg,engines.ofa} for the MIG devices: product
//     "<GPU product>-MIG-<profile>", count the number of MIG devices,
//     replicas 1, the rest the first MIG device's attributes. When a GPU
//     with MIG on has no MIG devices, GPUs with MIG on and off are mixed,
//     or more than one profile exists, GFD's invalid labels instead:
//     product "<GPU product>-MIG-INVALID", count, replicas and memory 0;
//   - mixed: nvidia.com/mig.strategy=mixed, and per MIG profile p the same
//     suffixes under nvidia.com/mig-<p>. (product, count, replicas, memory,
//     multiprocessors, slices.*, engines.*); GPUs with MIG on but no MIG
//     devices are ignored.
//
// The product is SanitiseProduct(GPU name)+"-MIG-"+profile. A MIG device
// whose attributes NVML did not give makes the labels it would carry
// unknowable: an error marked fault.ErrUnavailable, as is an unknown
// strategy (fault.ErrMalformed).
func MIGLabels(inv *gpu.Inventory, strategy string) (map[string]string, error) {
	if err := CheckMIGStrategy(strategy); err != nil {
		return nil, fault.Malformed(err)
	}
	m := map[string]string{}
	if strategy == "" || strategy == MIGStrategyNone || inv == nil || len(inv.GPUs) == 0 {
		return m, nil
	}
	m[LabelMIGStrategy] = strategy
	type resource struct {
		gpu   gpu.GPU
		dev   gpu.MIGDevice
		count int
	}
	resources := map[string]*resource{}
	var order []string
	var enabled, disabled, empty []gpu.GPU
	for _, g := range inv.GPUs {
		if g.MIG == nil || !g.MIG.Current {
			disabled = append(disabled, g)
			continue
		}
		enabled = append(enabled, g)
		if len(g.MIG.Devices) == 0 {
			empty = append(empty, g)
		}
		for _, d := range g.MIG.Devices {
			if d.Attributes == nil || d.Profile == "" {
				return nil, fault.Unavailable(fmt.Errorf("MIG labels: GPU %d MIG device %d: NVML gave no attributes", g.Index, d.Index))
			}
			r, ok := resources[d.Profile]
			if !ok {
				r = &resource{gpu: g, dev: d}
				resources[d.Profile] = r
				order = append(order, d.Profile)
			}
			r.count++
		}
	}
	if strategy == MIGStrategySingle {
		if len(enabled) == 0 {
			return m, nil
		}
		if len(empty) > 0 || len(disabled) > 0 || len(resources) != 1 {
			prefix := "nvidia.com/gpu."
			m[prefix+"product"] = SanitiseProduct(enabled[0].Name) + "-MIG-INVALID"
			m[prefix+"count"] = "0"
			m[prefix+"replicas"] = "0"
			m[prefix+"memory"] = "0"
			return m, nil
		}
		r := resources[order[0]]
		migResourceLabels(m, "nvidia.com/gpu.", r.gpu, r.dev, r.count)
		return m, nil
	}
	for _, p := range order {
		r := resources[p]
		migResourceLabels(m, "nvidia.com/mig-"+p+".", r.gpu, r.dev, r.count)
	}
	return m, nil
}

// migResourceLabels sets GFD's labels for one MIG resource under prefix
// ("nvidia.com/gpu." or "nvidia.com/mig-<profile>.").
func migResourceLabels(m map[string]string, prefix string, g gpu.GPU, d gpu.MIGDevice, count int) {
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	a := d.Attributes
	for suffix, v := range map[string]string{
		"product":         SanitiseProduct(g.Name) + "-MIG-" + d.Profile,
		"count":           strconv.Itoa(count),
		"replicas":        "1",
		"memory":          strconv.FormatUint(d.MemoryMiB, 10),
		"multiprocessors": u(a.Multiprocessors),
		"slices.gi":       u(a.GISlices),
		"slices.ci":       u(a.CISlices),
		"engines.copy":    u(a.CopyEngines),
		"engines.decoder": u(a.Decoders),
		"engines.encoder": u(a.Encoders),
		"engines.jpeg":    u(a.JPEGs),
		"engines.ofa":     u(a.OFAs),
	} {
		m[prefix+suffix] = v
	}
}
