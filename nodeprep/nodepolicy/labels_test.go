package nodepolicy

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func TestSanitiseProduct(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"NVIDIA H200":               "NVIDIA-H200",
		"NVIDIA H200 141GB HBM3e":   "NVIDIA-H200-141GB-HBM3e",
		"NVIDIA A100-SXM4-80GB":     "NVIDIA-A100-SXM4-80GB",
		"Tesla V100-SXM2-16GB":      "Tesla-V100-SXM2-16GB",
		"  NVIDIA  RTX   A6000 ":    "NVIDIA-RTX-A6000",
		"NVIDIA GeForce RTX™ 4090":  "NVIDIA-GeForce-RTX-4090",
		"Quadro RTX 8000 (rev. a1)": "Quadro-RTX-8000-rev.-a1",
		"NVIDIA_L4":                 "NVIDIA_L4",
		"":                          "",
		// Beyond GFD: a value Kubernetes would refuse is cut and trimmed.
		"NVIDIA H200 (rev. -)":                "NVIDIA-H200-rev",
		"-NVIDIA H200-":                       "NVIDIA-H200",
		"._ NVIDIA _.":                        "NVIDIA",
		"™":                                   "",
		strings.Repeat("A", 62) + " B":        strings.Repeat("A", 62),
		strings.Repeat("A", 70):               strings.Repeat("A", 63),
		strings.Repeat("A", 61) + " .B C D E": strings.Repeat("A", 61),
	} {
		got := SanitiseProduct(in)
		if got != want {
			t.Errorf("SanitiseProduct(%q) = %q, want %q", in, got, want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("SanitiseProduct(%q) = %q: not a valid label value: %v", in, got, errs)
		}
	}
}

func TestArchFamily(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		major, minor int
		want         string
	}{
		{3, 7, "kepler"}, {6, 0, "pascal"}, {7, 0, "volta"}, {7, 5, "turing"},
		{8, 0, "ampere"}, {8, 6, "ampere"}, {8, 9, "ada-lovelace"}, {9, 0, "hopper"},
		{10, 0, "blackwell"}, {12, 0, "blackwell"}, {11, 0, "undefined"}, {4, 0, "undefined"},
	} {
		if got := ArchFamily(tc.major, tc.minor); got != tc.want {
			t.Errorf("ArchFamily(%d, %d) = %q, want %q", tc.major, tc.minor, got, tc.want)
		}
	}
}

func handInventory() *gpu.Inventory {
	return &gpu.Inventory{
		DriverVersion:     "535.104.05",
		CUDADriverVersion: "12.2",
		GPUs: []gpu.GPU{
			{Index: 0, Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, ComputeMajor: 8, ComputeMinor: 0},
			{Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, ComputeMajor: 8, ComputeMinor: 0},
		},
	}
}

func labelMap(ls []k3s.Label) map[string]string {
	m := map[string]string{}
	for _, l := range ls {
		m[l.Key] = l.Value
	}
	return m
}

func TestGFDLabels(t *testing.T) {
	t.Parallel()
	ls, err := GFDLabels(handInventory())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"nvidia.com/gpu.product":                  "NVIDIA-A100-SXM4-80GB",
		"nvidia.com/gpu.count":                    "2",
		"nvidia.com/gpu.memory":                   "81920",
		"nvidia.com/gpu.family":                   "ampere",
		"nvidia.com/gpu.compute.major":            "8",
		"nvidia.com/gpu.compute.minor":            "0",
		"nvidia.com/cuda.driver-version.major":    "535",
		"nvidia.com/cuda.driver-version.minor":    "104",
		"nvidia.com/cuda.driver-version.revision": "05",
		"nvidia.com/cuda.driver-version.full":     "535.104.05",
		"nvidia.com/cuda.runtime-version.major":   "12",
		"nvidia.com/cuda.runtime-version.minor":   "2",
		"nvidia.com/cuda.runtime-version.full":    "12.2",
		"nvidia.com/mig.capable":                  "false",
	}
	got := labelMap(ls)
	if len(got) != len(want) {
		t.Errorf("GFDLabels = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for i := 1; i < len(ls); i++ {
		if ls[i-1].Key >= ls[i].Key {
			t.Errorf("labels not sorted: %q before %q", ls[i-1].Key, ls[i].Key)
		}
	}
}

