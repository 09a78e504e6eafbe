package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gofrs/flock"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestHealth: after up, health keeps nodeprep_ready current: ready while
// the GPUs the node booted with work, 0 when they are gone, and a skipped
// run (exit 0, nothing written) while another nodeprep holds the lock.
func TestHealth(t *testing.T) {
	root, env, prom := upReady(t)
	spec := filepath.Join(root, "var/run/cdi/nvidia-container-toolkit.json")
	specBefore, _ := os.ReadFile(spec)

	r := run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 0 || !strings.Contains(r.stdout, "✓ inventory") || !strings.Contains(r.stdout, "✓ selftest") {
		t.Fatalf("health: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var s struct {
		Command      string   `json:"command"`
		Ready        bool     `json:"ready"`
		ExpectedGPUs []string `json:"expectedGPUs"`
		Stages       []struct{ Name string }
	}
	data, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.Command != "health" || !s.Ready || len(s.ExpectedGPUs) != 8 || len(s.Stages) != 3 || s.Stages[1].Name != "cdi" {
		t.Errorf("status after health = %+v", s)
	}
	if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), "nodeprep_ready 1") {
		t.Errorf("metrics after a healthy run:\n%s", m)
	}
	if after, _ := os.ReadFile(spec); string(after) != string(specBefore) {
		t.Error("health changed the CDI spec up had patched")
	}

	// Another server's GPUs: the eight the node booted with are gone.
	r = run(t, env, "health", "--root", root, "--simulate", "dgx-a100", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 1 || !strings.Contains(r.stdout, "missing or unhealthy") {
		t.Fatalf("health with lost GPUs: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), "nodeprep_ready 0") {
		t.Errorf("metrics after lost GPUs:\n%s", m)
	}

	// A held lock (up or another health running): skipped, nothing rewritten.
	fl := flock.New(filepath.Join(root, "run/nodeprep/lock"))
	if ok, err := fl.TryLock(); !ok || err != nil {
		t.Fatalf("taking the lock: %v", err)
	}
	defer fl.Unlock()
	before, _ := os.ReadFile(filepath.Join(root, prom))
	r = run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 0 || !strings.Contains(r.stdout, "skipped") {
		t.Fatalf("health under a held lock: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(root, prom)); string(after) != string(before) {
		t.Error("a skipped health run rewrote the metrics")
	}
}

// TestHealthUnreadableBaseline: a status file health cannot read (torn, or
// expectedGPUs of the wrong type) has lost the GPUs the node booted with:
// health is not ready, writes nodeprep_ready 0, and keeps the file as it
// is instead of making today's GPUs the new baseline.
func TestHealthUnreadableBaseline(t *testing.T) {
	icd, egl := lavapipe(t)
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	for _, status := range []string{`{"ready": tr`, `{"expectedGPUs": 10}`, `{}`, `null`, `{"ready": true, "expectedGPUs": []}`} {
		root := hostCopy(t, "nixos-h200")
		prom := "/run/nodeprep/nodeprep.prom"
		file := filepath.Join(root, "run/nodeprep/status.json")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
		if r.code != 1 || !strings.Contains(r.stdout, "run nodeprep up to record them again") {
			t.Errorf("%s: exit %d, want 1 naming the lost baseline\n%s%s", status, r.code, r.stdout, r.stderr)
		}
		if after, _ := os.ReadFile(file); string(after) != status {
			t.Errorf("%s: health rewrote the status file: %s", status, after)
		}
		if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), "nodeprep_ready 0") {
			t.Errorf("%s: metrics:\n%s", status, m)
		}
	}
}

