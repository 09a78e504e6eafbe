package app

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func TestSelftestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"allow-cpu-adapter without simulate", []string{"selftest", "--allow-cpu-adapter"}, ExitUsage, "--allow-cpu-adapter needs --simulate"},
		{"zero timeout", []string{"selftest", "--timeout", "0s"}, ExitUsage, "--timeout"},
		{"argument", []string{"selftest", "extra"}, ExitUsage, ""},
		{"probe without request", []string{"__probe"}, ExitUsage, ""},
		{"probe with a bad request", []string{"__probe", `{"api":"metal","library":"x"}`}, ExitUsage, "bad probe request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			err := Run(append([]string{"--root", t.TempDir()}, tc.args...), IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			if got := ExitCode(err); got != tc.code {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.code)
			}
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

func TestSelftestExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		rep     selftest.Report
		code    int
		printed bool
	}{
		{"passed", selftest.Report{Passed: true}, ExitOK, true},
		{"check failed", selftest.Report{Reasons: []selftest.Reason{{Kind: selftest.ReasonMissingAdapter, Message: "no NVIDIA adapter"}}}, ExitCheckFailed, true},
		{"loader missing", selftest.Report{Reasons: []selftest.Reason{{Kind: selftest.ReasonLoaderNotFound, Message: "dlopen"}}}, ExitUnavailable, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := selftestExit(&tc.rep, tc.printed)
			if got := ExitCode(err); got != tc.code {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.code)
			}
			var s *silentError
			if err != nil && errors.As(err, &s) != tc.printed {
				t.Errorf("silent = %v, want %v", !tc.printed, tc.printed)
			}
			if err != nil && !errors.Is(err, selftest.ErrFailed) {
				t.Errorf("%v does not wrap selftest.ErrFailed", err)
			}
			if tc.code == ExitUnavailable && !errors.Is(err, fault.ErrUnavailable) {
				t.Errorf("%v is not marked unavailable", err)
			}
		})
	}
}

func TestSelftestText(t *testing.T) {
	t.Parallel()
	zero := 0
	rep := &selftest.Report{
		Simulated: true, StandIn: true, RequireEGL: true,
		Vulkan: selftest.VulkanReport{Loader: "libvulkan.so.1", LoaderVersion: "1.3.239", Adapters: []selftest.Adapter{{
			Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Vendor: selftest.VendorMesa, DeviceType: selftest.DeviceCPU, Driver: "llvmpipe",
			DriverInfo: "Mesa 22.3.6", Backend: "vulkan", DeviceUUID: "GPU-6d657361-3232-2e33-2e36-000000000000",
			Dispatch:   &selftest.Dispatch{Verified: true, Elements: 4096, Timings: selftest.DispatchTimings{TotalMS: 6.5}},
			APIVersion: "1.3.230", QueueFamily0: "GRAPHICS|COMPUTE|TRANSFER",
			WGPU: &selftest.WGPU{Limits: selftest.Limits{MaxBufferSize: 2147483647, MaxBindGroups: 8}, Features: []string{"shader-f16", "timestamp-query"},
				DownlevelFlags: []string{"COMPUTE_SHADERS"}, SubgroupMinSize: 8, SubgroupMaxSize: 8},
		}, {
			Index: 1, Name: "broken", DeviceType: selftest.DeviceDiscrete, Vendor: selftest.VendorNVIDIA, Driver: "?", DriverInfo: "?",
			Hidden: true, HiddenRule: selftest.RuleQueueFamily0Graphics, HiddenReason: "queue family 0 has no graphics",
		}}},
		EGL:     selftest.EGLReport{Library: "libEGL.so.1", Devices: []selftest.EGLDevice{{Vendor: "Mesa Project", API: "OpenGL ES", GLVendor: "Mesa/X.org", GLRenderer: "llvmpipe", GLESVersion: "3.2"}}},
		Matches: []selftest.Match{{GPU: 0, UUID: "GPU-x", Name: "NVIDIA H200", Adapter: &zero, AdapterName: "llvmpipe", Vulkan: true, EGLDevice: &zero, EGL: true, StandIn: true}},
		Passed:  true, DurationMS: 42,
	}
	var b bytes.Buffer
	if err := writeSelftestText(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"✓ #0 llvmpipe (LLVM 15.0.6, 256 bits)  Cpu vendor 0x10005",
		"dispatch verified 4096 elements in 6.5 ms",
		"✓ device 0 Mesa Project  OpenGL ES: Mesa/X.org / llvmpipe  GLES 3.2",
		"wgpu: Vulkan 1.3.230, queue family 0 GRAPHICS|COMPUTE|TRANSFER, subgroups 8-8, 1 downlevel flags",
		"limits: maxBufferSize 2147483647,",
		"maxBindGroups 8",
		"features: shader-f16 timestamp-query",
		"✗ #1 broken",
		"hidden: queue family 0 has no graphics",
		"✓ GPU 0 NVIDIA H200 GPU-x  Vulkan ✓ (llvmpipe)  EGL ✓  stand-in",
		"self-test passed (42 ms, simulated, CPU stand-in",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, b.String())
		}
	}

	// The CUDA section gives cuInit's time only where cuInit ran.
	for _, tc := range []struct {
		cuda *cudaprobe.Report
		want string
	}{
		{&cudaprobe.Report{Library: "libcuda.so.1", Stage: cudaprobe.StageLoad, Error: "libcuda.so.1: cannot open shared object file"}, "CUDA (libcuda.so.1)\n"},
		{&cudaprobe.Report{Library: "libcuda.so.1", DriverVersion: "12.4", InitMS: 812.25}, "CUDA (libcuda.so.1, CUDA 12.4, cuInit 812.2 ms)\n"},
	} {
		r := *rep
		r.CUDA = tc.cuda
		b.Reset()
		if err := writeSelftestText(&b, &r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("CUDA stage %q: text output lacks %q:\n%s", tc.cuda.Stage, tc.want, b.String())
		}
	}
}

