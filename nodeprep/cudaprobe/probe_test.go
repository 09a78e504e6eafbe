package cudaprobe

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// dgx is the simulated dgx-h200's inventory, whose UUIDs the fake
// libcuda reports.
func dgx(t *testing.T) []gpu.GPU {
	t.Helper()
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	return inv.GPUs
}

// probeWith runs the probe in this process against the fake libcuda with
// the given FAKE_CUDA_FAULT and device directory. The faults tested here
// return; the hang and the crash need the child (nodeprep/selftest).
func probeWith(t *testing.T, lib, devDir, fault string) *Report {
	t.Setenv("FAKE_CUDA_DEV_DIR", devDir)
	t.Setenv("FAKE_CUDA_FAULT", fault)
	t.Setenv("FAKE_CUDA_DEVICE", "3")
	return Probe(Request{API: API, Library: lib, Seed: 0x1234567})
}

// TestProbeFake: against the fake driver every device of the simulated
// dgx-h200 is found by UUID, in ordinal order, and its memory round trip
// and kernel verify; Evaluate then finds nothing.
func TestProbeFake(t *testing.T) {
	lib, devDir, _ := testkit.FakeCUDA(t)
	r := probeWith(t, lib, devDir, "")
	if r.Stage != "" || r.Count != 8 || len(r.Devices) != 8 {
		t.Fatalf("report %+v, want 8 devices", r)
	}
	gpus := dgx(t)
	for i, d := range r.Devices {
		if d.UUID != gpus[i].UUID || !d.OK() || d.Name != "NVIDIA H200" || d.ComputeCapability != "9.0" {
			t.Errorf("device %d: %+v, want %s, memory and kernel verified", i, d, gpus[i].UUID)
		}
	}
	if r.DriverVersion != "12.4" {
		t.Errorf("driver version %q, want 12.4", r.DriverVersion)
	}
	res, f := Evaluate(gpus, r)
	if len(f) != 0 {
		t.Errorf("findings %v, want none", f)
	}
	for i, g := range res {
		if !g.OK || g.Device == nil || *g.Device != i {
			t.Errorf("GPU %d: %+v, want device %d OK", i, g, i)
		}
	}
}

// TestFakeRunsThePTX: the fake's result comes from the PTX it was given
// (its multiplier) and the launch's arguments, not from a copy of the
// pattern: a kernel with another multiplier is caught as wrong.
func TestFakeRunsThePTX(t *testing.T) {
	lib, devDir, _ := testkit.FakeCUDA(t)
	orig := patternPTX
	t.Cleanup(func() { patternPTX = orig })
	patternPTX = strings.Replace(orig, "%r1, -1640531535;", "%r1, -1640531533;", 1)
	r := probeWith(t, lib, devDir, "")
	if len(r.Devices) != 8 {
		t.Fatalf("report %+v", r)
	}
	for _, d := range r.Devices {
		if d.Kernel || d.Wrong == 0 {
			t.Errorf("device %d: kernel %v wrong %d, want the other multiplier's result caught", d.Ordinal, d.Kernel, d.Wrong)
		}
	}
	patternPTX = strings.Replace(orig, "st.global.u32", "st.global.u16", 1)
	r = probeWith(t, lib, devDir, "")
	if d := r.Devices[0]; d.Step != "cuModuleLoadData" || d.Result != "CUDA_ERROR_INVALID_PTX" || !strings.Contains(d.JITLog, "stores nothing") {
		t.Errorf("PTX the JIT cannot compile: %+v", d)
	}
}

