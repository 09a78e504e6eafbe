package container

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// The lavapipe host tree is generated at test time (it must hold the real
// lavapipe library, which is not committed). It is a NixOS-like host whose
// "driver" is Mesa's lavapipe:
//
//	/nix/store/<h>-mesa-lvp/lib/libvulkan_lvp.so             copy of the host's lavapipe
//	/nix/store/<h>-mesa-lvp/share/vulkan/icd.d/nvidia_icd.<machine>.json
//	                                                          names that library by store path
//	/run/opengl-driver -> /nix/store/<h>-mesa-lvp             (absolute link, as on NixOS)
//	/var/run -> /run
//	/run/cdi/nvidia-container-toolkit.json                    the generated spec: no ICD mount
//
// The manifest is called nvidia_icd so that `cdi patch` discovery, which
// looks for NVIDIA's manifest names only, picks it up. The spec names one
// device per GPU of the simulated dgx-h200 by UUID plus "all", each with no
// device node and an env edit, and top-level env edits: before the patch a
// container has no Vulkan driver at all, after it lavapipe arrives through
// the spec's mounts, as the NVIDIA driver does.
const lvpStore = "/nix/store/0lvp1mesa2lavapipe3stand4in5nvidia6-mesa-lvp"

// lavapipeHost builds the tree under a temporary root for inv's GPUs;
// layout flags are the script's (--buildenv, --companion).
func lavapipeHost(t *testing.T, inv *gpu.Inventory, layout ...string) *hostfs.Root {
	t.Helper()
	root := t.TempDir()
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	testkit.LavapipeHost(t, root, uuids, layout...)
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return host
}

func patch(t *testing.T, host *hostfs.Root) {
	t.Helper()
	res, err := cdi.PatchFile(host, cdi.FileOptions{
		Spec:     cdi.DefaultSpecPath,
		Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: runtime.GOARCH},
	}, false)
	if err != nil {
		t.Fatalf("cdi.PatchFile: %v", err)
	}
	if !res.Written {
		t.Fatalf("cdi.PatchFile wrote nothing: changes %v, findings %v", res.Changes, res.Findings)
	}
}