// nodeprepBinary is the nodeprep binary, built once: the self-test
// re-executes its own binary, which a test binary is not.
func nodeprepBinary(t *testing.T) string {
	t.Helper()
	return testkit.Binary(t)
}

// TestBinaryDoesNotLinkGraphics checks nodeprep's DT_NEEDED: the Vulkan
// loader and libEGL are dlopen'ed, never linked.
// TestBinaryDoesNotLinkGraphics: the built nodeprep (the probe's binary too)
// links neither libvulkan nor libEGL: they are dlopen'ed, so nodeprep runs
// and reports on hosts without them.
func TestBinaryDoesNotLinkGraphics(t *testing.T) {
	t.Parallel()
	f, err := elf.Open(nodeprepBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.Contains(l, "vulkan") || strings.Contains(l, "EGL") || strings.Contains(l, "GL") {
			t.Errorf("nodeprep links %s; it must dlopen it", l)
		}
	}
}

// TestSelftestSimulated runs the whole command against lavapipe and Mesa
// EGL with a simulated DGX.
func TestSelftestSimulated(t *testing.T) {
	t.Parallel()
	icd, egl := testkit.Mesa(t)
	bin := nodeprepBinary(t)
	run := func(args ...string) (*selftest.Report, int, string) {
		cmd := exec.Command(bin, append([]string{"--root", t.TempDir(), "-o", "json", "selftest", "--simulate", "dgx-h200"}, args...)...)
		cmd.Env = append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var rep selftest.Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("exit %d, stdout is not a report: %v\n%s\nstderr: %s", code, err, stdout.String(), stderr.String())
		}
		return &rep, code, stderr.String()
	}
	rep, code, stderr := run("--allow-cpu-adapter")
	if code != ExitOK || !rep.Passed || !rep.StandIn || !rep.Simulated || len(rep.Matches) == 0 {
		t.Fatalf("exit %d passed %v standIn %v, %d matches; reasons %+v; stderr %s", code, rep.Passed, rep.StandIn, len(rep.Matches), rep.Reasons, stderr)
	}
	rep, code, _ = run()
	if code != ExitCheckFailed || rep.Passed {
		t.Fatalf("without --allow-cpu-adapter: exit %d passed %v, want 1 and a failure", code, rep.Passed)
	}
	rep, code, _ = run("--allow-cpu-adapter", "--vulkan-loader", "/nonexistent/libvulkan.so.1")
	if code != ExitUnavailable || rep.Passed || rep.Reasons[0].Kind != selftest.ReasonLoaderNotFound {
		t.Fatalf("missing loader: exit %d reasons %+v, want 69 and loader-not-found", code, rep.Reasons)
	}
}
