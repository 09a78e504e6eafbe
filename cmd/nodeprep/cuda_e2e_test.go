package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestUpCUDA runs `up` with the fake libcuda.so.1 (the simulated
// dgx-h200's UUIDs) as --cuda-lib: ready with every GPU's CUDA device
// verified, in status.json, the metrics and -o json; the fabric manager's
// 802 makes the node not ready with the fix; and without any libcuda a
// simulated run stays ready with a warning, as the README's demo does,
// unless --require-cuda.
func TestUpCUDA(t *testing.T) {
	icd, egl := lavapipe(t)
	lib, _, cudaEnv := testkit.FakeCUDA(t)
	env := append([]string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}, cudaEnv...)

	root := hostCopy(t, "nixos-h200")
	r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--cuda-lib", lib,
		"--metrics-file", "/run/nodeprep/nodeprep.prom", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Ready    bool `json:"ready"`
		Selftest struct {
			RequireCUDA bool `json:"requireCUDA"`
			CUDA        struct {
				Library string  `json:"library"`
				InitMS  float64 `json:"initMs"`
				Devices []struct {
					UUID    string `json:"uuid"`
					Memory  bool   `json:"memory"`
					Kernel  bool   `json:"kernel"`
					Timings struct {
						ModuleMS float64 `json:"moduleMs"`
					} `json:"timings"`
				} `json:"devices"`
			} `json:"cuda"`
			Matches []struct {
				UUID       string `json:"uuid"`
				CUDA       bool   `json:"cuda"`
				CUDADevice *int   `json:"cudaDevice"`
			} `json:"matches"`
		} `json:"selftest"`
	}
	status, err := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
	if err != nil {
		t.Fatal(err)
	}
	for what, data := range map[string][]byte{"-o json": []byte(r.stdout), "status.json": status} {
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !rep.Ready || rep.Selftest.CUDA.Library != lib || len(rep.Selftest.CUDA.Devices) != 8 || len(rep.Selftest.Matches) != 8 {
			t.Fatalf("%s: %+v", what, rep)
		}
		for i, m := range rep.Selftest.Matches {
			d := rep.Selftest.CUDA.Devices[i]
			if !m.CUDA || m.CUDADevice == nil || *m.CUDADevice != i || d.UUID != m.UUID || !d.Memory || !d.Kernel {
				t.Errorf("%s: GPU %d: match %+v device %+v, want CUDA device %d verified", what, i, m, d, i)
			}
		}
	}
	prom, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/nodeprep.prom"))
	if !strings.Contains(string(prom), "nodeprep_selftest_cuda_matched 8\n") {
		t.Errorf("metrics lack nodeprep_selftest_cuda_matched 8:\n%s", prom)
	}

	t.Run("fabric manager not ready", func(t *testing.T) {
		root := hostCopy(t, "nixos-h200")
		r := run(t, append(env, "FAKE_CUDA_FAULT=802"), "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--cuda-lib", lib)
		if r.code != 1 || !strings.Contains(r.stdout+r.stderr, "CUDA_ERROR_SYSTEM_NOT_READY") || !strings.Contains(r.stdout+r.stderr, "hardware.nvidia.datacenter.enable") {
			t.Errorf("exit %d, want 1 naming CUDA_ERROR_SYSTEM_NOT_READY and the fix\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("no libcuda, simulated", func(t *testing.T) {
		root := hostCopy(t, "nixos-h200")
		r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--cuda-lib", "/nonexistent/libcuda.so.1")
		if r.code != 0 || !strings.Contains(r.stdout, "CUDA not probed (/nonexistent/libcuda.so.1 cannot be opened; not required here)") {
			t.Errorf("exit %d, want 0 with a CUDA warning\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		r = run(t, env, "selftest", "--simulate", "dgx-h200", "--allow-cpu-adapter", "--cuda-lib", "/nonexistent/libcuda.so.1", "--require-cuda")
		if r.code != 69 || !strings.Contains(r.stdout, "cuda-not-found") {
			t.Errorf("--require-cuda: exit %d, want 69 naming cuda-not-found\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("selftest text", func(t *testing.T) {
		r := run(t, append(env, "FAKE_CUDA_FAULT=wrong-kernel", "FAKE_CUDA_DEVICE=2"), "selftest", "--simulate", "dgx-h200", "--allow-cpu-adapter", "--cuda-lib", lib)
		if r.code != 1 || !strings.Contains(r.stdout, "✗ device 2 NVIDIA H200 GPU-947a0c76-18c5-5065-ba69-a701645a2ff2  kernel wrong: element 7") || !strings.Contains(r.stdout, "CUDA ✗") {
			t.Errorf("exit %d, want 1 with device 2's wrong kernel\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	})
}
