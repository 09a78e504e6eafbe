package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// pluginSpec is where the NVIDIA device plugin (cdi-* strategies) writes
// its spec, and the spec it writes: the generator's edits, one device per
// GPU, no graphics mounts (testdata/hosts/plugin-kind).
const pluginSpec = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"

// watchPass is one line of `cdi watch -o json`.
type watchPass struct {
	Trigger []string `json:"trigger"`
	Wrote   []string `json:"wrote"`
	Ready   *bool    `json:"ready"`
	Verdict string   `json:"verdict"`
	Latency float64  `json:"latencyMs"`
	Err     string   `json:"error"`
	Initial bool     `json:"initial"`
}

// startWatch starts `nodeprep cdi watch -o json` on root and returns its
// passes as they come; the watch is stopped with SIGTERM at cleanup and
// must exit 0.
func startWatch(t *testing.T, root string, args ...string) <-chan watchPass {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t), append([]string{"cdi", "watch", "--root", root, "-o", "json"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	passes := make(chan watchPass, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(passes)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var p watchPass
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				t.Errorf("cdi watch printed %q: %v", sc.Text(), err)
				continue
			}
			passes <- p
		}
		io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if err := cmd.Wait(); err != nil {
			t.Errorf("cdi watch after SIGTERM: %v\n%s", err, stderr.String())
		}
	})
	return passes
}

// nextPass waits for the next pass that matches ok.
func nextPass(t *testing.T, passes <-chan watchPass, what string, ok func(watchPass) bool) watchPass {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case p, open := <-passes:
			if !open {
				t.Fatalf("cdi watch ended before %s", what)
			}
			if ok(p) {
				return p
			}
		case <-timeout:
			t.Fatalf("no pass %s within 20 s", what)
		}
	}
}

// writeAtomic writes a spec as the device plugin and the CDI library do:
// a temporary file in the same directory, renamed over the name.
func writeAtomic(t *testing.T, dst string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(dst), ".spec-123.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func hasGraphicsMounts(t *testing.T, root, spec string) bool {
	t.Helper()
	h, _ := hostfs.New(root)
	_, s, err := cdi.Load(h, spec)
	if err != nil {
		return false
	}
	for _, m := range s.ContainerEdits.Mounts {
		if m.ContainerPath == "/usr/share/glvnd/egl_vendor.d/10_nvidia.json" {
			return true
		}
	}
	return false
}

