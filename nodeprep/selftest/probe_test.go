package selftest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// realInventory is one NVML GPU, as on a real host.
func realInventory() *gpu.Inventory {
	return &gpu.Inventory{GPUs: []gpu.GPU{{Index: 0, UUID: "GPU-11111111-2222-3333-4444-555555555555", Name: "NVIDIA H200"}}}
}

// simulatedInventory is two simulated GPUs.
func simulatedInventory() *gpu.Inventory {
	return &gpu.Inventory{Simulated: true, Server: "dgx-h200", GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", Name: "NVIDIA H200"},
		{Index: 1, UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000001", Name: "NVIDIA H200"},
	}}
}

// runProbe runs the self-test through real child processes (this test
// binary, see TestMain) with the given options after the defaults.
func runProbe(t *testing.T, inv *gpu.Inventory, opts ...Option) *Report {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base := []Option{
		WithCommand(exe),
		WithEnv(driverEnv("VK_DRIVER_FILES="+lavapipeICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL)),
		WithTimeout(60 * time.Second),
	}
	rep, err := Run(context.Background(), inv, append(base, opts...)...)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func reasonKinds(r *Report) []ReasonKind {
	var out []ReasonKind
	for _, x := range r.Reasons {
		out = append(out, x.Kind)
	}
	return out
}

// wantReason fails unless r failed with exactly one reason of kind whose
// message contains every fragment.
func wantReason(t *testing.T, r *Report, kind ReasonKind, fragments ...string) {
	t.Helper()
	if r.Passed {
		t.Fatalf("self-test passed, want a %s failure", kind)
	}
	if len(r.Reasons) != 1 || r.Reasons[0].Kind != kind {
		t.Fatalf("reasons %v, want one %s: %+v", reasonKinds(r), kind, r.Reasons)
	}
	for _, f := range fragments {
		if !strings.Contains(r.Reasons[0].Message, f) {
			t.Errorf("reason %q does not contain %q", r.Reasons[0].Message, f)
		}
	}
}

func TestLavapipeIsFoundButNeverAGPU(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	r := runProbe(t, realInventory())
	if r.Vulkan.Stage != "" || len(r.Vulkan.Adapters) != 1 {
		t.Fatalf("vulkan probe: stage %q error %q, %d adapters; want lavapipe alone", r.Vulkan.Stage, r.Vulkan.Error, len(r.Vulkan.Adapters))
	}
	a := r.Vulkan.Adapters[0]
	if a.DeviceType != DeviceCPU || a.Vendor != VendorMesa || a.Backend != BackendVulkan || a.Hidden {
		t.Errorf("lavapipe reported as %+v, want an exposed Cpu adapter with vendor 0x10005", a)
	}
	if !strings.HasPrefix(a.DeviceUUID, "GPU-") || a.Driver == "?" {
		t.Errorf("lavapipe UUID %q driver %q: want both read through vkGetPhysicalDeviceProperties2", a.DeviceUUID, a.Driver)
	}
	if a.Dispatch == nil || !a.Dispatch.Verified || a.Dispatch.Elements != DispatchElements {
		t.Fatalf("dispatch on lavapipe: %+v, want verified", a.Dispatch)
	}
	if len(r.EGL.Devices) == 0 || r.EGL.Devices[0].Error != "" || r.EGL.Devices[0].GLRenderer == "" {
		t.Errorf("EGL probe: %+v, want Mesa's device with a current context", r.EGL)
	}
	// F12: a CPU adapter never satisfies an NVML GPU, nor a Mesa EGL device.
	if r.Passed || r.Matches[0].Vulkan || r.Matches[0].EGL {
		t.Fatalf("lavapipe satisfied a real GPU: %+v", r.Matches)
	}
	if got := reasonKinds(r); len(got) != 2 || got[0] != ReasonMissingAdapter || got[1] != ReasonEGLMissingDevice {
		t.Fatalf("reasons %v, want missing-adapter and egl-missing-device: %+v", got, r.Reasons)
	}
	if !strings.Contains(r.Reasons[0].Message, "llvmpipe") {
		t.Errorf("reason %q should name the adapter it saw", r.Reasons[0].Message)
	}
}

func TestSimulatedStandIn(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	for _, tc := range []struct {
		name  string
		allow bool
		pass  bool
	}{
		{"allowed", true, true},
		{"not allowed", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runProbe(t, simulatedInventory(), WithAllowCPUAdapter(tc.allow))
			if r.Passed != tc.pass || r.StandIn != tc.pass || !r.Simulated {
				t.Fatalf("passed %v standIn %v simulated %v, want %v/%v/true; reasons %+v", r.Passed, r.StandIn, r.Simulated, tc.pass, tc.pass, r.Reasons)
			}
			for _, m := range r.Matches {
				if m.Vulkan != tc.pass || m.EGL != tc.pass || m.StandIn != tc.pass {
					t.Errorf("match %+v, want vulkan/egl/stand-in %v", m, tc.pass)
				}
			}
		})
	}
}

