// Package fakedriver gives tests their drivers: Mesa's lavapipe and Mesa
// EGL, the real stand-ins (Mesa), and small fake drivers built from C with
// the cgo toolchain (gcc) for the fault tests and scripts/faults.sh
// (Build): a Vulkan ICD, a glvnd EGL vendor library, an NVML and a CUDA
// driver library (libcuda.so.1, its faults from FAKE_CUDA_FAULT), each
// acting out the fault named by FAKE_FAULT in the child's environment
// (hang, abort, segv, flood, daemon, message; csrc/fault.h) at the point
// a real driver's would happen. With a real driver to wrap (WrapICD,
// WrapEGL), the fake ICD is Mesa's lavapipe breaking the adapter rules
// wgpu applies and the fake EGL vendor is Mesa's EGL offering only
// OpenGL ES 2.0: one fault library for the self-test's tests and the
// differential test against wgpu. Only tests and the fault script use it.
package fakedriver

import (
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Mesa returns the manifests of Mesa's lavapipe ICD and of Mesa's EGL
// vendor library: from VK_DRIVER_FILES and __EGL_VENDOR_LIBRARY_FILENAMES
// when set (`make unit`, a Nix sandbox), else Debian's paths for this
// architecture (lvp_icd.x86_64.json, lvp_icd.aarch64.json...). explicit
// says the environment named them: a test must then fail, not skip, when
// one is missing.
// getenv is the test's os.Getenv.
func Mesa(getenv func(string) string) (icd, egl string, explicit bool) {
	icd, egl = getenv("VK_DRIVER_FILES"), getenv("__EGL_VENDOR_LIBRARY_FILENAMES")
	explicit = icd != "" || egl != ""
	if icd == "" {
		arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686", "riscv64": "riscv64", "ppc64le": "ppc64le", "s390x": "s390x"}[runtime.GOARCH]
		icd = "/usr/share/vulkan/icd.d/lvp_icd." + arch + ".json"
	}
	if egl == "" {
		egl = "/usr/share/glvnd/egl_vendor.d/50_mesa.json"
	}
	return icd, egl, explicit
}

// MesaMissing says why Mesa's manifests cannot be used ("" when both
// exist).
func MesaMissing(getenv func(string) string) string {
	icd, egl, _ := Mesa(getenv)
	for _, f := range []string{icd, egl} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Sprintf("Mesa driver not installed (%v): apt-get install mesa-vulkan-drivers libegl-mesa0", err)
		}
	}
	return ""
}

//go:embed csrc
var sources embed.FS

// The fake libraries.
const (
	// ICD is libfake_icd.so (vk_icdNegotiateLoaderICDInterfaceVersion);
	// wrapping a real ICD (WrapICD) it needs the Vulkan headers
	// (libvulkan-dev).
	ICD = "icd"
	// EGL is libfake_egl.so (__egl_Main); it needs glvnd's vendor ABI
	// header (libglvnd-core-dev).
	EGL  = "egl"
	NVML = "nvml" // libnvidia-ml.so.1: one GPU, most queries missing
	// NVMLDGXH200 is libnvidia-ml.so.1 reporting the simulated dgx-h200
	// (gpu.Simulated): its 8 GPUs' UUIDs, minors, PCI bus ids and names,
	// driver 550.54.15, MIG off, the NVLink fabric registered. NVIDIA's
	// real container toolkit accepts it (nvidia-ctk cdi generate, the
	// runtime's jit-cdi mode); it acts out no FAKE_FAULT, only the
	// fabric states of FAKE_NVML_FABRIC (csrc/fabric.h).
	NVMLDGXH200 = "nvml-dgx-h200"
	// CUDA is libcuda.so.1, the CUDA driver API for the simulated dgx-h200
	// (its UUIDs; the devices whose /dev/nvidia<minor> exist), with a
	// libnvidia-ptxjitcompiler.so.1 beside it that "compiles" the CUDA
	// probe's PTX kernel for the fake to run on the host; faults from
	// FAKE_CUDA_FAULT (csrc/cuda.c, CUDAFaults) and FAKE_FAULT.
	CUDA = "cuda"
)

// CUDAFaults are the values of FAKE_CUDA_FAULT the fake libcuda acts out:
// cuInit returning 802 (the fabric manager), 100, 999, 803 and 804, a
// kernel that never finishes, a segfault in cuInit, a device (the
// ordinal FAKE_CUDA_DEVICE) with another UUID or a kernel that writes a
// wrong value, and a JIT compiler that cannot be loaded.
var CUDAFaults = []string{"802", "100", "999", "803", "804", "hang", "crash", "wrong-uuid", "wrong-kernel", "no-jit"}

// CUDAEnv is the environment entries that let the fake libcuda see the
// device nodes of a host without NVIDIA devices: FAKE_CUDA_DEV_DIR=dir,
// where CUDADevNodes made them.
func CUDAEnv(dir string) []string { return []string{"FAKE_CUDA_DEV_DIR=" + dir} }

