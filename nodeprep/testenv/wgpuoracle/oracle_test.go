package wgpuoracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// Bounds of one run. wgpu has no bound of its own: on a hanging ICD it
// hangs for ever, so every oracle run is killed at oracleTimeout.
const (
	probeTimeout  = "15s"            // nodeprep selftest --timeout: a bound, generous for a loaded machine
	oracleTimeout = 20 * time.Second // one Deno run
	runLimit      = 90 * time.Second // one nodeprep run, all of it
)

// fixture is what every condition builds on: the real stand-ins and the
// fake drivers, built once.
type fixture struct {
	dir      string             // shared, read-only once built
	lvpICD   string             // Mesa's lavapipe manifest
	lvpLib   string             // the library it names
	mesaEGL  string             // Mesa's EGL vendor manifest
	mesaLib  string             // the library it names
	icd, egl testkit.FakeDriver // the fake ICD and EGL vendor (fakedriver: fault alone, or wrapping Mesa)
	nvml     string             // libnvidia-ml.so.1 reporting the simulated dgx-h200
}

// condition is one row of the corpus: what it changes (env, added to the
// stand-ins' VK_DRIVER_FILES and __EGL_VENDOR_LIBRARY_FILENAMES for both
// programs) and nodeprep's extra flags.
type condition struct {
	name string
	what string
	// setup returns the environment (KEY=value, later wins) and
	// nodeprep's extra flags; dir is the condition's own directory.
	setup func(t *testing.T, f *fixture, dir string) (env, flags []string)
	// realInventory runs nodeprep on the fake NVML's inventory (no
	// --simulate, so no CPU adapter may stand in), as on a real node.
	realInventory bool
	// pending names the wgpu rule by which nodeprep and wgpu disagree on
	// this condition until the self-test applies it; the test fails
	// when the row agrees and the mark is left (remove it).
	pending string
}

func env(kv ...string) func(*testing.T, *fixture, string) ([]string, []string) {
	return func(*testing.T, *fixture, string) ([]string, []string) { return kv, nil }
}

// wrapped is lavapipe through the fake ICD with the changes faults list
// (fakedriver.WrapICD).
func wrapped(faults ...string) func(*testing.T, *fixture, string) ([]string, []string) {
	return func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return append([]string{"VK_DRIVER_FILES=" + f.icd.Manifest}, fakedriver.WrapICD(f.lvpLib, faults...)...), nil
	}
}