func TestRealProbeFailures(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	dir := t.TempDir()
	icdDir := filepath.Join(dir, "data/vulkan/icd.d")
	if err := os.MkdirAll(icdDir, 0o755); err != nil {
		t.Fatal(err)
	}
	badICD := filepath.Join(icdDir, "broken_icd.json")
	if err := os.WriteFile(badICD, []byte(`{"file_format_version":"1.0.0","ICD":{"library_path":"/nonexistent/libvulkan_x.so","api_version":"1.3.0"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A real ICD library that opens but refuses the loader (the fake
	// with no fault).
	fakeICD, fakeManifest, err := fakedriver.Build(t.TempDir(), fakedriver.ICD)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fakeManifest)
	if err == nil {
		err = os.WriteFile(filepath.Join(icdDir, "fake_icd.json"), data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		opts      []Option
		kind      ReasonKind
		fragments []string
		absent    []string
		libErr    bool
	}{
		{
			name:      "nonexistent VK_DRIVER_FILES",
			opts:      []Option{WithEnv(driverEnv("VK_DRIVER_FILES=/nonexistent/icd.json", "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL))},
			kind:      ReasonIncompatibleDriver,
			fragments: []string{"VK_ERROR_INCOMPATIBLE_DRIVER", "VK_DRIVER_FILES=/nonexistent/icd.json", "/nonexistent/icd.json"},
		},
		{
			name:      "manifest names a missing library",
			opts:      []Option{WithEnv(driverEnv("VK_DRIVER_FILES="+badICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL))},
			kind:      ReasonIncompatibleDriver,
			fragments: []string{badICD, "/nonexistent/libvulkan_x.so", "No such file"},
		},
		{
			// VK_DRIVER_FILES unset: the reason lists each manifest found
			// in the search directories and what became of it; search
			// directories that do not exist are not findings.
			name: "default search",
			opts: []Option{WithEnv(driverEnv("HOME="+dir, "XDG_CONFIG_DIRS="+dir+"/absent-config", "XDG_DATA_DIRS="+dir+"/data:"+dir+"/absent-data", "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL))},
			kind: ReasonIncompatibleDriver,
			fragments: []string{"VK_DRIVER_FILES unset", "2 driver manifest(s) found",
				"manifest " + dir + "/data/vulkan/icd.d/broken_icd.json names library \"/nonexistent/libvulkan_x.so\", which failed to load",
				"manifest " + dir + "/data/vulkan/icd.d/fake_icd.json: library \"" + fakeICD + "\" opens"},
			absent: []string{"absent-config/vulkan/icd.d:", "absent-data/vulkan/icd.d:", dir + "/.config/vulkan/icd.d:"},
		},
		{
			name:      "wrong loader path",
			opts:      []Option{WithVulkanLoader("/nonexistent/libvulkan.so.1")},
			kind:      ReasonLoaderNotFound,
			fragments: []string{`"/nonexistent/libvulkan.so.1"`, "cannot open shared object file"},
			libErr:    true,
		},
		{
			name:      "timeout far shorter than the probe",
			opts:      []Option{WithTimeout(time.Millisecond), WithRequireEGL(false)},
			kind:      ReasonTimeout,
			fragments: []string{"vulkan probe", "did not finish within 1ms"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runProbe(t, simulatedInventory(), append([]Option{WithAllowCPUAdapter(true)}, tc.opts...)...)
			wantReason(t, r, tc.kind, tc.fragments...)
			for _, a := range tc.absent {
				if strings.Contains(r.Reasons[0].Message, a) {
					t.Errorf("reason %q lists %q, an absent search directory, as a finding", r.Reasons[0].Message, a)
				}
			}
			err := r.Err()
			if !errors.Is(err, ErrFailed) || errors.Is(err, ErrLibraryNotFound) != tc.libErr {
				t.Errorf("Err() = %v: want ErrFailed, ErrLibraryNotFound %v", err, tc.libErr)
			}
		})
	}
}

func TestEGLLibraryMissing(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	for _, require := range []bool{true, false} {
		r := runProbe(t, simulatedInventory(), WithAllowCPUAdapter(true), WithEGLLibrary("/nonexistent/libEGL.so.1"), WithRequireEGL(require))
		if !require {
			if !r.Passed || len(r.Warnings) == 0 || !strings.Contains(strings.Join(r.Warnings, " "), "/nonexistent/libEGL.so.1") {
				t.Errorf("EGL not required: passed %v warnings %q, want a pass with a warning naming the library", r.Passed, r.Warnings)
			}
			continue
		}
		wantReason(t, r, ReasonEGLNotFound, "/nonexistent/libEGL.so.1")
		if r.Vulkan.Stage != "" || !r.Matches[0].Vulkan {
			t.Errorf("Vulkan should still pass on its own: %+v", r.Matches[0])
		}
	}
}

func TestChildFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		script    string
		timeout   time.Duration
		kind      ReasonKind
		fragments []string
	}{
		{"crash", `kill -SEGV $$`, 10 * time.Second, ReasonCrashed, []string{"SIGSEGV"}},
		{"abort", `echo "driver: assertion failed" >&2; kill -ABRT $$`, 10 * time.Second, ReasonCrashed, []string{"SIGABRT", "assertion failed"}},
		{"not JSON", `echo hello`, 10 * time.Second, ReasonBadOutput, []string{"without printing a report", "hello"}},
		{"exit status", `exit 7`, 10 * time.Second, ReasonBadOutput, []string{"status 7"}},
		{"bad report", `echo 'report vulkan {"loader":1}' >&3`, 10 * time.Second, ReasonBadOutput, []string{"printed a bad report"}},
		// A report forged on stdout (a driver printing) is output, not
		// the report: only the private pipe carries it.
		{"forged report", `echo 'nodeprep-probe-report: {"loader":"l","adapters":[]}'; echo 'report vulkan {"loader":"l","adapters":[]}'`, 10 * time.Second, ReasonBadOutput, []string{"without printing a report", "nodeprep-probe-report"}},
		// Closing stdout early is not a crash, and the child is not
		// killed for it: it reports later.
		{"stdout closed early", `exec 1>&- 2>&-; sleep 0.2; echo 'report vulkan {"loader":"l","adapters":[]}' >&3; echo 'report egl {"library":"l","devices":[]}' >&3`, 10 * time.Second, ReasonNoAdapters, nil},
		// The report counts when the child then hangs in driver teardown
		// (it is killed after the grace period).
		{"report then hang", `echo 'report vulkan {"loader":"l","adapters":[]}' >&3; echo 'report egl {"library":"l","devices":[]}' >&3; exec sleep 60`, 10 * time.Second, ReasonNoAdapters, nil},
		// A hung driver that started a helper: the whole group is killed
		// and Run returns promptly.
		{"hang", `sleep 60 & sleep 60`, 300 * time.Millisecond, ReasonTimeout, []string{"did not finish within 300ms"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			r, err := Run(context.Background(), realInventory(),
				WithCommand("/bin/sh", "-c", tc.script, "probe"),
				WithEnv(driverEnv()), WithTimeout(tc.timeout), WithRequireEGL(false))
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > tc.timeout+5*time.Second {
				t.Errorf("Run took %v with a %v timeout: the child's group was not killed", d, tc.timeout)
			}
			if len(r.Reasons) != 1 || r.Reasons[0].Kind != tc.kind {
				t.Fatalf("reasons %+v, want one %s", r.Reasons, tc.kind)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(r.Reasons[0].Message, f) {
					t.Errorf("reason %q does not contain %q", r.Reasons[0].Message, f)
				}
			}
		})
	}
}

func TestRunNeedsCommand(t *testing.T) {
	t.Parallel()
	if _, err := Run(context.Background(), realInventory()); !errors.Is(err, ErrNoCommand) {
		t.Fatalf("Run without WithCommand: %v, want ErrNoCommand", err)
	}
}

func TestServeProbeBadRequest(t *testing.T) {
	t.Parallel()
	for _, req := range []string{``, `{`, `{"api":"metal","library":"x"}`, `{"api":"vulkan","library":"x","extra":1}`} {
		if err := ServeProbe(req, &strings.Builder{}); !errors.Is(err, ErrBadRequest) {
			t.Errorf("ServeProbe(%q) = %v, want ErrBadRequest", req, err)
		}
	}
}

// TestCancelledIsNotTimeout: the context ending (SIGTERM) during a probe
// is reported as cancelled, not as a timeout.
func TestCancelledIsNotTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	r, err := Run(ctx, realInventory(), WithCommand("/bin/sh", "-c", "exec sleep 60", "probe"), WithEnv(driverEnv()), WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Reasons) != 2 || r.Reasons[0].Kind != ReasonCancelled || r.Reasons[1].Kind != ReasonCancelled {
		t.Fatalf("reasons %+v, want cancelled for both probes", r.Reasons)
	}
}

// BenchmarkRunStandIn times the whole probe stage of `selftest --simulate
// dgx-h200 --allow-cpu-adapter`: eight simulated GPUs, the Vulkan and EGL
// probes' child and the CUDA child (this test binary, see TestMain) on
// lavapipe and Mesa EGL,
// with a warm shader cache, and the evaluation. Besides ns/op it reports,
// per run, the medians' raw material the speed notes use (docs/faults.md,
// "Self-test speed"): vkCreateInstance and eglInitialize, where loading
// LLVM shows, and the CPU time of the children and the test process
// together (cpu-ms/op). Whole processes against vulkaninfo and wgpu are
// scripts/bench-selftest.sh.
func BenchmarkRunStandIn(b *testing.B) {
	testkit.Mesa(b)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	inv := &gpu.Inventory{Simulated: true, Server: "dgx-h200"}
	for i := range 8 {
		inv.GPUs = append(inv.GPUs, gpu.GPU{Index: i, UUID: fmt.Sprintf("GPU-aaaaaaaa-0000-0000-0000-%012d", i), Name: "NVIDIA H200"})
	}
	noCUDA := false
	opts := []Option{
		WithCommand(exe),
		WithEnv(driverEnv("VK_DRIVER_FILES="+lavapipeICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL)),
		WithTimeout(60 * time.Second),
		WithAllowCPUAdapter(true),
		WithShaderCacheDir(b.TempDir()),
		WithCUDA(DefaultCUDALibrary, &noCUDA),
	}
	run := func() *Report {
		r, err := Run(context.Background(), inv, opts...)
		if err != nil {
			b.Fatalf("Run: %v", err)
		}
		if !r.Passed {
			b.Fatalf("the self-test failed: %+v", r.Reasons)
		}
		return r
	}
	run() // fills the shader cache, as every run after the first boot finds it
	var instance, eglInit float64
	before := cpuTime(b)
	b.ResetTimer()
	for range b.N {
		r := run()
		instance += r.Vulkan.InstanceMS
		for _, d := range r.EGL.Devices {
			eglInit += d.InitMS
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric((cpuTime(b)-before).Seconds()*1000/n, "cpu-ms/op")
	b.ReportMetric(instance/n, "vk-instance-ms/op")
	b.ReportMetric(eglInit/n, "egl-init-ms/op")
}

// cpuTime is the user and system time of this process and of its waited-for
// children so far (getrusage RUSAGE_SELF + RUSAGE_CHILDREN).
func cpuTime(b *testing.B) time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}