// CUDADevNodes makes, in dir, the empty files the fake libcuda looks for
// in place of the driver's device nodes: nvidiactl, nvidia-uvm (unless
// !uvm), nvidia-uvm-tools, and nvidia<i> for each index in gpus.
func CUDADevNodes(dir string, uvm bool, gpus ...int) error {
	names := []string{"nvidiactl"}
	if uvm {
		names = append(names, "nvidia-uvm", "nvidia-uvm-tools")
	}
	for _, i := range gpus {
		names = append(names, fmt.Sprintf("nvidia%d", i))
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Faults are the values of FAKE_FAULT.
var Faults = []string{"hang", "abort", "segv", "flood", "daemon", "message"}

// WrapICD returns the environment (KEY=value) that makes the fake ICD
// (Build's ICD) the real ICD library real (a path or a name dlopen finds)
// with the changes faults list, at the points wgpu-hal reads them
// (csrc/icd.c): "queue-family-0-compute" (family 0 computes but does not
// draw; the real families follow), "api-1.0" (the device says Vulkan
// 1.0), "hide:<extension>" (the device lacks it), "conformance-0" (the
// driver reports conformance 0.0.0.0), "crash-on-wgpu-instance"
// (vkCreateInstance dies of SIGSEGV for Vulkan 1.3 or wgpu's instance
// extensions). No fault is the real driver as it is.
func WrapICD(real string, faults ...string) []string {
	return []string{"FAKE_ICD_WRAP=" + real, "FAKE_VK_FAULT=" + strings.Join(faults, ",")}
}

// WrapEGL returns the environment that makes the fake EGL vendor (Build's
// EGL) the real glvnd vendor library real (Mesa's libEGL_mesa.so.0) with
// the changes faults list (csrc/egl.c): "gles-2-only" (a driver offering
// OpenGL ES 2.0 alone: no desktop OpenGL, no context of version 3 or
// more, GL_VERSION "OpenGL ES 2.0").
func WrapEGL(real string, faults ...string) []string {
	return []string{"FAKE_EGL_WRAP=" + real, "FAKE_EGL_FAULT=" + strings.Join(faults, ",")}
}

// Build compiles the fake named kind (ICD, EGL, NVML, NVMLDGXH200 or
// CUDA) into dir with the cgo toolchain's gcc and returns the library's
// path; for ICD and EGL it also writes the manifest that names the library
// and returns its path second ("" for the others). CUDA also writes
// libnvidia-ptxjitcompiler.so.1 beside libcuda.so.1.
func Build(dir, kind string) (lib, manifest string, err error) {
	if kind == CUDA {
		return buildCUDA(dir)
	}
	for _, f := range []string{"fault.h", "fabric.h", kind + ".c"} {
		data, err := sources.ReadFile("csrc/" + f)
		if err != nil {
			return "", "", fmt.Errorf("unknown fake %q: %w", kind, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return "", "", err
		}
	}
	lib = filepath.Join(dir, "libfake_"+kind+".so")
	if kind == NVML || kind == NVMLDGXH200 {
		lib = filepath.Join(dir, "libnvidia-ml.so.1")
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-o", lib, filepath.Join(dir, kind+".c")).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("compiling the fake %s: %v\n%s", kind, err, out)
	}
	var m string
	switch kind {
	case ICD:
		m = fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q,"api_version":"1.3.0"}}`, lib)
	case EGL:
		m = fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q}}`, lib)
	default:
		return lib, "", nil
	}
	manifest = filepath.Join(dir, "fake_"+kind+".json")
	return lib, manifest, os.WriteFile(manifest, []byte(m), 0o644)
}

// buildCUDA builds the fake libcuda.so.1 and its JIT compiler library in
// dir, with the driver's sonames (so ldconfig and the toolkit's hooks link
// them as they link the real ones). libcuda's RUNPATH is $ORIGIN, so it finds the JIT beside itself
// (NixOS's libcuda finds its own through a RUNPATH too); in a container,
// where the spec mounts both into one folder, the same holds.
func buildCUDA(dir string) (lib, manifest string, err error) {
	for _, f := range []string{"fault.h", "ptxjit.h", "ptxjit.c", "cuda.c"} {
		data, err := sources.ReadFile("csrc/" + f)
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return "", "", err
		}
	}
	jit := filepath.Join(dir, "libnvidia-ptxjitcompiler.so.1")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-Wl,-soname,libnvidia-ptxjitcompiler.so.1", "-o", jit, filepath.Join(dir, "ptxjit.c")).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("compiling the fake JIT compiler: %v\n%s", err, out)
	}
	lib = filepath.Join(dir, "libcuda.so.1")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-pthread", "-Wl,-rpath,$ORIGIN", "-Wl,-soname,libcuda.so.1", "-o", lib, filepath.Join(dir, "cuda.c"), "-ldl").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("compiling the fake libcuda: %v\n%s", err, out)
	}
	return lib, "", nil
}
