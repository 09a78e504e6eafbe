package selftest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestDriverFaults runs the real probes against fake drivers built here
// from C (nodeprep/testenv/fakedriver): a Vulkan ICD and an EGL vendor library
// that hang, abort, segfault, flood stderr with 1 GiB, start a daemon in
// its own session, or print the NVIDIA driver's own complaint. The other
// API gets its Mesa driver, and a simulated inventory with CPU stand-ins,
// so exactly one reason is the fake's.
func TestDriverFaults(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	icdLib, icdManifest, eglLib, eglManifest := fakeICD.Lib, fakeICD.Manifest, fakeEGL.Lib, fakeEGL.Manifest
	type want struct {
		kind      ReasonKind
		fragments []string
	}
	tests := []struct {
		fault    string
		vulkan   want
		egl      want
		warning  string // a warning that must be there
		lingered bool   // whether a daemon had to be killed
	}{
		{"hang", want{ReasonTimeout, []string{"did not finish within 2s"}}, want{ReasonTimeout, []string{"did not finish within 2s"}}, "", false},
		{"abort", want{ReasonCrashed, []string{"crashed: SIGABRT in " + icdLib, "assertion"}}, want{ReasonCrashed, []string{"crashed: SIGABRT in " + eglLib, "assertion"}}, "", false},
		{"segv", want{ReasonCrashed, []string{"crashed: SIGSEGV in " + icdLib}}, want{ReasonCrashed, []string{"crashed: SIGSEGV in " + eglLib}}, "", false},
		{"flood", want{ReasonIncompatibleDriver, []string{"flooded 1024 MiB"}}, want{ReasonEGLNoDevices, []string{"flooded 1024 MiB"}}, "", false},
		// The loader opens the ICD (and so starts the daemon) once per
		// call that scans the drivers: wgpu's instance creation lists the
		// instance extensions first, so the count depends on the loader.
		{"daemon", want{ReasonIncompatibleDriver, []string{"started a helper daemon"}}, want{ReasonEGLNoDevices, []string{"started a helper daemon"}}, "process(es) running after the probe", true},
		{"message", want{ReasonIncompatibleDriver, []string{"unable to open libnvidia-glvkspirv.so.999"}}, want{ReasonEGLNoDevices, []string{"unable to open libnvidia-glvkspirv.so.999"}}, "", false},
	}
	for _, tc := range tests {
		for _, api := range []API{APIVulkan, APIEGL} {
			t.Run(tc.fault+"/"+string(api), func(t *testing.T) {
				t.Parallel()
				mark := make([]byte, 8)
				_, _ = rand.Read(mark)
				marker := "FAKE_MARK=" + hex.EncodeToString(mark)
				icd, egl, w := icdManifest, mesaEGL, tc.vulkan
				if api == APIEGL {
					icd, egl, w = lavapipeICD, eglManifest, tc.egl
				}
				exe, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				// Only the hang is meant to meet the bound; the other faults
				// end by themselves, and a 1 GiB flood on a loaded 2-core
				// machine can take longer than the hang's 2 s.
				timeout := time.Minute
				if tc.fault == "hang" {
					timeout = 2 * time.Second
				}
				r, err := Run(context.Background(), simulatedInventory(),
					WithCommand(exe),
					WithEnv(driverEnv("VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl, "FAKE_FAULT="+tc.fault, marker)),
					WithTimeout(timeout), WithAllowCPUAdapter(true))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("reasons %v warnings %q", r.Reasons, r.Warnings)
				if len(r.Reasons) != 1 || r.Reasons[0].Kind != w.kind {
					t.Fatalf("reasons %+v, want one %s", r.Reasons, w.kind)
				}
				for _, f := range w.fragments {
					if !strings.Contains(r.Reasons[0].Message, f) {
						t.Errorf("reason %q does not contain %q", r.Reasons[0].Message, f)
					}
				}
				if len(r.Reasons[0].Message) > 8<<10 {
					t.Errorf("reason is %d bytes: the child's output is not bounded", len(r.Reasons[0].Message))
				}
				warned := slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.Contains(s, tc.warning) })
				if tc.warning != "" && !warned {
					t.Errorf("warnings %q, want one saying %q", r.Warnings, tc.warning)
				}
				if left := testkit.ProcessesWith(marker); len(left) > 0 {
					t.Errorf("processes %v of the probe outlived it", left)
				}
			})
		}
	}
}

// TestDurationEndsWithTheChildren: a caller of Start does other work while
// the children run (up plans, then writes the CDI spec) and may call Wait
// long after they have ended; the report's DurationMS is the children's
// time and the evaluation, not that work. The fakes crash at once.
func TestDurationEndsWithTheChildren(t *testing.T) {
	t.Parallel()
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	icd, egl := fakeICD.Manifest, fakeEGL.Manifest
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), WithCommand(exe),
		WithEnv(driverEnv("VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl, "FAKE_FAULT=segv")),
		WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the crashing probes did not end") // a hang guard
	}
	time.Sleep(300 * time.Millisecond) // the caller's other work
	before := ms(time.Since(p.start))  // Wait is called this long after Start
	r, err := p.Wait(simulatedInventory())
	if err != nil {
		t.Fatal(err)
	}
	if r.DurationMS >= before {
		t.Errorf("durationMs %.1f counts the caller's work after the children ended (Wait called %.1f ms after Start)", r.DurationMS, before)
	}
	if r.DurationMS <= 0 {
		t.Errorf("durationMs %.1f, want the children's time", r.DurationMS)
	}
}