// manifest writes an ICD manifest (or EGL vendor manifest) with body into
// dir and returns its path.
func manifest(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// corpus is the host's conditions: the (queue family 0 without
// graphics, API 1.0 with and without the extensions, conformance 0, GLES
// 2.0, a crash on wgpu's instance) and the faults of docs/faults.md.
var corpus = []condition{
	{name: "lavapipe", what: "lavapipe and Mesa EGL as they are", setup: env()},
	{name: "qf0-compute-only", what: "queue family 0 computes but does not draw (graphics is family 1)", setup: wrapped("queue-family-0-compute")},
	{name: "api-1.0", what: "apiVersion 1.0 with VK_KHR_storage_buffer_storage_class and VK_KHR_maintenance1", setup: wrapped("api-1.0")},
	{name: "api-1.0-no-storage-class", what: "apiVersion 1.0 without VK_KHR_storage_buffer_storage_class", setup: wrapped("api-1.0", "hide:VK_KHR_storage_buffer_storage_class")},
	{name: "api-1.0-no-maintenance1", what: "apiVersion 1.0 without VK_KHR_maintenance1 (or AMD's negative viewport)", setup: wrapped("api-1.0", "hide:VK_KHR_maintenance1", "hide:VK_AMD_negative_viewport_height")},
	{name: "api-1.0-no-extensions", what: "apiVersion 1.0 without either extension", setup: wrapped("api-1.0", "hide:VK_KHR_storage_buffer_storage_class", "hide:VK_KHR_maintenance1", "hide:VK_AMD_negative_viewport_height")},
	{name: "conformance-0", what: "driver conformance version 0.0.0.0", setup: wrapped("conformance-0")},
	{name: "crash-on-wgpu-instance", what: "the ICD dies (SIGSEGV) in vkCreateInstance for Vulkan 1.3 or wgpu's instance extensions", setup: wrapped("crash-on-wgpu-instance")},
	{name: "manifest-api-1.0", what: "lavapipe's ICD manifest says api_version 1.0.0", setup: func(t *testing.T, f *fixture, dir string) ([]string, []string) {
		m := manifest(t, dir, "lvp-1.0.json", fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q,"api_version":"1.0.0"}}`, f.lvpLib))
		return []string{"VK_DRIVER_FILES=" + m}, nil
	}},
	// Mesa's override limits OpenGL ES alone: desktop OpenGL 3.3, which
	// wgpu's GL backend takes first, is still there.
	{name: "gles-override-2.0", what: "Mesa with MESA_GLES_VERSION_OVERRIDE=2.0 (desktop OpenGL still offered)", setup: env("MESA_GLES_VERSION_OVERRIDE=2.0")},
	{name: "gles-2-only", what: "an EGL driver offering OpenGL ES 2.0 alone (Mesa through the fake EGL vendor: no desktop OpenGL, no 3.x context)", setup: func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return append([]string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + f.egl.Manifest}, fakedriver.WrapEGL(f.mesaLib, "gles-2-only")...), nil
	}},
	{name: "icd-manifest-missing", what: "VK_DRIVER_FILES names no file", setup: func(_ *testing.T, _ *fixture, dir string) ([]string, []string) {
		return []string{"VK_DRIVER_FILES=" + filepath.Join(dir, "absent.json")}, nil
	}},
	{name: "icd-manifest-broken", what: "the ICD manifest is not JSON", setup: func(t *testing.T, _ *fixture, dir string) ([]string, []string) {
		return []string{"VK_DRIVER_FILES=" + manifest(t, dir, "broken.json", `{"file_format_version":"1.0.0","ICD":{"library_path":`)}, nil
	}},
	{name: "icd-library-missing", what: "the ICD manifest names a library that is not there", setup: func(t *testing.T, _ *fixture, dir string) ([]string, []string) {
		m := manifest(t, dir, "nvidia_icd.json", fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q,"api_version":"1.3.0"}}`, filepath.Join(dir, "absent", "libGLX_nvidia.so.0")))
		return []string{"VK_DRIVER_FILES=" + m}, nil
	}},
	{name: "icd-library-broken", what: "the ICD library is not an ELF object", setup: func(t *testing.T, _ *fixture, dir string) ([]string, []string) {
		lib := manifest(t, dir, "libGLX_nvidia.so.0", "not an ELF object\n")
		m := manifest(t, dir, "nvidia_icd.json", fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q,"api_version":"1.3.0"}}`, lib))
		return []string{"VK_DRIVER_FILES=" + m}, nil
	}},
	{name: "icd-refuses", what: "the ICD refuses the loader's interface", setup: func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return []string{"VK_DRIVER_FILES=" + f.icd.Manifest}, nil
	}},
	{name: "icd-crash", what: "the ICD dies of SIGSEGV when the loader negotiates", setup: func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return []string{"VK_DRIVER_FILES=" + f.icd.Manifest, "FAKE_FAULT=segv"}, nil
	}},
	{name: "icd-hang", what: "the ICD never returns from the loader's negotiation", setup: func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return []string{"VK_DRIVER_FILES=" + f.icd.Manifest, "FAKE_FAULT=hang"}, nil
	}},
	{name: "cpu-only", what: "a real inventory (fake NVML, 8 GPUs) whose only adapters are lavapipe and Mesa's llvmpipe", setup: env(), realInventory: true},
	{name: "egl-vendor-missing", what: "__EGL_VENDOR_LIBRARY_FILENAMES names no file (requireEGL: true)", setup: func(_ *testing.T, _ *fixture, dir string) ([]string, []string) {
		return []string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + filepath.Join(dir, "absent.json")}, nil
	}},
	{name: "egl-vendor-missing-optional", what: "the same with --require-egl=false", setup: func(_ *testing.T, _ *fixture, dir string) ([]string, []string) {
		return []string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + filepath.Join(dir, "absent.json")}, []string{"--require-egl=false"}
	}},
	{name: "egl-vendor-library-missing", what: "the EGL vendor manifest names a library that is not there", setup: func(t *testing.T, _ *fixture, dir string) ([]string, []string) {
		m := manifest(t, dir, "10_nvidia.json", fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q}}`, filepath.Join(dir, "absent", "libEGL_nvidia.so.0")))
		return []string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + m}, nil
	}},
	{name: "egl-vendor-refuses", what: "the EGL vendor library refuses glvnd (__egl_Main returns false)", setup: func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return []string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + f.egl.Manifest}, nil
	}},
	{name: "egl-vendor-crash", what: "the EGL vendor library dies of SIGSEGV when glvnd loads it", setup: func(_ *testing.T, f *fixture, _ string) ([]string, []string) {
		return []string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + f.egl.Manifest, "FAKE_FAULT=segv"}, nil
	}},
	// wgpu's GL backend tries libEGL.so when libEGL.so.1 fails to load
	// (the khronos-egl crate); libEGL.so is the development link, which a
	// node or an image has not: both are broken here.
	{name: "glvnd-broken", what: "glvnd's libEGL.so.1 (and libEGL.so) found first (LD_LIBRARY_PATH) is not an ELF object", setup: func(t *testing.T, _ *fixture, dir string) ([]string, []string) {
		manifest(t, dir, "libEGL.so.1", "not an ELF object\n")
		manifest(t, dir, "libEGL.so", "not an ELF object\n")
		return []string{"LD_LIBRARY_PATH=" + dir}, nil
	}},
	{name: "nothing", what: "neither a Vulkan ICD nor an EGL vendor", setup: func(_ *testing.T, _ *fixture, dir string) ([]string, []string) {
		return []string{"VK_DRIVER_FILES=" + filepath.Join(dir, "absent.json"), "__EGL_VENDOR_LIBRARY_FILENAMES=" + filepath.Join(dir, "absent.json")}, nil
	}},
}