// requireContainers skips the test when no container can run here: no OCI
// runtime, no test rootfs (make rootfs; NODEPREP_TEST_ROOTFS), or not root
// (the root's overlay and the runtime need it). It returns the rootfs.
func requireContainers(t *testing.T) string {
	t.Helper()
	if _, err := FindRuntime(""); err != nil {
		t.Skipf("no OCI runtime: %v (apt-get install runc)", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the in-container self-test needs root (overlay mount, runc)")
	}
	rootfs := os.Getenv("NODEPREP_TEST_ROOTFS")
	if rootfs == "" {
		rootfs = filepath.Join("..", "..", "..", ".cache", "rootfs")
	}
	abs, err := filepath.Abs(rootfs)
	if err == nil {
		_, err = os.Stat(filepath.Join(abs, ".nodeprep-rootfs"))
	}
	if err != nil {
		t.Skipf("no test rootfs at %s (%v): run `make rootfs` (scripts/make-test-rootfs.sh) or set NODEPREP_TEST_ROOTFS", rootfs, err)
	}
	return abs
}

// testOptions runs this test binary as the probe (TestMain) with lavapipe
// allowed to stand in; EGL is optional because the tree's "driver" has no
// EGL vendor.
func testOptions(t *testing.T, rootfs string) Options {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Binary:          exe,
		ProbeArgs:       []string{probeArg},
		Rootfs:          rootfs,
		Timeout:         60 * time.Second,
		EGLOptional:     true,
		AllowCPUAdapter: true,
		WorkDir:         t.TempDir(),
		Log:             slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func run(t *testing.T, host *hostfs.Root, inv *gpu.Inventory, o Options) *Report {
	t.Helper()
	rep, err := Run(context.Background(), host, inv, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertCleanedUp(t, o.WorkDir)
	return rep
}

// assertCleanedUp fails when anything is left in the work directory or
// mounted under it.
func assertCleanedUp(t *testing.T, work string) {
	t.Helper()
	if entries, err := os.ReadDir(work); err != nil || len(entries) > 0 {
		t.Errorf("work directory %s not cleaned up: %v %v", work, entries, err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(mi, []byte(work)) {
		t.Errorf("mounts left under %s", work)
	}
}

func kinds(rs []selftest.Reason) []selftest.ReasonKind {
	var out []selftest.ReasonKind
	for _, r := range rs {
		out = append(out, r.Kind)
	}
	return out
}

func wantOnly(t *testing.T, rep *Report, kind selftest.ReasonKind, fragments ...string) {
	t.Helper()
	if rep.Passed || len(rep.Reasons) == 0 {
		t.Fatalf("passed, want a %s failure", kind)
	}
	for _, r := range rep.Reasons {
		if r.Kind != kind {
			t.Fatalf("reasons %v, want only %s: %+v", kinds(rep.Reasons), kind, rep.Reasons)
		}
		for _, f := range fragments {
			if !strings.Contains(r.Message, f) {
				t.Errorf("reason %q lacks %q", r.Message, f)
			}
		}
	}
}

// TestLavapipeThroughPatchedSpec is the end-to-end proof: the same probe in
// the same kind of container has no Vulkan driver before `cdi patch` and
// finds lavapipe, with a verified dispatch, after it.
func TestLavapipeThroughPatchedSpec(t *testing.T) {
	rootfs := requireContainers(t)
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	host := lavapipeHost(t, inv)
	o := testOptions(t, rootfs)

	start := time.Now()
	before := run(t, host, inv, o)
	t.Logf("before the patch: %.0f ms", float64(time.Since(start).Milliseconds()))
	wantOnly(t, before, selftest.ReasonIncompatibleDriver, "VK_ERROR_INCOMPATIBLE_DRIVER")
	if n := len(before.Containers); n != 1 || len(before.Containers[0].Devices) != len(inv.GPUs) {
		t.Fatalf("containers %+v, want one with %d devices", before.Containers, len(inv.GPUs))
	}
	if vk := before.Containers[0].Selftest.Vulkan; vk.Stage != selftest.StageInstance || len(vk.Adapters) != 0 {
		t.Errorf("before the patch the loader got to %q with %d adapters, want %s and none", vk.Stage, len(vk.Adapters), selftest.StageInstance)
	}
	if err := before.Err(); !errors.Is(err, fault.ErrCheckFailed) || !errors.Is(err, ErrFailed) {
		t.Errorf("Err() = %v, want ErrFailed marked CheckFailed", err)
	}

	patch(t, host)

	start = time.Now()
	after := run(t, host, inv, o)
	t.Logf("after the patch: %.0f ms", float64(time.Since(start).Milliseconds()))
	if !after.Passed {
		t.Fatalf("after the patch: reasons %+v", after.Reasons)
	}
	st := after.Containers[0].Selftest
	if !st.StandIn {
		t.Errorf("StandIn false: lavapipe must stand in for the simulated GPUs")
	}
	i := slices.IndexFunc(st.Vulkan.Adapters, func(a selftest.Adapter) bool {
		return a.Vendor == selftest.VendorMesa && a.DeviceType == selftest.DeviceCPU
	})
	if i < 0 {
		t.Fatalf("no lavapipe adapter in the container: %+v", st.Vulkan.Adapters)
	}
	if d := st.Vulkan.Adapters[i].Dispatch; d == nil || !d.Verified {
		t.Errorf("lavapipe's dispatch did not verify: %+v", d)
	}
	for _, m := range st.Matches {
		if !m.Vulkan || !m.StandIn {
			t.Errorf("GPU %d not served by the stand-in: %+v", m.GPU, m)
		}
	}
	if after.Err() != nil {
		t.Errorf("Err() = %v after a pass", after.Err())
	}

	t.Run("per GPU", func(t *testing.T) {
		two := *inv
		two.GPUs = inv.GPUs[:2]
		o := o
		o.PerGPU, o.WorkDir = true, t.TempDir()
		rep := run(t, host, &two, o)
		if !rep.Passed || len(rep.Containers) != 2 {
			t.Fatalf("passed %v, %d containers, reasons %+v; want 2 passing", rep.Passed, len(rep.Containers), rep.Reasons)
		}
		for i, c := range rep.Containers {
			if want := []string{DefaultKind + "=" + two.GPUs[i].UUID}; !slices.Equal(c.Devices, want) {
				t.Errorf("container %d devices %v, want %v", i, c.Devices, want)
			}
		}
	})

	t.Run("unresolvable device", func(t *testing.T) {
		other := *inv
		other.GPUs = []gpu.GPU{{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Name: "NVIDIA H200"}}
		o := o
		o.WorkDir = t.TempDir()
		rep := run(t, host, &other, o)
		wantOnly(t, rep, ReasonCDIUnresolvable, "unresolvable CDI devices nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000")
		if !errors.Is(rep.Err(), fault.ErrCheckFailed) {
			t.Errorf("Err() = %v, want CheckFailed", rep.Err())
		}
	})

	t.Run("mount source missing", func(t *testing.T) {
		lib, err := host.Path(lvpStore + "/lib/libvulkan_lvp.so")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(lib, lib+".gone"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(lib+".gone", lib)
		o := o
		o.WorkDir = t.TempDir()
		rep := run(t, host, inv, o)
		wantOnly(t, rep, ReasonMountSourceMissing, lvpStore+"/lib/libvulkan_lvp.so")
	})

	t.Run("runtime missing", func(t *testing.T) {
		o := o
		o.Runtime, o.WorkDir = "/nonexistent/runc", t.TempDir()
		rep := run(t, host, inv, o)
		wantOnly(t, rep, ReasonRuntimeMissing, "/nonexistent/runc")
		if !errors.Is(rep.Err(), fault.ErrUnavailable) {
			t.Errorf("Err() = %v, want Unavailable", rep.Err())
		}
	})

	t.Run("timeout", func(t *testing.T) {
		o := o
		o.ProbeArgs, o.Timeout, o.WorkDir = []string{hangArg}, 2*time.Second, t.TempDir()
		start := time.Now()
		rep := run(t, host, inv, o)
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("a hung probe took %s, want about the 2s timeout", d)
		}
		wantOnly(t, rep, selftest.ReasonTimeout, "did not finish within 2s")
		assertNoContainers(t, o)
	})

	// Cancelling the context (nodeprep turns SIGTERM and SIGINT into that)
	// kills the containers and removes everything, mounts included.
	t.Run("cancelled", func(t *testing.T) {
		o := o
		o.ProbeArgs, o.Timeout, o.WorkDir = []string{hangArg}, 30*time.Second, t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		rep, err := Run(ctx, host, inv, o)
		if err == nil && rep.Passed {
			t.Fatal("a cancelled self-test passed")
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("cancellation took %s", d)
		}
		assertCleanedUp(t, o.WorkDir)
		assertNoContainers(t, o)
	})

	t.Run("crash", func(t *testing.T) {
		o := o
		o.ProbeArgs, o.WorkDir = []string{crashArg}, t.TempDir()
		rep := run(t, host, inv, o)
		wantOnly(t, rep, selftest.ReasonCrashed, "SIGSEGV")
	})
}

// assertNoContainers fails when a probe container of this process is still
// known to runc's default state directory or running: Run keeps its state
// in the work directory, so only a leak would show up as a process.
func assertNoContainers(t *testing.T, o Options) {
	t.Helper()
	out, _ := exec.Command("pgrep", "-f", probeArg+"|"+hangArg).Output()
	for _, pid := range strings.Fields(string(out)) {
		if pid != "" {
			cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			if bytes.Contains(cmdline, []byte(BinaryPath)) {
				t.Errorf("probe process %s still running: %q", pid, cmdline)
			}
		}
	}
}

// TestLavapipeRuntimeView: the kinds only the container's own file view
// shows fail inside the container before `cdi patch` (with the loader's
// own words in the reason), are named by `cdi check`, and pass after the
// patch: an ICD library reached through a directory mount whose entry links
// into an unmounted store path, and a Vulkan driver library whose DT_NEEDED
// libraries the spec does not mount.
func TestLavapipeRuntimeView(t *testing.T) {
	rootfs := requireContainers(t)
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs = inv.GPUs[:1]
	tests := []struct {
		layout string
		code   string // cdi check's finding before the patch
		said   string // in the failing reason: the loader's or driver's stderr
	}{
		{layout: "--buildenv", code: cdi.CodeDanglingInContainer, said: "libvulkan_lvp.so"},
		{layout: "--companion", code: cdi.CodeMissingDriverLibrary, said: "libvulkan_lvp.so: cannot open shared object file"},
	}
	for _, tt := range tests {
		t.Run(tt.layout, func(t *testing.T) {
			host := lavapipeHost(t, inv, tt.layout)
			opts := cdi.FileOptions{Spec: cdi.DefaultSpecPath, Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: runtime.GOARCH}}
			check, err := cdi.CheckFile(host, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(check.Findings, func(f cdi.Finding) bool { return f.Code == tt.code && f.Severity == cdi.SeverityError }) {
				t.Errorf("cdi check before the patch lacks %s: %v", tt.code, check.Findings)
			}
			o := testOptions(t, rootfs)
			o.ProbeArgs = []string{saysArg}
			before := run(t, host, inv, o)
			if before.Passed {
				t.Fatal("passed before the patch")
			}
			var all []string
			for _, r := range before.Reasons {
				all = append(all, r.Message)
			}
			for _, said := range []string{tt.said, "the Vulkan loader and driver said: " + driverSays} {
				if !strings.Contains(strings.Join(all, "\n"), said) {
					t.Errorf("the reasons do not carry the loader's or driver's words (%q):\n%s", said, strings.Join(all, "\n"))
				}
			}
			patch(t, host)
			o.WorkDir = t.TempDir()
			after := run(t, host, inv, o)
			if !after.Passed {
				t.Fatalf("after the patch: reasons %+v", after.Reasons)
			}
		})
	}
}