// TestWatchRepatchesAfterUp: after `up`, the device plugin writes its spec
// (no graphics mounts); nobody runs nodeprep by hand, and `cdi watch` (the
// path unit's trigger as one process) patches it, keeps the node ready,
// and rewrites status.json and the metrics. Then the plugin's spec is
// replaced by one in the read-only store: the node turns not ready naming
// it.
func TestWatchRepatchesAfterUp(t *testing.T) {
	icd, egl := lavapipe(t)
	root := hostCopy(t, "nixos-h200")
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	if r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", "/run/nodeprep/nodeprep.prom"); r.code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	passes := startWatch(t, root, "--metrics-file", "/run/nodeprep/nodeprep.prom")
	first := nextPass(t, passes, "at start", func(p watchPass) bool { return p.Initial })
	if first.Ready == nil || !*first.Ready || len(first.Wrote) != 0 {
		t.Fatalf("initial pass = %+v, want ready and nothing written (up patched everything)", first)
	}

	// The device plugin's pod starts and writes its spec.
	plugin, err := os.ReadFile(filepath.Join(testkit.Testdata(t, "hosts", "plugin-kind"), "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(root, "run/cdi/k8s.device-plugin.nvidia.com-gpu.json")
	writeAtomic(t, specFile, plugin)
	p := nextPass(t, passes, "re-patching the plugin's spec", func(p watchPass) bool { return len(p.Wrote) > 0 })
	if len(p.Wrote) != 1 || p.Wrote[0] != pluginSpec || p.Ready == nil || !*p.Ready {
		t.Errorf("pass = %+v, want the plugin's spec written and the node ready", p)
	}
	if !hasGraphicsMounts(t, root, pluginSpec) {
		t.Fatalf("%s was not patched", pluginSpec)
	}
	s := readStatus(t, root)
	if !s.Ready || s.Verdict != "ready" {
		t.Errorf("status after the re-patch = %+v", s)
	}
	var full map[string]any
	data, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
	json.Unmarshal(data, &full)
	if full["command"] != "cdi patch" || !strings.Contains(string(data), pluginSpec) {
		t.Errorf("status.json is not the re-patch's report naming %s:\n%.600s", pluginSpec, data)
	}

	// The plugin's spec now comes from the read-only store (a link from
	// /etc/cdi, as environment.etc makes): it cannot be patched.
	os.Remove(specFile)
	linkStorePluginSpec(t, root)
	p = nextPass(t, passes, "turning the node not ready", func(p watchPass) bool { return p.Ready != nil && !*p.Ready })
	if !strings.Contains(p.Verdict, "/etc/cdi/k8s.device-plugin.nvidia.com-gpu.json") {
		t.Errorf("verdict %q does not name the unpatchable spec", p.Verdict)
	}
	if s := readStatus(t, root); s.Ready || !strings.Contains(s.Verdict, "unpatchable-spec") {
		t.Errorf("status = %+v, want not ready with unpatchable-spec", s)
	}
	prom, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/nodeprep.prom"))
	if !strings.Contains(string(prom), "nodeprep_ready 0") || !strings.Contains(string(prom), `nodeprep_stage_ok{stage="cdi"} 0`) {
		t.Errorf("metrics after the unpatchable spec:\n%s", prom)
	}
}

// TestWatchConvergesUnderAWriterLoop: a writer that rewrites its spec every
// 100 ms (a crash-looping device plugin) and nodeprep never fight: every
// rewrite is patched again, nodeprep's own writes start no pass, and once
// the writer stops the spec on disk is patched and the watch goes quiet.
func TestWatchConvergesUnderAWriterLoop(t *testing.T) {
	icd, egl := lavapipe(t)
	root := hostCopy(t, "nixos-h200")
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	if r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter"); r.code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	passes := startWatch(t, root)
	nextPass(t, passes, "at start", func(p watchPass) bool { return p.Initial })
	plugin, err := os.ReadFile(filepath.Join(testkit.Testdata(t, "hosts", "plugin-kind"), "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(root, "run/cdi/k8s.device-plugin.nvidia.com-gpu.json")
	const rewrites = 20
	for range rewrites {
		writeAtomic(t, specFile, plugin)
		time.Sleep(100 * time.Millisecond)
	}
	// The last rewrite is patched; after it nothing more happens.
	var wrote int
	var latencies []float64
	deadline := time.After(20 * time.Second)
	for !hasGraphicsMounts(t, root, pluginSpec) {
		select {
		case p := <-passes:
			if len(p.Wrote) > 0 {
				wrote++
				latencies = append(latencies, p.Latency)
			}
		case <-deadline:
			t.Fatal("the last rewrite was never patched")
		case <-time.After(50 * time.Millisecond):
		}
	}
	quiet := time.After(time.Second)
	for done := false; !done; {
		select {
		case p := <-passes:
			if len(p.Wrote) > 0 {
				wrote++
				latencies = append(latencies, p.Latency)
				if wrote > rewrites {
					t.Fatalf("pass %d wrote %v after the writer stopped: nodeprep is fighting its own writes", wrote, p.Wrote)
				}
			}
		case <-quiet:
			done = true
		}
	}
	if wrote == 0 || wrote > rewrites {
		t.Errorf("%d passes wrote the spec for %d rewrites", wrote, rewrites)
	}
	if !hasGraphicsMounts(t, root, pluginSpec) {
		t.Error("the spec on disk is not patched after the writer stopped")
	}
	t.Logf("%d rewrites every 100 ms → %d re-patches, writer's rename → patched spec: %v ms", rewrites, wrote, latencies)
}

// linkStorePluginSpec gives root the device plugin's spec from the
// read-only store, as the plugin-kind-store tree has it: the store path
// copied in and /etc/cdi/k8s.device-plugin.nvidia.com-gpu.json a link
// into it (as environment.etc makes), which nodeprep cannot patch.
func linkStorePluginSpec(t *testing.T, root string) {
	t.Helper()
	store := "nix/store/6e7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c-nvidia-device-plugin-cdi"
	if out, err := exec.Command("cp", "-a", filepath.Join(testkit.Testdata(t, "hosts", "plugin-kind-store"), store), filepath.Join(root, "nix/store/")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../"+store+"/k8s.device-plugin.nvidia.com-gpu.json", filepath.Join(root, "etc/cdi/k8s.device-plugin.nvidia.com-gpu.json")); err != nil {
		t.Fatal(err)
	}
}

// upForWatch copies nixos-h200, runs `up` on it with the metrics file
// and returns the root: a node the watch keeps current.
func upForWatch(t *testing.T) string {
	t.Helper()
	icd, egl := lavapipe(t)
	root := hostCopy(t, "nixos-h200")
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	if r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", "/run/nodeprep/nodeprep.prom"); r.code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	return root
}

// TestWatchRepatchesWhenTheLockIsFreed: the device plugin rewrites its spec
// while another nodeprep (health, up) holds the lock, taken here with the
// lock code nodeprep uses. With the config's "wait: 0s" (the documented
// default file) and no --wait, the pass waits for the lock (cdi watch's own
// default, 30 s); with --wait 0 it fails and is run again. Either way the
// spec is patched once the lock is freed and the status says so.
func TestWatchRepatchesWhenTheLockIsFreed(t *testing.T) {
	plugin, err := os.ReadFile(filepath.Join(testkit.Testdata(t, "hosts", "plugin-kind"), "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		failed bool // a pass fails while the lock is held
	}{
		{"the config's wait: 0s and no --wait", nil, false},
		{"--wait 0", []string{"--wait", "0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := upForWatch(t)
			if err := os.MkdirAll(filepath.Join(root, "etc/nodeprep"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "etc/nodeprep/config.yaml"), []byte("up:\n  metricsFile: /run/nodeprep/nodeprep.prom\nwait: 0s\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			passes := startWatch(t, root, tc.args...)
			nextPass(t, passes, "at start", func(p watchPass) bool { return p.Initial })

			host, err := hostfs.New(root)
			if err != nil {
				t.Fatal(err)
			}
			unlock, err := host.Lock(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			writeAtomic(t, filepath.Join(root, "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"), plugin)
			if tc.failed {
				p := nextPass(t, passes, "failing on the held lock", func(p watchPass) bool { return p.Err != "" })
				if !strings.Contains(p.Err, "held by another nodeprep") {
					t.Errorf("the pass under the lock failed with %q", p.Err)
				}
			} else {
				time.Sleep(300 * time.Millisecond) // the pass waits for the lock meanwhile
			}
			if hasGraphicsMounts(t, root, pluginSpec) {
				t.Fatal("the spec was patched while the lock was held")
			}
			if err := unlock(); err != nil {
				t.Fatal(err)
			}
			p := nextPass(t, passes, "re-patching once the lock is freed", func(p watchPass) bool { return len(p.Wrote) > 0 })
			if !slices.Contains(p.Wrote, pluginSpec) || p.Ready == nil || !*p.Ready {
				t.Errorf("pass = %+v, want the plugin's spec written and the node ready", p)
			}
			if !hasGraphicsMounts(t, root, pluginSpec) {
				t.Errorf("%s is not patched", pluginSpec)
			}
			data, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
			if s := readStatus(t, root); !s.Ready || !strings.Contains(string(data), pluginSpec) || !strings.Contains(string(data), `"command": "cdi patch"`) {
				t.Errorf("status.json is not the re-patch's report naming %s:\n%.600s", pluginSpec, data)
			}
		})
	}
}

// TestWatchSpecDeleted: the spec `up` patched is removed after boot: the
// watch turns status.json and nodeprep_ready not ready at once, naming
// the spec, and ready again when the generator writes it back.
func TestWatchSpecDeleted(t *testing.T) {
	root := upForWatch(t)
	passes := startWatch(t, root, "--metrics-file", "/run/nodeprep/nodeprep.prom")
	nextPass(t, passes, "at start", func(p watchPass) bool { return p.Initial })
	spec := filepath.Join(root, "run/cdi/nvidia-container-toolkit.json")
	saved, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(spec); err != nil {
		t.Fatal(err)
	}
	p := nextPass(t, passes, "turning the node not ready", func(p watchPass) bool { return p.Ready != nil && !*p.Ready })
	if !strings.Contains(p.Verdict, "/var/run/cdi/nvidia-container-toolkit.json") {
		t.Errorf("verdict %q does not name the spec", p.Verdict)
	}
	if s := readStatus(t, root); s.Ready || !strings.Contains(s.Verdict, "nvidia-container-toolkit.json") {
		t.Errorf("status = %+v, want not ready naming the spec", s)
	}
	prom, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/nodeprep.prom"))
	if !strings.Contains(string(prom), "nodeprep_ready 0") {
		t.Errorf("metrics with the spec gone:\n%s", prom)
	}
	writeAtomic(t, spec, saved)
	nextPass(t, passes, "ready again", func(p watchPass) bool { return p.Ready != nil && *p.Ready })
	if s := readStatus(t, root); !s.Ready {
		t.Errorf("status with the spec back = %+v", s)
	}
}

// TestWatchInotifyLimits: cdi watch run where inotify's limits are used
// up exits 69 naming the limit, its sysctl and value, and the fix. The
// limits are lowered in a user namespace of the watch's own
// (user.max_inotify_instances and user.max_inotify_watches are per user
// namespace and bound its processes as the host's fs.inotify.* do), so
// the host's limits are not touched.
func TestWatchInotifyLimits(t *testing.T) {
	bin := testkit.Binary(t)
	root := hostCopy(t, "nixos-h200")
	for _, tc := range []struct {
		sysctl string // the user namespace's limit set to 0
		want   string
	}{
		{"max_inotify_instances", "fs.inotify.max_user_instances is "},
		{"max_inotify_watches", "fs.inotify.max_user_watches is "},
	} {
		t.Run(tc.sysctl, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", "echo 0 > /proc/sys/user/"+tc.sysctl+" && exec \"$@\"", "sh", bin, "cdi", "watch", "--root", root)
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Skipf("no user namespace to lower the limit in: %v", err)
			}
			if ee.ExitCode() != 69 || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "sysctl -w") || !strings.Contains(stderr.String(), "user."+tc.sysctl+", this user namespace's own limit, is 0") || !strings.Contains(stderr.String(), "sysctl -w user."+tc.sysctl) {
				t.Errorf("exit %d, want 69 naming %q, its value and the fix; stderr:\n%s", ee.ExitCode(), tc.want, stderr.String())
			}
		})
	}
}