// cleanEnv is this process's environment without what selects drivers:
// each condition sets its own.
func cleanEnv() []string {
	drop := []string{"VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "VK_LOADER_DRIVERS_SELECT", "VK_LOADER_DRIVERS_DISABLE",
		"__EGL_VENDOR_LIBRARY_FILENAMES", "__EGL_VENDOR_LIBRARY_DIRS", "EGL_PLATFORM", "DENO_WEBGPU_BACKEND", "DENO_DIR",
		"FAKE_ICD_WRAP", "FAKE_VK_FAULT", "FAKE_EGL_WRAP", "FAKE_EGL_FAULT", "FAKE_FAULT", "MESA_GLES_VERSION_OVERRIDE", "MESA_GL_VERSION_OVERRIDE", "LD_LIBRARY_PATH", "LD_PRELOAD"}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			out = append(out, kv)
		}
	}
	return out
}

// npVerdict is what `nodeprep selftest -o json` said: ready or not, the
// reasons' kinds, and whether every GPU got Vulkan and EGL.
type npVerdict struct {
	Passed      bool
	Vulkan, EGL bool
	Kinds       []string
}

func (v npVerdict) String() string {
	mark := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "✗"
	}
	s := "ready"
	if !v.Passed {
		s = "not ready: " + strings.Join(v.Kinds, ", ")
	}
	return fmt.Sprintf("%s (Vulkan %s, EGL %s)", s, mark(v.Vulkan), mark(v.EGL))
}