// TestHealthAfterBlockedUp: health does not undo up's verdict: after an up
// that left the node not ready (a spec it could not patch), health is not
// ready either, and stays so from report to report.
func TestHealthAfterBlockedUp(t *testing.T) {
	icd, egl := lavapipe(t)
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	root := hostCopy(t, "broken-no-icd")
	prom := "/run/nodeprep/m.prom"
	if r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom); r.code != 1 {
		t.Fatalf("up on broken-no-icd: exit %d, want 1\n%s", r.code, r.stdout)
	}
	for i := 0; i < 2; i++ {
		r := run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
		if r.code != 1 || !strings.Contains(r.stdout, "the last nodeprep up left the node not ready") {
			t.Errorf("health run %d after a blocked up: exit %d, want 1\n%s%s", i+1, r.code, r.stdout, r.stderr)
		}
		if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), "nodeprep_ready 0") {
			t.Errorf("health run %d: metrics:\n%s", i+1, m)
		}
	}
	// Without any status file (no up this boot) health is not ready.
	root = hostCopy(t, "nixos-h200")
	r := run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 1 || !strings.Contains(r.stdout, "no nodeprep up has written a status since boot") {
		t.Errorf("health with no status file: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestHealthRechecksThePodPath: health judges every spec in the runtime's
// view, not only NVML and the probes. The device plugin writes its spec
// after boot without graphics mounts: health patches it and the node stays
// ready. Then the plugin's spec comes from the read-only store: health
// cannot patch it, and status.json and nodeprep_ready turn false naming it.
func TestHealthRechecksThePodPath(t *testing.T) {
	root, env, prom := upReady(t)
	plugin, err := os.ReadFile(filepath.Join(testkit.Testdata(t, "hosts", "plugin-kind"), "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(root, "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"), plugin)
	r := run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 0 || !hasGraphicsMounts(t, root, pluginSpec) {
		t.Fatalf("health after the plugin wrote its spec: exit %d, patched %v\n%s\n%s", r.code, hasGraphicsMounts(t, root, pluginSpec), r.stdout, r.stderr)
	}

	os.Remove(filepath.Join(root, "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"))
	linkStorePluginSpec(t, root)
	r = run(t, env, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 1 || !strings.Contains(r.stdout, "/etc/cdi/k8s.device-plugin.nvidia.com-gpu.json") {
		t.Fatalf("health with an unpatchable plugin spec: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if s := readStatus(t, root); s.Ready || !strings.Contains(s.Verdict, "unpatchable-spec") {
		t.Errorf("status = %+v", s)
	}
	if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), "nodeprep_ready 0") {
		t.Errorf("metrics:\n%s", m)
	}
}

// upReady runs up on a copy of nixos-h200 with the simulated dgx-h200 and
// Mesa's drivers, as the boot would, and fails t unless it says ready. It
// returns the host root, the drivers' environment and the metrics file.
func upReady(t *testing.T) (root string, env []string, prom string) {
	t.Helper()
	icd, egl := lavapipe(t)
	env = []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	root = hostCopy(t, "nixos-h200")
	prom = "/run/nodeprep/nodeprep.prom"
	if r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom); r.code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	return root, env, prom
}

// TestFabricNotRegistered (issue 28): a DGX whose fabric manager has not
// registered the GPUs (every CUDA call fails with 802 while NVML looks
// healthy) is not ready: up refuses it with the fabric reason and the fix,
// and health on a node that booted ready turns nodeprep_ready to 0 when the
// registration regresses. A server without a fabric (PCIe) is fine.
func TestFabricNotRegistered(t *testing.T) {
	icd, egl := lavapipe(t)
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	for fault, want := range map[string]string{
		"fabric-not-started": "NVLink fabric registration not started",
		"fabric-in-progress": "NVLink fabric registration in progress",
		"fabric-error":       "NVLink fabric registration completed with error",
		"fabric-degraded":    "NVLink fabric degraded",
	} {
		root := hostCopy(t, "nixos-h200")
		r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200+"+fault, "--allow-cpu-adapter")
		if r.code != 1 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "not ready") || !strings.Contains(r.stdout, "hardware.nvidia.datacenter.enable") {
			t.Errorf("up with %s: exit %d, want 1 naming %q and the fix\n%s\n%s", fault, r.code, want, r.stdout, r.stderr)
		}
	}
	root := hostCopy(t, "nixos-h200")
	if r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200+fabric-not-supported", "--allow-cpu-adapter"); r.code != 0 {
		t.Errorf("up with no fabric (PCIe): exit %d, want ready\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	root, env, prom := upReady(t)
	r := run(t, env, "health", "--root", root, "--simulate", "dgx-h200+fabric-not-started", "--allow-cpu-adapter", "--metrics-file", prom)
	if r.code != 1 || !strings.Contains(r.stdout, "NVLink fabric registration not started") {
		t.Fatalf("health after the fabric regressed: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), "nodeprep_ready 0") {
		t.Errorf("metrics after the fabric regressed:\n%s", m)
	}
	data, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
	var s struct {
		Ready     bool `json:"ready"`
		Inventory struct {
			GPUs []struct {
				Fabric struct{ State string } `json:"fabric"`
				Health struct{ Reasons []string }
			} `json:"gpus"`
		} `json:"inventory"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.Ready || len(s.Inventory.GPUs) != 8 || s.Inventory.GPUs[0].Fabric.State != "not-started" || len(s.Inventory.GPUs[0].Health.Reasons) == 0 {
		t.Errorf("status.json after the fabric regressed: %s", data)
	}
}
