package main_test

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// The end-to-end tests run the built binary the way `make demo` does, with
// Mesa's lavapipe and Mesa EGL standing in for the NVIDIA driver, and check
// every file it writes.

func lavapipe(t *testing.T) (icd, egl string) {
	t.Helper()
	m, _ := filepath.Glob("/usr/share/vulkan/icd.d/lvp_icd.*.json")
	egl = "/usr/share/glvnd/egl_vendor.d/50_mesa.json"
	if len(m) == 0 {
		t.Fatal("Mesa's lavapipe is not installed (make deps installs mesa-vulkan-drivers)")
	}
	if _, err := os.Stat(egl); err != nil {
		t.Fatal("Mesa EGL is not installed (make deps installs libegl-mesa0)")
	}
	return m[0], egl
}

func hostCopy(t *testing.T, scenario string) string {
	t.Helper()
	return testkit.HostCopy(t, scenario)
}

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(testkit.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

type status struct {
	Ready   bool   `json:"ready"`
	Tainted bool   `json:"tainted"`
	Verdict string `json:"verdict"`
	Stages  []struct {
		Name, Status string
	} `json:"stages"`
}

func readStatus(t *testing.T, root string) status {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s status
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func effective(t *testing.T, root string) *k3s.Effective {
	t.Helper()
	h, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := k3s.ReadFiles(h, k3s.DefaultConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := k3s.Merge(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// registration is what the kubelet registers the Node with from the
// effective k3s configuration under root: the labels (base plus every
// node-label) and the taints as Node taint objects (key, value, effect).
func registration(t *testing.T, root string, base map[string]string) (map[string]string, []map[string]string) {
	t.Helper()
	eff := effective(t, root)
	for _, e := range eff.NodeLabels {
		l, err := k3s.ParseLabel(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		base[l.Key] = l.Value
	}
	var taints []map[string]string
	for _, e := range eff.NodeTaints {
		tn, err := k3s.ParseTaint(e.Value)
		if err != nil {
			t.Fatal(err)
		}
		taints = append(taints, map[string]string{"key": tn.Key, "value": tn.Value, "effect": string(tn.Effect)})
	}
	return base, taints
}

const dropIn = "etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml"

// notifySocket listens where systemd would (NOTIFY_SOCKET) and returns the
// socket's path and a function that returns the messages received.
func notifySocket(t *testing.T) (string, func() []string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p, func() []string {
		var msgs []string
		buf := make([]byte, 4096)
		for {
			conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := conn.Read(buf)
			if err != nil {
				return msgs
			}
			msgs = append(msgs, string(buf[:n]))
		}
	}
}

func TestUpDemo(t *testing.T) {
	icd, egl := lavapipe(t)
	root := hostCopy(t, "nixos-h200")
	sock, received := notifySocket(t)
	r := run(t, []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl, "NOTIFY_SOCKET=" + sock},
		"up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", "/run/nodeprep/nodeprep.prom")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"✓ inventory", "✓ cdi", "✓ selftest", "✓ join", "ready"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Under systemd: STATUS= while it works, READY=1 with the verdict last.
	msgs := received()
	if len(msgs) < 2 || msgs[len(msgs)-1] != "READY=1\nSTATUS=ready" || !strings.HasPrefix(msgs[0], "STATUS=") {
		t.Errorf("sd_notify messages = %q", msgs)
	}
	// The patched spec validates with the CDI library and has the mounts.
	h, _ := hostfs.New(root)
	specFile, _ := h.Path(cdi.DefaultSpecPath)
	if err := cdi.ValidateFile(specFile); err != nil {
		t.Fatalf("patched spec: %v", err)
	}
	_, spec, err := cdi.Load(h, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range spec.ContainerEdits.Mounts {
		paths = append(paths, m.ContainerPath)
	}
	for _, want := range []string{"/etc/vulkan/icd.d/nvidia_icd.json", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/usr/lib/x86_64-linux-gnu/libEGL.so.1"} {
		if !slices.Contains(paths, want) {
			t.Errorf("patched spec lacks a mount at %s", want)
		}
	}
	// The drop-in, read back through the k3s merge code.
	eff := effective(t, root)
	labels, taints := k3s.Values(eff.NodeLabels), k3s.Values(eff.NodeTaints)
	for _, want := range []string{"nvidia.com/gpu.count=8", "nvidia.com/gpu.product=NVIDIA-H200-141GB-HBM3e", "nodeprep.dev/selftest=passed", "nodeprep.dev/vulkan-adapters=8", "nodeprep.dev/simulated=true"} {
		if !slices.Contains(labels, want) {
			t.Errorf("effective labels lack %s: %v", want, labels)
		}
	}
	if !slices.Equal(taints, []string{"nvidia.com/gpu=present:NoSchedule"}) {
		t.Errorf("effective taints = %v", taints)
	}
	if st, _ := os.Stat(filepath.Join(root, dropIn)); st.Mode().Perm() != 0o600 {
		t.Errorf("drop-in mode %v", st.Mode().Perm())
	}
	// status.json and the metrics agree with the exit code.
	if s := readStatus(t, root); !s.Ready || s.Verdict != "ready" || len(s.Stages) != 4 {
		t.Errorf("status = %+v", s)
	}
	prom, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/nodeprep.prom"))
	for _, want := range []string{"nodeprep_ready 1", "nodeprep_gpus 8", "nodeprep_gpus_healthy 8", "nodeprep_selftest_adapters_matched 8", `nodeprep_stage_duration_seconds{stage="cdi"}`, "nodeprep_last_run_timestamp_seconds"} {
		if !strings.Contains(string(prom), want) {
			t.Errorf("metrics lack %q:\n%s", want, prom)
		}
	}
	// -o json prints the same report as status.json.
	r2 := run(t, []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
		"up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "-o", "json")
	var fromStdout, fromFile map[string]any
	if err := json.Unmarshal([]byte(r2.stdout), &fromStdout); err != nil {
		t.Fatalf("%v\n%s", err, r2.stdout)
	}
	data, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
	json.Unmarshal(data, &fromFile)
	if fromStdout["verdict"] != fromFile["verdict"] || fromStdout["startedAt"] != fromFile["startedAt"] {
		t.Errorf("-o json and status.json differ")
	}
	if fc := fromFile["filesChanged"].([]any); len(fc) != 0 {
		t.Errorf("second run changed files: %v", fc)
	}
}

func TestUpBrokenHost(t *testing.T) {
	icd, egl := lavapipe(t)
	tests := []struct {
		name     string
		scenario string
		env      []string
		args     []string
		want     int
		cause    string // in stdout or stderr
		dropIn   bool
		tainted  bool
	}{
		{name: "icd-removed-lavapipe-hidden", scenario: "broken-no-icd", env: []string{"VK_DRIVER_FILES=/nonexistent/lvp.json"},
			want: 1, cause: "no-icd-on-host"},
		{name: "lavapipe-hidden", scenario: "nixos-h200", env: []string{"VK_DRIVER_FILES=/nonexistent/lvp.json", "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
			want: 1, cause: "/nonexistent/lvp.json"},
		{name: "lavapipe-hidden-taint", scenario: "nixos-h200", env: []string{"VK_DRIVER_FILES=/nonexistent/lvp.json", "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
			args: []string{"--on-selftest-failure", "taint"}, want: 0, cause: "nodeprep.dev/gpu-unhealthy=true:NoExecute", dropIn: true, tainted: true},
		{name: "cpu-adapter-not-allowed", scenario: "nixos-h200", env: []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
			args: []string{"--require-egl=false"}, want: 1, cause: "llvmpipe"},
		{name: "uuid-names-missing", scenario: "broken-index-names", env: []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
			args: []string{"--allow-cpu-adapter"}, want: 1, cause: "nvidia.com/gpu=GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9"},
		{name: "malformed-spec", scenario: "broken-malformed-spec", want: 65, cause: "reading CDI spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := hostCopy(t, tt.scenario)
			sock, received := notifySocket(t)
			r := run(t, append(tt.env, "NOTIFY_SOCKET="+sock), append([]string{"up", "--root", root, "--simulate", "dgx-h200"}, tt.args...)...)
			if ready := slices.ContainsFunc(received(), func(m string) bool { return strings.Contains(m, "READY=1") }); ready != (tt.want == 0) {
				t.Errorf("READY=1 sent = %v for exit %d", ready, r.code)
			}
			if r.code != tt.want {
				t.Fatalf("exit %d, want %d\n%s\n%s", r.code, tt.want, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, tt.cause) {
				t.Errorf("output does not name %q:\n%s\n%s", tt.cause, r.stdout, r.stderr)
			}
			// Each message once: the report on stdout carries every
			// stage's reasons and the verdict, so stderr stays quiet.
			if r.stderr != "" {
				t.Errorf("stderr repeats the report:\n%s", r.stderr)
			}
			_, err := os.Stat(filepath.Join(root, dropIn))
			if exists := err == nil; exists != tt.dropIn {
				t.Errorf("drop-in written = %v, want %v", exists, tt.dropIn)
			}
			s := readStatus(t, root)
			if s.Ready != (tt.want == 0) || s.Tainted != tt.tainted {
				t.Errorf("status ready=%v tainted=%v for exit %d", s.Ready, s.Tainted, r.code)
			}
			if tt.tainted && !slices.Contains(k3s.Values(effective(t, root).NodeTaints), "nodeprep.dev/gpu-unhealthy=true:NoExecute") {
				t.Errorf("tainted join lacks the unhealthy taint")
			}
		})
	}
}

// TestUpContainer runs `up` with the in-container self-test on a host whose
// "driver" is lavapipe: the patch must bring the ICD into the container and
// the probe inside must find the adapter and verify the dispatch.
func TestUpContainer(t *testing.T) {
	rootfs := testkit.ContainerRootfs(t)
	icd, egl := lavapipe(t)
	root := filepath.Join(t.TempDir(), "root")
	testkit.LavapipeHost(t, root, simulatedUUIDs(t))
	r := run(t, []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
		"up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--container", "--rootfs", rootfs,
		"--require-egl=false", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	var rep testkit.UpContainerReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Ready || !rep.Container.Passed || len(rep.Container.Containers) == 0 {
		t.Fatalf("ready=%v container=%+v", rep.Ready, rep.Container)
	}
	ads := rep.Container.Containers[0].Selftest.Vulkan.Adapters
	if len(ads) != 1 || ads[0].Vendor != 0x10005 || !ads[0].Dispatch.Verified {
		t.Errorf("in-container adapters = %+v, want lavapipe with a verified dispatch", ads)
	}
}

func simulatedUUIDs(t *testing.T) []string {
	t.Helper()
	r := run(t, nil, "inspect", "--simulate", "dgx-h200", "-o", "json")
	var inv struct {
		GPUs []struct {
			UUID string `json:"uuid"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &inv); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range inv.GPUs {
		out = append(out, g.UUID)
	}
	return out
}

// TestUpRuntimeView runs `up` on each host tree of the runtime's view
// (issue 11): the kinds that leave GPU pods broken fail the CDI stage with
// the reason; the ones nodeprep can fix, or that touch only optional
// pieces, end ready.
func TestUpRuntimeView(t *testing.T) {
	icd, egl := lavapipe(t)
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	tests := []struct {
		scenario string
		want     int
		cause    string // in stdout or stderr
	}{
		{"dup-spec-copy", 1, "conflicting-specs: /var/run/cdi/nvidia-container-toolkit.json and /var/run/cdi/nvidia.yaml"},
		{"plugin-kind-store", 1, "unpatchable-spec: pods asking for k8s.device-plugin.nvidia.com/gpu="},
		{"mixed-driver-version", 1, "mixed-driver-version"},
		{"modeset-absent", 1, "/dev/nvidia-modeset is neither in the spec nor on the host"},
		{"plugin-kind", 0, "device-plugin-spec"},
		{"coherent-sibling", 0, "ready"},
		{"dangling-dir-mount", 0, "ready"},
		{"missing-companion", 0, "ready"},
		{"modeset-not-in-spec", 0, "ready"},
		{"optional-platform-missing", 0, "optional-left-out"},
		{"no-all-device", 0, "missing-all-device"},
		{"stale-etc-cdi", 0, "ready"},
		{"dra-driver", 0, "ready"},
		// Issue 32: the field faults named right.
		{"missing-eglcore", 0, "ready"},
		{"ldcache-glibc-folder", 1, "ldcache-glibc: the spec's update-ldcache hook adds /nix/store/1b2c3d4f5g6h7j8k9l0m1n2p3q4r5s6a-glibc-2.39-52/lib to the container's linker cache"},
		{"ldcache-glibc-libc", 1, "(NVIDIA/k8s-device-plugin#1182)"},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			root := hostCopy(t, tt.scenario)
			r := run(t, env, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter")
			if r.code != tt.want {
				t.Fatalf("exit %d, want %d\n%s\n%s", r.code, tt.want, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout+r.stderr, tt.cause) {
				t.Errorf("output does not name %q:\n%s\n%s", tt.cause, r.stdout, r.stderr)
			}
			if s := readStatus(t, root); s.Ready != (tt.want == 0) {
				t.Errorf("status ready=%v for exit %d", s.Ready, r.code)
			}
		})
	}
}