// parseSelftest reads selftest -o json (the report's JSON names).
func parseSelftest(out []byte) (npVerdict, error) {
	var r struct {
		Passed  bool `json:"passed"`
		Reasons []struct {
			Kind string `json:"kind"`
		} `json:"reasons"`
		Matches []struct {
			Vulkan bool `json:"vulkan"`
			EGL    bool `json:"egl"`
		} `json:"matches"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return npVerdict{}, err
	}
	v := npVerdict{Passed: r.Passed, Vulkan: len(r.Matches) > 0, EGL: len(r.Matches) > 0}
	for _, m := range r.Matches {
		v.Vulkan = v.Vulkan && m.Vulkan
		v.EGL = v.EGL && m.EGL
	}
	for _, k := range r.Reasons {
		if !slices.Contains(v.Kinds, k.Kind) {
			v.Kinds = append(v.Kinds, k.Kind)
		}
	}
	return v, nil
}

// wgVerdict is what the wgpu program got on one backend.
type wgVerdict struct {
	OK       bool   // an adapter, a device and a verified dispatch
	Stage    string // the first step that failed (probe.js), "" when OK
	Adapter  string // the adapter's description, first word
	Fallback bool   // wgpu says it is a fallback (CPU) adapter
	Crash    string // the signal that killed Deno
	Hung     bool   // killed at oracleTimeout
	Exit     int    // Deno's exit status when it printed no report
	Panic    bool   // Deno said it panicked (a Rust panic in wgpu)
	NoStart  bool   // the container runtime could not start the container
	Detail   string // the error the program or Deno printed
}

func (v wgVerdict) String() string {
	switch {
	case v.Hung:
		return fmt.Sprintf("hung (killed after %d s)", int(oracleTimeout.Seconds()))
	case v.Crash != "":
		return "crashed (" + v.Crash + ")"
	case v.NoStart:
		return fmt.Sprintf("container not started (runc exit %d)", v.Exit)
	case v.Panic:
		return fmt.Sprintf("panicked (exit %d)", v.Exit)
	case v.Exit != 0:
		return fmt.Sprintf("exited %d", v.Exit)
	case v.OK:
		kind := "GPU"
		if v.Fallback {
			kind = "CPU"
		}
		return fmt.Sprintf("ok: %s (%s)", v.Adapter, kind)
	case v.Stage == "adapter":
		return "no adapter"
	default:
		return v.Stage + " failed"
	}
}

// runOracle runs probe.js under Deno with env, on backend (DENO_WEBGPU_BACKEND;
// "" leaves it unset: wgpu's default, every backend), killing Deno's
// process group at oracleTimeout.
func runOracle(t *testing.T, deno, probe string, env []string, backend string) wgVerdict {
	t.Helper()
	cmd := exec.Command(deno, "run", "--quiet", "--no-config", "--no-lock", "--allow-env=DENO_WEBGPU_BACKEND", probe)
	cmd.Env = append(slices.Clone(env), "DENO_DIR="+t.TempDir(), "XDG_RUNTIME_DIR="+t.TempDir())
	if backend != "" {
		cmd.Env = append(cmd.Env, "DENO_WEBGPU_BACKEND="+backend)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	var mu sync.Mutex
	hung := false
	timer := time.AfterFunc(oracleTimeout, func() {
		mu.Lock()
		hung = true
		mu.Unlock()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	err := cmd.Wait()
	timer.Stop()
	mu.Lock()
	defer mu.Unlock()
	if hung {
		return wgVerdict{Hung: true, Stage: "hang"}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return wgVerdict{Crash: signalName(ws.Signal()), Stage: "crash", Detail: tail(stderr.String())}
		}
	} else if err != nil {
		t.Fatalf("running %s: %v", cmd.Path, err)
	}
	var line string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(l, reportPrefix) {
			line = l
		}
	}
	return verdict(t, line, stderr.String(), cmd.ProcessState.ExitCode())
}

// reportPrefix starts the wgpu program's report line.
const reportPrefix = `{"backend"`

// verdict reads the wgpu program's report line ("" when it printed none:
// then Deno's exit status, 128+signal for a container killed by one, and
// stderr say what happened).
func verdict(t *testing.T, line, stderr string, code int) wgVerdict {
	t.Helper()
	if line == "" {
		if code > 128 && code < 128+65 {
			return wgVerdict{Crash: signalName(syscall.Signal(code - 128)), Stage: "crash", Detail: tail(stderr)}
		}
		v := wgVerdict{Exit: code, Stage: "exit", Detail: tail(stderr)}
		if _, after, ok := strings.Cut(stderr, " panicked at "); ok {
			v.Panic = true
			v.Detail = "panicked at " + tail(after)
		}
		v.NoStart = strings.Contains(stderr, "runc run failed")
		return v
	}
	var r struct {
		Stage   string `json:"stage"`
		Error   string `json:"error"`
		Adapter *struct {
			Description       string `json:"description"`
			IsFallbackAdapter bool   `json:"isFallbackAdapter"`
		} `json:"adapter"`
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("the wgpu program's report %q: %v", line, err)
	}
	v := wgVerdict{OK: r.Stage == "", Stage: r.Stage, Detail: r.Error}
	if r.Adapter != nil {
		v.Adapter, _, _ = strings.Cut(r.Adapter.Description, " ")
		v.Fallback = r.Adapter.IsFallbackAdapter
	}
	return v
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGBUS:
		return "SIGBUS"
	}
	return fmt.Sprintf("signal %d", int(s))
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	return s
}

// row is one line of the agreement table.
type row struct {
	cond        condition
	where       string
	np          npVerdict
	vk, gl, def wgVerdict
	outcome     string
	unexplained string // why the row fails the test ("" when it does not)
}

// classify compares nodeprep's verdict with wgpu's, backend by backend
// (nodeprep's Vulkan with wgpu's Vulkan backend, its EGL with wgpu's GL
// backend), then as a whole (ready against the default program getting
// an adapter). A disagreement is explained only by a documented policy
// (docs/wgpu-oracle.md) or the condition's pending wgpu rule.
func classify(r *row, requireEGL bool) {
	var differ []string
	if r.np.Vulkan != r.vk.OK {
		differ = append(differ, "Vulkan")
	}
	if r.np.EGL != r.gl.OK {
		differ = append(differ, "GL")
	}
	cpuTaken := (r.np.Vulkan || !r.vk.OK || r.vk.Fallback) && (r.np.EGL || !r.gl.OK || r.gl.Fallback)
	switch {
	case len(differ) > 0 && r.cond.realInventory && !r.np.Passed && cpuTaken:
		r.outcome = "policy: a CPU adapter never counts for a GPU"
	case len(differ) > 0 && r.cond.pending != "":
		r.outcome = "**disagree** (" + strings.Join(differ, ", ") + "), pending: " + r.cond.pending
	case len(differ) > 0:
		r.outcome = "**DISAGREE** (" + strings.Join(differ, ", ") + ")"
		r.unexplained = "nodeprep and wgpu disagree on " + strings.Join(differ, " and ") + " and no policy explains it"
	case r.cond.pending != "":
		r.outcome = "agree"
		r.unexplained = "nodeprep now agrees with wgpu here: remove the pending mark (" + r.cond.pending + ") and rerun with -update"
	case r.np.Passed == r.def.OK:
		r.outcome = "agree"
	case !r.np.Passed && r.np.Vulkan && !r.np.EGL && requireEGL:
		r.outcome = "agree; policy: requireEGL"
	case !r.np.Passed && !r.vk.OK && r.def.OK && r.def.Fallback:
		r.outcome = "agree; policy: no silent CPU fallback"
	default:
		r.outcome = "**DISAGREE** (ready)"
		r.unexplained = fmt.Sprintf("nodeprep says %s, wgpu's default program %s", r.np, r.def)
	}
	switch {
	case r.np.Vulkan:
	case r.vk.Hung || r.def.Hung:
		r.outcome += "; wgpu hangs, nodeprep names it"
	case r.vk.Crash != "" || r.def.Crash != "" || r.vk.Panic || r.def.Panic:
		r.outcome += "; wgpu dies, nodeprep names it"
	}
}

// TestRealWgpuOracle runs every condition of the corpus through
// `nodeprep selftest` and through the wgpu program under Deno (its Vulkan
// backend, its GL backend, its default backends), on the host, and fails
// on a disagreement no documented policy explains; the table it makes is
// docs/wgpu-oracle.md's (-update rewrites it).
func TestRealWgpuOracle(t *testing.T) {
	deno := upstream.Tool(t, upstream.Deno, "deno")
	icd, egl := testkit.Mesa(t)
	nodeprep := testkit.Binary(t)
	probe := testkit.Testdata(t, "wgpu-oracle", "probe.js")
	f := &fixture{dir: t.TempDir(), lvpICD: icd, mesaEGL: egl}
	f.lvpLib, f.mesaLib = icdLibrary(t, icd), icdLibrary(t, egl)
	var err error
	f.icd, f.egl = testkit.FakeDrivers(t)
	if f.nvml, _, err = fakedriver.Build(t.TempDir(), fakedriver.NVMLDGXH200); err != nil {
		t.Fatal(err)
	}

	rows := make([]*row, len(corpus))
	t.Run("host", func(t *testing.T) {
		for i, c := range corpus {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				extra, flags := c.setup(t, f, dir)
				env := append(cleanEnv(), "VK_DRIVER_FILES="+f.lvpICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+f.mesaEGL)
				env = append(env, extra...)
				r := &row{cond: c, where: "host"}
				r.np = runSelftest(t, nodeprep, f, c, env, flags)
				r.vk = runOracle(t, deno, probe, env, "vulkan")
				r.gl = runOracle(t, deno, probe, env, "gl")
				r.def = runOracle(t, deno, probe, env, "")
				classify(r, !slices.Contains(flags, "--require-egl=false"))
				logRow(t, r)
				rows[i] = r
			})
		}
	})
	var ctrRows []*row
	t.Run("container", func(t *testing.T) {
		ctrRows = runContainerRows(t, nodeprep, deno, probe, f)
	})
	rows = append(rows, ctrRows...)
	if len(ctrRows) == 0 || slices.Contains(rows, nil) {
		return // a condition could not run: its failure or skip says why
	}
	updateTable(t, rows)
}

// logRow logs r's verdicts and fails the test when r is unexplained.
func logRow(t *testing.T, r *row) {
	t.Helper()
	t.Logf("nodeprep: %s; wgpu: Vulkan %s, GL %s, default %s: %s", r.np, r.vk, r.gl, r.def, r.outcome)
	for _, v := range []wgVerdict{r.vk, r.gl, r.def} {
		if v.Detail != "" {
			t.Logf("wgpu said: %s", v.Detail)
		}
	}
	if r.unexplained != "" {
		t.Errorf("%s (%s): %s", r.cond.name, r.where, r.unexplained)
	}
}

// icdLibrary returns the library path an ICD manifest (or an EGL vendor
// manifest, the same shape) names.
func icdLibrary(t *testing.T, manifest string) string {
	t.Helper()
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		ICD struct {
			LibraryPath string `json:"library_path"`
		} `json:"ICD"`
	}
	if err := json.Unmarshal(data, &m); err != nil || m.ICD.LibraryPath == "" {
		t.Fatalf("%s names no library (%v)", manifest, err)
	}
	return m.ICD.LibraryPath
}

// runSelftest runs `nodeprep selftest -o json` with env: on the simulated
// dgx-h200 with a CPU adapter allowed to stand in, or, for a real
// inventory, on the fake NVML's.
func runSelftest(t *testing.T, nodeprep string, f *fixture, c condition, env, flags []string) npVerdict {
	t.Helper()
	args := []string{"--root", t.TempDir(), "selftest", "-o", "json", "--timeout", probeTimeout}
	if c.realInventory {
		args = append(args, "--nvml-lib", f.nvml)
	} else {
		args = append(args, "--simulate", "dgx-h200", "--allow-cpu-adapter")
	}
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeprep, append(args, flags...)...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ctx.Err() != nil) {
		t.Fatalf("nodeprep %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	v, perr := parseSelftest(out)
	if perr != nil {
		t.Fatalf("nodeprep %s (%v) printed no report: %v\n%s\n%s", strings.Join(args, " "), err, perr, out, stderr.String())
	}
	return v
}

const (
	tableBegin = "<!-- wgpu-oracle:begin -->"
	tableEnd   = "<!-- wgpu-oracle:end -->"
)

// updateTable compares the table between docs/wgpu-oracle.md's markers
// with rows, or rewrites it with -update.
func updateTable(t *testing.T, rows []*row) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| condition | where | nodeprep | wgpu Vulkan | wgpu GL | wgpu default | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s`: %s | %s | %s | %s | %s | %s | %s |\n", r.cond.name, r.cond.what, r.where, r.np, r.vk, r.gl, r.def, r.outcome)
	}
	p := filepath.Join(testkit.RepoRoot(t), "docs", "wgpu-oracle.md")
	doc, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok1 := strings.Cut(string(doc), tableBegin+"\n")
	_, foot, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers %s and %s", p, tableBegin, tableEnd)
	}
	got := head + tableBegin + "\n" + b.String() + tableEnd + foot
	if *testkit.Update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != string(doc) {
		t.Errorf("docs/wgpu-oracle.md's table differs from this run (rerun with -update to rewrite it):\n%s", b.String())
	}
}
