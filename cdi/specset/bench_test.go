package specset_test

import (
	"encoding/json"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// BenchmarkCheckSingleSpec is the single-spec check of the one 8-GPU spec
// (cdi.CheckFile: read, discover, check, validate with the library), the
// path `cdi check` took before it judged the runtime's view: the baseline
// for BenchmarkCheckView3.
func BenchmarkCheckSingleSpec(b *testing.B) {
	root := testkit.HostTree(b, "nixos-h200")
	opts := h200Options()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cdi.CheckFile(root, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckView3 is `cdi check` over the runtime's view with three
// 8-GPU specs: the generated one, the device plugin's and a sibling class,
// in /var/run/cdi, plus an empty /etc/cdi. Target: < 2× the single spec.
func BenchmarkCheckView3(b *testing.B) {
	root := testkit.HostTree(b, "nixos-h200")
	data, err := root.ReadFile(cdi.DefaultSpecPath, bounded.MaxCDISpec)
	if err != nil {
		b.Fatal(err)
	}
	for path, kind := range map[string]string{
		"/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json":  "k8s.device-plugin.nvidia.com/gpu",
		"/var/run/cdi/nvidia-container-toolkit.coherent.json": "nvidia.com/gpu.coherent",
	} {
		var s map[string]any
		if err := json.Unmarshal(data, &s); err != nil {
			b.Fatal(err)
		}
		s["kind"], s["cdiVersion"] = kind, "0.6.0"
		out, err := json.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		if err := root.WriteFile(path, out, hostfs.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	opts := h200Options()
	res, err := specset.Check(root, opts)
	if err != nil || len(res.Related) != 2 {
		b.Fatalf("want 3 specs checked: %v %v", err, res)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := specset.Check(root, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckPatched is `cdi check` on the walkthrough's tree
// (nixos-h200, 11 findings): Check, then the spec patched in memory and
// checked again to mark what `cdi patch` fixes. BenchmarkCheck is the
// same view without the second pass: the cost of saying what the patch
// fixes is the difference.
func BenchmarkCheckPatched(b *testing.B) {
	root := testkit.HostTree(b, "nixos-h200")
	opts := h200Options()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := specset.CheckPatched(root, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheck is BenchmarkCheckPatched's baseline: Check alone.
func BenchmarkCheck(b *testing.B) {
	root := testkit.HostTree(b, "nixos-h200")
	opts := h200Options()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := specset.Check(root, opts); err != nil {
			b.Fatal(err)
		}
	}
}
