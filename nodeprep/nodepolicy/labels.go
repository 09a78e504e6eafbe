package nodepolicy

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// The GPU Feature Discovery label keys nodeprep writes, with GFD's names
// (NVIDIA/k8s-device-plugin internal/lm: resource.go for nvidia.com/gpu.*,
// nvml.go for the CUDA version and MIG labels). Values are decimal numbers
// except product, family, the .full versions and mig.capable ("true"/"false").
const (
	LabelGPUProduct         = "nvidia.com/gpu.product"                  // the product name, sanitised as GFD does (SanitiseProduct)
	LabelGPUCount           = "nvidia.com/gpu.count"                    // number of GPUs
	LabelGPUMemory          = "nvidia.com/gpu.memory"                   // MiB
	LabelGPUFamily          = "nvidia.com/gpu.family"                   // architecture family (ArchFamily): hopper, ampere, ...
	LabelGPUComputeMajor    = "nvidia.com/gpu.compute.major"            // CUDA compute capability, major
	LabelGPUComputeMinor    = "nvidia.com/gpu.compute.minor"            // CUDA compute capability, minor
	LabelCUDADriverMajor    = "nvidia.com/cuda.driver-version.major"    // kernel driver version, major (550)
	LabelCUDADriverMinor    = "nvidia.com/cuda.driver-version.minor"    // kernel driver version, minor (54)
	LabelCUDADriverRevision = "nvidia.com/cuda.driver-version.revision" // kernel driver version, revision (15)
	LabelCUDADriverFull     = "nvidia.com/cuda.driver-version.full"     // kernel driver version (550.54.15)
	LabelCUDARuntimeMajor   = "nvidia.com/cuda.runtime-version.major"   // CUDA version the driver supports, major (12)
	LabelCUDARuntimeMinor   = "nvidia.com/cuda.runtime-version.minor"   // CUDA version the driver supports, minor (4)
	LabelCUDARuntimeFull    = "nvidia.com/cuda.runtime-version.full"    // CUDA version the driver supports (12.4)
	LabelMIGCapable         = "nvidia.com/mig.capable"                  // true when any GPU is MIG-capable
)

// nodeprep's own label keys, under nodeprep.dev/.
const (
	// LabelSelftest is the adapter self-test verdict: SelftestPassed,
	// SelftestFailed or SelftestSkipped.
	LabelSelftest = "nodeprep.dev/selftest"
	// LabelVulkanAdapters is the number of Vulkan adapters matched to GPUs.
	LabelVulkanAdapters = "nodeprep.dev/vulkan-adapters"
	// LabelSimulated is "true" when the inventory came from --simulate.
	LabelSimulated = "nodeprep.dev/simulated"
	// LabelGPUReady is "true" while the node's GPUs pass: up registers
	// the node with it ("true" with the self-test passed, "false" when it
	// joins tainted after a failed one), and health keeps it current on
	// the Node between boots (nodeprep-cluster node-report; the same key
	// as kubenode.LabelGPUReady, which this package may not import: it
	// links net/http). GPU workloads require it "true" (cluster render).
	LabelGPUReady = "nodeprep.dev/gpu-ready"
)

// The values of LabelSelftest.
const (
	SelftestPassed  = "passed"  // every GPU matched a working adapter
	SelftestFailed  = "failed"  // the node joined tainted (policy taint)
	SelftestSkipped = "skipped" // the self-test did not run
)

// DefaultTaintString is nodeprep's default taint: only pods that tolerate
// nvidia.com/gpu (key nvidia.com/gpu, operator Exists or Equal "present")
// are scheduled on a GPU node.
const DefaultTaintString = "nvidia.com/gpu=present:NoSchedule"

// gfdProductInvalid is GFD sanitise's pattern of characters it removes.
var gfdProductInvalid = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("[^A-Za-z0-9-_. ]") })