// TestProbeFaults: each failure of the driver is reported by its CUDA name,
// once when cuInit fails, per GPU when a device fails, with the fix.
func TestProbeFaults(t *testing.T) {
	lib, devDir, _ := testkit.FakeCUDA(t)
	noUVM := t.TempDir()
	if err := fakedriver.CUDADevNodes(noUVM, false, 0, 1, 2, 3, 4, 5, 6, 7); err != nil {
		t.Fatal(err)
	}
	half := t.TempDir()
	if err := fakedriver.CUDADevNodes(half, true, 0, 2, 4, 6); err != nil {
		t.Fatal(err)
	}
	_, uvmErr := os.Stat("/dev/nvidia-uvm")
	hostUVM := uvmErr == nil
	tests := []struct {
		name, fault, devDir string
		kind                string
		gpus                []int // the GPUs a per-GPU finding names; nil for one finding
		fragments           []string
	}{
		{"fabric", "802", devDir, KindInitFailed, nil, []string{"cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY (802, system not yet initialized)", "hardware.nvidia.datacenter.enable", "nvidia-smi -q | grep -A2 Fabric"}},
		{"mismatch", "803", devDir, KindInitFailed, nil, []string{"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803", "different driver versions"}},
		{"compat", "804", devDir, KindInitFailed, nil, []string{"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804", "forward-compatibility"}},
		{"no device", "100", devDir, KindInitFailed, nil, []string{"CUDA_ERROR_NO_DEVICE (100"}},
		{"unknown", "999", devDir, KindInitFailed, nil, []string{"CUDA_ERROR_UNKNOWN (999"}},
		{"uvm missing", "", noUVM, KindInitFailed, nil, []string{"CUDA_ERROR_UNKNOWN (999"}},
		{"wrong uuid", "wrong-uuid", devDir, KindMissingDevice, []int{3}, []string{"GPU 3 (GPU-66f687d7-8698-5b78-a4ee-cd7c51720fb2): no CUDA device has its UUID", "3 GPU-66f687d7-8698-5b78-a4ee-cd7c51720fe8"}},
		{"wrong kernel", "wrong-kernel", devDir, KindFailed, []int{3}, []string{"CUDA device 3: the PTX kernel ran but wrote 1 of 4096 elements wrong (element 7: got"}},
		{"no jit", "no-jit", devDir, KindFailed, []int{0, 1, 2, 3, 4, 5, 6, 7}, []string{"cuModuleLoadData failed: CUDA_ERROR_JIT_COMPILER_NOT_FOUND (221", "libnvidia-ptxjitcompiler.so.999", "libnvidia-ptxjitcompiler.so.1 cannot be loaded"}},
		{"half the nodes", "", half, KindMissingDevice, []int{1, 3, 5, 7}, []string{"no CUDA device has its UUID", "lists devices 0 GPU-228ca55b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := probeWith(t, lib, tc.devDir, tc.fault)
			_, findings := Evaluate(dgx(t), r)
			want := 1
			if tc.gpus != nil {
				want = len(tc.gpus)
			}
			if len(findings) != want {
				t.Fatalf("findings %+v, want %d", findings, want)
			}
			for i, f := range findings {
				if f.Kind != tc.kind {
					t.Errorf("finding %d kind %s, want %s", i, f.Kind, tc.kind)
				}
				if tc.gpus != nil && !strings.HasPrefix(f.Message, fmt.Sprintf("GPU %d ", tc.gpus[i])) {
					t.Errorf("finding %q, want GPU %d's", f.Message, tc.gpus[i])
				}
				for _, frag := range tc.fragments {
					if !strings.Contains(f.Message, frag) {
						t.Errorf("finding %q lacks %q", f.Message, frag)
					}
				}
			}
			uvmFix := strings.Contains(findings[0].Message, "nvidia-uvm kernel module is not loaded")
			if (tc.fault == "100" || tc.fault == "999" || tc.name == "uvm missing") && uvmFix == hostUVM {
				t.Errorf("finding %q: the UVM fix must be given exactly when /dev/nvidia-uvm is missing (here: %v)", findings[0].Message, !hostUVM)
			}
		})
	}
}

// TestLibraryMissing: a library that cannot be opened, or that is not a
// CUDA driver, stops the probe at dlopen or dlsym: one not-found finding,
// whose hint fits what was given (a path to check, or a name to replace
// with one).
func TestLibraryMissing(t *testing.T) {
	for _, tc := range []struct{ lib, hint string }{
		{"/nonexistent/libcuda.so.1", "check the path --cuda-lib"},
		{"libc.so.6", "name it with --cuda-lib"},
		{"libcuda-nonexistent.so.1", "name it with --cuda-lib"},
	} {
		r := Probe(Request{API: API, Library: tc.lib})
		_, f := Evaluate(dgx(t), r)
		if len(f) != 1 || f[0].Kind != KindNotFound || !strings.Contains(f[0].Message, tc.hint) {
			t.Errorf("%s: stage %q findings %+v, want one %s saying %q", tc.lib, r.Stage, f, KindNotFound, tc.hint)
		}
	}
}
