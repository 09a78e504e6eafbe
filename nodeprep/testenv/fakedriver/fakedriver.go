// Package fakedriver gives tests their drivers: Mesa's lavapipe and Mesa
// EGL, the real stand-ins (Mesa), and small fake drivers built from C with
// the cgo toolchain (gcc) for the fault tests and scripts/faults.sh
// (Build): a Vulkan ICD, a glvnd EGL vendor library and an NVML, each
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
	// driver 550.54.15, MIG off. NVIDIA's real container toolkit accepts
	// it (nvidia-ctk cdi generate, the runtime's jit-cdi mode); it never
	// faults.
	NVMLDGXH200 = "nvml-dgx-h200"
)

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

// Build compiles the fake named kind (ICD, EGL, NVML or NVMLDGXH200) into
// dir with the cgo toolchain's gcc and returns the library's path; for
// ICD and EGL it also writes the manifest
// that names the library and returns its path second ("" for the NVMLs).
func Build(dir, kind string) (lib, manifest string, err error) {
	for _, f := range []string{"fault.h", kind + ".c"} {
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