// SanitiseProduct turns an NVML product name into the value of
// nvidia.com/gpu.product as GFD does (k8s-device-plugin internal/lm
// resource.go sanitise): characters outside [A-Za-z0-9-_. ] are removed,
// then runs of white space become single '-' with none at either end.
// "NVIDIA H200" → "NVIDIA-H200"; "NVIDIA A100-SXM4-80GB" stays as is.
//
// GFD stops there, so a long or odd name gives it a value Kubernetes
// refuses (NFD then drops the label); a drop-in with such a label would
// stop the kubelet. So the value is then made valid the way Kubernetes
// states the rule (apimachinery IsValidLabelValue: at most 63 characters,
// beginning and ending with [A-Za-z0-9]): cut to 63 characters, then
// '-', '_' and '.' trimmed from both ends. A name GFD already gives a
// valid value keeps GFD's value exactly.
func SanitiseProduct(name string) string {
	v := strings.Join(strings.Fields(gfdProductInvalid().ReplaceAllString(name, "")), "-")
	if len(v) > maxLabelValue {
		v = v[:maxLabelValue] // ASCII only by now
	}
	return strings.Trim(v, "-_.")
}

// maxLabelValue is the longest label value Kubernetes accepts
// (apimachinery validation.LabelValueMaxLength).
const maxLabelValue = 63

// ArchFamily returns GFD's nvidia.com/gpu.family for a CUDA compute
// capability: gpu.Family's name (GFD's getArchFamily table), or
// "undefined" where GFD has none.
func ArchFamily(major, minor int) string {
	if f := gpu.Family(major, minor); f != "" {
		return f
	}
	return "undefined"
}

// GFDLabels returns the GPU Feature Discovery labels for inv with GFD's
// names and value formats, sorted by key. Like GFD, the per-GPU labels
// (product, memory, family, compute capability) describe the first GPU and
// nvidia.com/gpu.count counts all of them; memory is left out when it is 0
// and the family and compute labels when the compute major is 0; an
// inventory with no GPUs has no labels. The CUDA driver-version labels come
// from the kernel driver version ("550.54.15": major 550, minor 54, revision
// 15, revision empty for "X.Y"), the runtime-version labels from the CUDA
// driver version ("12.4"), as GFD's newVersionLabeler does. A version that
// does not parse gives an error marked fault.ErrMalformed.
func GFDLabels(inv *gpu.Inventory) ([]k3s.Label, error) {
	if inv == nil || len(inv.GPUs) == 0 {
		return nil, nil
	}
	first := inv.GPUs[0]
	m := map[string]string{
		LabelGPUCount: strconv.Itoa(len(inv.GPUs)),
	}
	if p := SanitiseProduct(first.Name); p != "" {
		m[LabelGPUProduct] = p
	}
	if first.MemoryMiB != 0 {
		m[LabelGPUMemory] = strconv.FormatUint(first.MemoryMiB, 10)
	}
	if first.ComputeMajor != 0 {
		m[LabelGPUFamily] = ArchFamily(first.ComputeMajor, first.ComputeMinor)
		m[LabelGPUComputeMajor] = strconv.Itoa(first.ComputeMajor)
		m[LabelGPUComputeMinor] = strconv.Itoa(first.ComputeMinor)
	}
	parts := strings.Split(inv.DriverVersion, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fault.Malformed(fmt.Errorf("GPU labels: driver version %q does not match X.Y[.Z]", inv.DriverVersion))
	}
	m[LabelCUDADriverMajor] = parts[0]
	m[LabelCUDADriverMinor] = parts[1]
	m[LabelCUDADriverRevision] = ""
	if len(parts) == 3 {
		m[LabelCUDADriverRevision] = parts[2]
	}
	m[LabelCUDADriverFull] = inv.DriverVersion
	major, minor, err := cudaVersion(inv.CUDADriverVersion)
	if err != nil {
		return nil, err
	}
	m[LabelCUDARuntimeMajor] = strconv.Itoa(major)
	m[LabelCUDARuntimeMinor] = strconv.Itoa(minor)
	m[LabelCUDARuntimeFull] = fmt.Sprintf("%d.%d", major, minor)
	mig := false
	for _, g := range inv.GPUs {
		if g.MIG != nil {
			mig = true
		}
	}
	m[LabelMIGCapable] = strconv.FormatBool(mig)
	return labelsOf(m)
}

