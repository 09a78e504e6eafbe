package selftest

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestCUDAProbe runs the self-test with the CUDA probe in its own child
// against the fake libcuda (the simulated dgx-h200's UUIDs), Mesa serving
// Vulkan and EGL: a working driver passes with every GPU's CUDA device
// matched and verified; each fault is one reason of its kind (or a
// warning where the policy lets it pass), the hang and the crash too.
func TestCUDAProbe(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	lib, _, cudaEnv := testkit.FakeCUDA(t)
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	tests := []struct {
		name, fault, lib string
		require          *bool
		kind             ReasonKind // "" passes
		fragment         string     // in the reason, or in a warning when it passes
		exit             error      // what Err wraps
	}{
		{"works", "", lib, nil, "", "", nil},
		{"fabric manager", "802", lib, nil, ReasonCUDAInitFailed, "CUDA_ERROR_SYSTEM_NOT_READY (802", fault.ErrCheckFailed},
		{"unknown", "999", lib, nil, ReasonCUDAInitFailed, "CUDA_ERROR_UNKNOWN (999", fault.ErrCheckFailed},
		{"no device", "100", lib, nil, ReasonCUDAInitFailed, "CUDA_ERROR_NO_DEVICE (100", fault.ErrCheckFailed},
		{"hang", "hang", lib, nil, ReasonTimeout, "cuda probe: did not finish within 15s", fault.ErrCheckFailed},
		{"crash", "crash", lib, nil, ReasonCrashed, "cuda probe: crashed: SIGSEGV in " + lib, fault.ErrCheckFailed},
		{"wrong uuid", "wrong-uuid", lib, nil, ReasonCUDAMissingDevice, "GPU 0 (GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9): no CUDA device has its UUID", fault.ErrCheckFailed},
		{"wrong kernel", "wrong-kernel", lib, nil, ReasonCUDAFailed, "wrote 1 of 4096 elements wrong", fault.ErrCheckFailed},
		{"no library, simulated", "", "/nonexistent/libcuda.so.1", nil, "", "CUDA (not required): the CUDA driver library /nonexistent/libcuda.so.1 cannot be used", nil},
		{"no library, required", "", "/nonexistent/libcuda.so.1", &yes, ReasonCUDANotFound, "cannot be used", fault.ErrUnavailable},
		{"not required", "802", lib, &no, "", "CUDA (not required): cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Only the hang is meant to meet the bound, and Mesa's probes
			// beside it must not: on a loaded 2-core machine lavapipe alone
			// takes seconds.
			timeout := time.Minute
			if tc.fault == "hang" {
				timeout = 15 * time.Second
			}
			env := driverEnv(append([]string{"VK_DRIVER_FILES=" + lavapipeICD, "__EGL_VENDOR_LIBRARY_FILENAMES=" + mesaEGL, "FAKE_CUDA_FAULT=" + tc.fault}, cudaEnv...)...)
			r, err := Run(context.Background(), inv, WithCommand(exe), WithEnv(env), WithTimeout(timeout),
				WithAllowCPUAdapter(true), WithCUDA(tc.lib, tc.require))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("reasons %v warnings %q", r.Reasons, r.Warnings)
			if tc.kind == "" {
				if !r.Passed {
					t.Fatalf("failed: %v", r.Reasons)
				}
				if tc.fragment != "" && !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, tc.fragment) }) {
					t.Errorf("warnings %q, want one with %q", r.Warnings, tc.fragment)
				}
				if tc.lib == lib && tc.fault == "" {
					if r.CUDA == nil || len(r.CUDA.Devices) != 8 {
						t.Fatalf("CUDA report %+v, want 8 devices", r.CUDA)
					}
					for i, m := range r.Matches {
						if !m.CUDA || m.CUDADevice == nil || *m.CUDADevice != i {
							t.Errorf("match %d: %+v, want CUDA device %d verified", i, m, i)
						}
					}
				}
				return
			}
			if len(r.Reasons) != 1 || r.Reasons[0].Kind != tc.kind || !strings.Contains(r.Reasons[0].Message, tc.fragment) {
				t.Fatalf("reasons %+v, want one %s with %q", r.Reasons, tc.kind, tc.fragment)
			}
			if err := r.Err(); !errors.Is(err, tc.exit) {
				t.Errorf("Err %v, want %v", err, tc.exit)
			}
		})
	}
}