func TestGFDLabelsEdges(t *testing.T) {
	t.Parallel()
	if ls, err := GFDLabels(&gpu.Inventory{DriverVersion: "550.54.15", CUDADriverVersion: "12.4"}); err != nil || len(ls) != 0 {
		t.Errorf("no GPUs: %v, %v; want no labels", ls, err)
	}
	inv := handInventory()
	inv.DriverVersion = "550.54"
	inv.GPUs[1].MIG = &gpu.MIG{}
	inv.GPUs[0].MemoryMiB = 0
	inv.GPUs[0].ComputeMajor = 0
	ls, err := GFDLabels(inv)
	if err != nil {
		t.Fatal(err)
	}
	m := labelMap(ls)
	if v, ok := m["nvidia.com/cuda.driver-version.revision"]; !ok || v != "" {
		t.Errorf("revision of X.Y = %q (present %v), want empty", v, ok)
	}
	if m["nvidia.com/mig.capable"] != "true" {
		t.Errorf("mig.capable = %q, want true when any GPU is MIG-capable", m["nvidia.com/mig.capable"])
	}
	for _, k := range []string{"nvidia.com/gpu.memory", "nvidia.com/gpu.family", "nvidia.com/gpu.compute.major"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s present, want left out as GFD does", k)
		}
	}
	for _, bad := range []struct{ driver, cuda string }{{"550", "12.4"}, {"1.2.3.4", "12.4"}, {"550.54.15", "12"}, {"550.54.15", "x.y"}} {
		inv := handInventory()
		inv.DriverVersion, inv.CUDADriverVersion = bad.driver, bad.cuda
		if _, err := GFDLabels(inv); !errors.Is(err, fault.ErrMalformed) {
			t.Errorf("GFDLabels(driver %q, cuda %q) error %v, want malformed", bad.driver, bad.cuda, err)
		}
	}
}