// cudaVersion parses "12.4" (the CUDA driver version as the inventory
// prints it) into its major and minor numbers.
func cudaVersion(s string) (int, int, error) {
	ma, mi, ok := strings.Cut(s, ".")
	major, err1 := strconv.Atoi(ma)
	minor, err2 := strconv.Atoi(mi)
	if !ok || err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return 0, 0, fault.Malformed(fmt.Errorf("GPU labels: CUDA driver version %q does not match X.Y", s))
	}
	return major, minor, nil
}

// NodeLabelOptions chooses the labels NodeLabels makes.
type NodeLabelOptions struct {
	// GFD adds GFDLabels (turn off when GPU Feature Discovery runs in the
	// cluster and owns the nvidia.com/ labels).
	GFD bool
	// Selftest is the adapter self-test verdict for nodeprep.dev/selftest:
	// SelftestPassed, SelftestFailed, SelftestSkipped, or "" for no label.
	Selftest string
	// VulkanAdapters, when not nil, is the number of Vulkan adapters the
	// self-test matched to GPUs (nodeprep.dev/vulkan-adapters).
	VulkanAdapters *int
	// MIGStrategy is GFD's MIG strategy for the MIG labels (MIGLabels),
	// used only with GFD: MIGStrategyNone (or "") writes none.
	MIGStrategy string
	// Extra are the user's labels. One whose key nodeprep derives from
	// facts (DerivedLabelSource) is refused, never applied over the fact.
	Extra []k3s.Label
}

// NodeLabels returns the labels nodeprep's drop-in carries for inv, sorted
// by key: GFD's (when opts.GFD: GFDLabels with MIGLabels for
// opts.MIGStrategy laid over them), nodeprep's own under nodeprep.dev/
// (selftest, vulkan-adapters, and simulated=true for a simulated
// inventory), then opts.Extra. Errors are GFDLabels', an invalid
// Selftest value, a key given twice in opts.Extra with different values,
// and a user label whose key nodeprep derives from facts
// (DerivedLabelSource: nvidia.com/gpu.count=99 on a node with 8 GPUs,
// nodeprep.dev/selftest=passed beside a failed self-test), all marked
// fault.ErrMalformed: a label that says what the node is not must not
// reach the cluster silently.
func NodeLabels(inv *gpu.Inventory, opts NodeLabelOptions) ([]k3s.Label, error) {
	m := map[string]string{}
	if opts.GFD {
		gfd, err := GFDLabels(inv)
		if err != nil {
			return nil, err
		}
		for _, l := range gfd {
			m[l.Key] = l.Value
		}
		mig, err := MIGLabels(inv, opts.MIGStrategy)
		if err != nil {
			return nil, err
		}
		for k, v := range mig {
			m[k] = v // GFD merges the MIG labeler after the full-GPU one
		}
	}
	switch opts.Selftest {
	case "":
	case SelftestPassed, SelftestFailed, SelftestSkipped:
		m[LabelSelftest] = opts.Selftest
		// Registered with it, GPU pods schedule at once instead of after
		// health's first run (the timer's first interval); k3s applies
		// the drop-in's labels at each start, health the verdict between.
		switch opts.Selftest {
		case SelftestPassed:
			m[LabelGPUReady] = "true"
		case SelftestFailed:
			m[LabelGPUReady] = "false"
		}
	default:
		return nil, fault.Malformed(fmt.Errorf("node labels: self-test verdict %q: want passed, failed or skipped", opts.Selftest))
	}
	if opts.VulkanAdapters != nil {
		m[LabelVulkanAdapters] = strconv.Itoa(*opts.VulkanAdapters)
	}
	if inv != nil && inv.Simulated {
		m[LabelSimulated] = "true"
	}
	if err := checkUserLabels(opts.Extra, opts.GFD, m); err != nil {
		return nil, err
	}
	extra := map[string]string{}
	for _, l := range opts.Extra {
		if v, ok := extra[l.Key]; ok && v != l.Value {
			// As for taints (k3s.Plan): one key, two values is a mistake
			// to name, not a choice to make silently.
			return nil, fault.Malformed(fmt.Errorf("label key %q given twice: %q and %q", l.Key, l.Key+"="+v, l.String()))
		}
		extra[l.Key] = l.Value
		m[l.Key] = l.Value
	}
	return labelsOf(m)
}

