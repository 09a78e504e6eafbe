package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// cudaHost adds to a (patched) lavapipe host tree what the CUDA driver
// brings: the fake libcuda.so.1 and its JIT compiler in the driver's
// store path, the device nodes as real character devices (1:3, /dev/null's
// numbers: the fake only looks for them) and a spec that mounts libcuda
// (and the JIT unless !jit) into the image's library folder and gives the
// containers /dev/nvidiactl and, unless !uvm, the UVM nodes, as
// nvidia-ctk's spec does.
func cudaHost(t *testing.T, host *hostfs.Root, gpus int, uvm, jit bool) {
	t.Helper()
	dir := filepath.Join(host.Dir(), lvpStore, "lib")
	if _, _, err := fakedriver.Build(dir, fakedriver.CUDA); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	for i := 0; i < gpus; i++ {
		nodes = append(nodes, fmt.Sprintf("nvidia%d", i))
	}
	for _, n := range nodes {
		p := filepath.Join(host.Dir(), "dev", n)
		_ = os.Remove(p)
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Skipf("cannot make device nodes here: %v", err)
		}
	}
	specPath := filepath.Join(host.Dir(), "run/cdi/nvidia-container-toolkit.json")
	data, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	edits, _ := spec["containerEdits"].(map[string]any)
	libdir := "/usr/lib/" + cdi.MultiarchTuple(runtime.GOARCH)
	mounts, _ := edits["mounts"].([]any)
	libs := []string{"libcuda.so.1"}
	if jit {
		libs = append(libs, "libnvidia-ptxjitcompiler.so.1")
	}
	for _, l := range libs {
		mounts = append(mounts, map[string]any{"hostPath": lvpStore + "/lib/" + l, "containerPath": libdir + "/" + l, "options": []string{"ro", "nosuid", "nodev", "bind"}})
	}
	edits["mounts"] = mounts
	// The lavapipe host's spec gives the UVM nodes already (as
	// nvidia-ctk's does); a spec without them is made by taking them out.
	var devs []any
	for _, d := range edits["deviceNodes"].([]any) {
		if p := d.(map[string]any)["path"]; p != "/dev/nvidia-uvm" && p != "/dev/nvidia-uvm-tools" {
			devs = append(devs, d)
		}
	}
	devs = append(devs, map[string]any{"path": "/dev/nvidiactl"})
	if uvm {
		devs = append(devs, map[string]any{"path": "/dev/nvidia-uvm"}, map[string]any{"path": "/dev/nvidia-uvm-tools"})
	}
	edits["deviceNodes"] = devs
	out, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(specPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCUDAInContainer runs the CUDA probe inside the container built from
// the spec, the fake libcuda.so.1 standing in for the driver's: a spec
// that gives the UVM nodes and the JIT compiler passes, each GPU's CUDA
// device found by UUID (one GPU a container with PerGPU, as a pod gets
// it); a spec without the UVM nodes, or without libnvidia-ptxjitcompiler,
// fails there, though Vulkan passes in the same container.
func TestCUDAInContainer(t *testing.T) {
	rootfs := requireContainers(t)
	full, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	inv := *full
	inv.GPUs = full.GPUs[:2]
	tests := []struct {
		name     string
		uvm, jit bool
		kind     selftest.ReasonKind // "" passes
		fragment string
	}{
		{"spec with UVM and JIT", true, true, "", ""},
		{"spec without the UVM nodes", false, true, selftest.ReasonCUDAInitFailed, "CUDA_ERROR_UNKNOWN (999, unknown error) (/dev/nvidia-uvm and /dev/nvidia-uvm-tools are missing): /dev/nvidia-uvm is missing"},
		{"spec without the JIT compiler", true, false, selftest.ReasonCUDAFailed, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := lavapipeHost(t, full)
			patch(t, host)
			cudaHost(t, host, len(full.GPUs), tc.uvm, tc.jit)
			o := testOptions(t, rootfs)
			o.CUDALibrary = selftest.DefaultCUDALibrary
			o.PerGPU = true
			rep := run(t, host, &inv, o)
			if tc.kind == "" {
				if !rep.Passed {
					t.Fatalf("reasons %+v", rep.Reasons)
				}
				for i, c := range rep.Containers {
					st := c.Selftest
					if st.CUDA == nil || len(st.CUDA.Devices) != 1 || st.CUDA.Devices[0].UUID != inv.GPUs[i].UUID || !st.Matches[0].CUDA {
						t.Errorf("container %d: CUDA %+v, matches %+v; want its one GPU verified", i, st.CUDA, st.Matches)
					}
				}
				return
			}
			if len(rep.Reasons) != len(inv.GPUs) {
				t.Fatalf("reasons %+v, want one per container", rep.Reasons)
			}
			for _, r := range rep.Reasons {
				if r.Kind != tc.kind || !strings.Contains(r.Message, tc.fragment) {
					t.Errorf("reason %s, want %s with %q", r, tc.kind, tc.fragment)
				}
			}
		})
	}
}