func TestNodeLabels(t *testing.T) {
	t.Parallel()
	n := 3
	extra := []k3s.Label{{Key: "nodeprep.dev/site", Value: "lab-2"}, {Key: "site", Value: "lab"}}
	ls, err := NodeLabels(handInventory(), NodeLabelOptions{GFD: true, Selftest: SelftestPassed, VulkanAdapters: &n, Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	m := labelMap(ls)
	for k, v := range map[string]string{
		"nodeprep.dev/selftest":        "passed",
		"nodeprep.dev/gpu-ready":       "true",
		"nodeprep.dev/vulkan-adapters": "3",
		"nodeprep.dev/site":            "lab-2",
		"site":                         "lab",
	} {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	if _, ok := m["nodeprep.dev/simulated"]; ok {
		t.Error("simulated label on a real inventory")
	}
	ls, err = NodeLabels(handInventory(), NodeLabelOptions{})
	if err != nil || len(ls) != 0 {
		t.Errorf("NodeLabels with nothing asked = %v, %v", ls, err)
	}
	// The node registers with the ready label its self-test gives: false
	// when it joins tainted after a failed one, none when none ran.
	for verdict, want := range map[string]string{SelftestFailed: "false", SelftestSkipped: "", "": ""} {
		ls, err := NodeLabels(handInventory(), NodeLabelOptions{Selftest: verdict})
		if err != nil {
			t.Fatal(err)
		}
		if got := labelMap(ls)[LabelGPUReady]; got != want {
			t.Errorf("self-test %q: %s = %q, want %q", verdict, LabelGPUReady, got, want)
		}
	}
	if LabelGPUReady != kubenode.LabelGPUReady {
		t.Errorf("LabelGPUReady = %q, health reports %q", LabelGPUReady, kubenode.LabelGPUReady)
	}
	if _, err := NodeLabels(nil, NodeLabelOptions{Selftest: "maybe"}); !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("bad self-test verdict: %v, want malformed", err)
	}
}

func TestNodeTaints(t *testing.T) {
	t.Parallel()
	if got := NodeTaints(true, nil); len(got) != 1 || got[0].String() != "nvidia.com/gpu=present:NoSchedule" {
		t.Errorf("NodeTaints(true) = %v", got)
	}
	if got := NodeTaints(false, nil); len(got) != 0 {
		t.Errorf("NodeTaints(false) = %v", got)
	}
}

// TestDropInGolden pins the drop-in `nodeprep join --simulate dgx-h200`
// writes (GFD labels, the simulated label, the default taint).
func TestDropInGolden(t *testing.T) {
	t.Parallel()
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	labels, err := NodeLabels(inv, NodeLabelOptions{GFD: true})
	if err != nil {
		t.Fatal(err)
	}
	got := k3s.Render(labels, NodeTaints(true, nil))
	testkit.Golden(t, "k3s/dgx-h200/50-nodeprep.yaml", got)
}

// TestNodeLabelsLongProductName: a GPU name GFD would turn into an invalid
// label value (too long, ending in '-') still gives valid labels, so the
// join is not blocked by the name.
func TestNodeLabelsLongProductName(t *testing.T) {
	t.Parallel()
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	for i := range inv.GPUs {
		inv.GPUs[i].Name = "NVIDIA H200 " + strings.Repeat("Engineering Sample ", 4) + "(-)"
	}
	labels, err := NodeLabels(inv, NodeLabelOptions{GFD: true})
	if err != nil {
		t.Fatalf("NodeLabels: %v", err)
	}
	for _, l := range labels {
		if l.Key == LabelGPUProduct {
			if len(l.Value) > 63 || strings.HasSuffix(l.Value, "-") || !strings.HasPrefix(l.Value, "NVIDIA-H200-Engineering-Sample") {
				t.Errorf("gpu.product = %q", l.Value)
			}
			return
		}
	}
	t.Errorf("no %s label in %v", LabelGPUProduct, labels)
}

// TestNodeLabelsRefuseDerivedKeys: a user label cannot replace one nodeprep
// derives from facts (issue 22: --label nvidia.com/gpu.count=99 replaced
// the real count, nodeprep.dev/selftest=passed stood beside the unhealthy
// taint); with the GFD labels off, nvidia.com/ keys are the user's.
func TestNodeLabelsRefuseDerivedKeys(t *testing.T) {
	t.Parallel()
	n := 1
	tests := []struct {
		label string
		gfd   bool
		want  string // "" for accepted
	}{
		{"nvidia.com/gpu.count=99", true, `nodeprep derives nvidia.com/gpu.count from the inventory (GFD labels) ("2" on this node)`},
		{"nvidia.com/gpu.product=custom", true, "nvidia.com/gpu.product from the inventory"},
		{"nvidia.com/mig.strategy=single", true, "(not set on this node)"},
		{"nodeprep.dev/selftest=passed", true, `nodeprep derives nodeprep.dev/selftest from the self-test ("failed" on this node)`},
		{"nodeprep.dev/selftest=passed", false, "from the self-test"},
		{"nodeprep.dev/vulkan-adapters=8", false, "from the self-test"},
		{"nodeprep.dev/simulated=false", false, "--simulate"},
		{"nvidia.com/gpu.count=99", false, ""},
		{"nodeprep.dev/rack=r1", true, ""},
		{"nodeprep.dev/gpu-ready=true", true, `nodeprep derives nodeprep.dev/gpu-ready from the self-test and nodeprep health ("false" on this node)`},
	}
	for _, tt := range tests {
		extra, err := k3s.ParseLabels([]string{tt.label})
		if err != nil {
			t.Fatal(err)
		}
		ls, err := NodeLabels(handInventory(), NodeLabelOptions{GFD: tt.gfd, Selftest: SelftestFailed, VulkanAdapters: &n, Extra: extra})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s (gfd %v): %v, want accepted", tt.label, tt.gfd, err)
		case tt.want == "" && labelMap(ls)[extra[0].Key] != extra[0].Value:
			t.Errorf("%s (gfd %v): labels %v", tt.label, tt.gfd, ls)
		case tt.want != "" && (!errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s (gfd %v): %v, want malformed naming %q", tt.label, tt.gfd, err, tt.want)
		case err != nil && strings.HasPrefix(tt.label, "nodeprep.dev/") && strings.Contains(err.Error(), "--gfd-labels"):
			// Turning off the GFD labels does nothing for nodeprep's own.
			t.Errorf("%s (gfd %v): %v suggests --gfd-labels=false for a label GFD does not make", tt.label, tt.gfd, err)
		}
	}
}