// CheckUserLabels refuses user labels whose key nodeprep derives from facts
// (DerivedLabelSource; gfd: the GFD labels are on), before anything runs.
// The error, marked fault.ErrMalformed, names each label and what the key
// is derived from.
func CheckUserLabels(labels []k3s.Label, gfd bool) error {
	return checkUserLabels(labels, gfd, nil)
}

// checkUserLabels is CheckUserLabels quoting the derived values in derived.
func checkUserLabels(labels []k3s.Label, gfd bool, derived map[string]string) error {
	var refused []error
	gfdKey := false
	for _, l := range labels {
		src := DerivedLabelSource(l.Key, gfd)
		if src == "" {
			continue
		}
		gfdKey = gfdKey || DerivedLabelSource(l.Key, false) == "" // one only the GFD labels derive
		now := ""
		if v, ok := derived[l.Key]; ok {
			now = fmt.Sprintf(" (%q on this node)", v)
		} else if derived != nil {
			now = " (not set on this node)"
		}
		refused = append(refused, fmt.Errorf("label %s: nodeprep derives %s from %s%s; a user label cannot replace it", l, l.Key, src, now))
	}
	if len(refused) == 0 {
		return nil
	}
	if gfdKey {
		refused = append(refused, errors.New("drop the label, or turn off the GFD labels (--gfd-labels=false) when GPU Feature Discovery owns the nvidia.com/ labels"))
	}
	return fault.Malformed(errors.Join(refused...))
}

// DerivedLabelSource names what nodeprep derives the label key from ("the
// self-test", "the inventory"), or returns "" for a key it does not derive:
// its own nodeprep.dev/ keys (LabelSelftest, LabelVulkanAdapters,
// LabelGPUReady, LabelSimulated) always, and, when gfd is set, GFD's nvidia.com/gpu.*,
// nvidia.com/cuda.*, nvidia.com/mig.* and nvidia.com/mig-* keys (GFD's
// labelers; MIGLabels), which then come from NVML.
func DerivedLabelSource(key string, gfd bool) string {
	switch key {
	case LabelSelftest, LabelVulkanAdapters:
		return "the self-test"
	case LabelGPUReady:
		return "the self-test and nodeprep health"
	case LabelSimulated:
		return "the inventory (--simulate)"
	}
	if gfd {
		for _, p := range []string{"nvidia.com/gpu.", "nvidia.com/cuda.", "nvidia.com/mig.", "nvidia.com/mig-"} {
			if strings.HasPrefix(key, p) {
				return "the inventory (GFD labels)"
			}
		}
	}
	return ""
}

// DefaultTaint returns nodeprep's default taint, nvidia.com/gpu=present:NoSchedule:
// only pods that tolerate nvidia.com/gpu are scheduled on the node.
func DefaultTaint() k3s.Taint {
	t, err := k3s.ParseTaint(DefaultTaintString)
	if err != nil {
		panic(err) // a constant that parses
	}
	return t
}

// NodeTaints returns the taints nodeprep's drop-in carries: DefaultTaint
// when withDefault, then extra, in that order.
func NodeTaints(withDefault bool, extra []k3s.Taint) []k3s.Taint {
	var out []k3s.Taint
	if withDefault {
		out = append(out, DefaultTaint())
	}
	return append(out, extra...)
}

func labelsOf(m map[string]string) ([]k3s.Label, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]k3s.Label, 0, len(keys))
	for _, k := range keys {
		l := k3s.Label{Key: k, Value: m[k]}
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("node labels: %w", err)
		}
		out = append(out, l)
	}
	return out, nil
}
