package podpath

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// The device plugin's deviceListStrategy values (NVIDIA k8s-device-plugin,
// its Allocate response): how a container's GPU request reaches the
// runtime.
var strategies = []string{"envvar", "cdi-annotations", "cdi-cri"}

// The runtime handlers a k3s node has (k3s registers nvidia and
// nvidia-cdi when it finds the NVIDIA runtimes; runc is the default).
var handlers = []string{"runc", "nvidia", "nvidia-cdi"}

// unpatched names the control: runc with the CDI strategies on the
// generator's specs before `nodeprep up` patched them.
const unpatched = "runc-unpatched"

const (
	pauseImage  = upstream.GPUPauseImage
	probeImage  = "localhost/nodeprep-probe:test"
	pluginKind  = "k8s.device-plugin.nvidia.com/gpu"
	probeInPod  = "/nodeprep-probe"
	podDeadline = 90 * time.Second
)

// A generator setup: a pinned toolkit run as one NixOS generator unit on
// the committed tree that carries that toolkit's store paths.
type setup struct {
	name string
	upstream.GPUHostSetup
	about string // the doc's heading
}

var setups = []setup{
	{"1.17", upstream.GPUHostSetup{Toolkit: upstream.Toolkit117, Tree: "nixos-h200-ctk117", Unit: "old"}, "nvidia-container-toolkit 1.17.8, NixOS's older generator unit"},
	{"1.20", upstream.GPUHostSetup{Toolkit: upstream.Toolkit120, Tree: "nixos-h200", Unit: "new"}, "nvidia-container-toolkit 1.20.2, NixOS's newer generator unit (--disable-hook create-symlinks)"},
	{"1.20-hooks", upstream.GPUHostSetup{Toolkit: upstream.Toolkit120, Tree: "nixos-h200-hooks", Unit: "new-hooks"}, "nvidia-container-toolkit 1.20.2, the newer unit with disable-hooks = [ ] (create-symlinks hooks in the spec)"},
}

// TestRealPodPath plays the kubelet on the pinned components for every
// toolkit × runtime handler × device list strategy and keeps the verdicts
// in docs/pod-path.md (-update rewrites it).
func TestRealPodPath(t *testing.T) {
	icd, egl, nodeprep, inv, images := podPathSetup(t)

	start := time.Now()
	results := map[string]string{} // toolkit/handler/strategy → verdict
	for _, su := range setups {
		t.Run(su.name, func(t *testing.T) {
			tk := su.name
			tkDir := upstream.Dir(t, su.Toolkit)
			root := upstream.GPUHost(t, su.GPUHostSetup, icd, egl)
			// The generator's specs as they are, before nodeprep: the control.
			cdiDir := filepath.Join(t.TempDir(), "cdi")
			upstream.RerootCDI(t, root, cdiDir)
			upstream.WriteNVIDIARuntimeConfig(t, root, tkDir, cdiDir)
			c := upstream.StartContainerd(t, upstream.NVIDIAContainerd(t, root, tkDir, cdiDir))
			for _, a := range images {
				c.ImportImage(t, a)
			}
			for _, s := range strategies[1:] {
				t.Run(unpatched+"/"+s, func(t *testing.T) {
					v := runPod(t, c, inv.GPUs[0], "runc", s, root)
					t.Logf("%s %s %s: %s", tk, unpatched, s, v)
					results[tk+"/"+unpatched+"/"+s] = v
				})
			}

			up := exec.Command(nodeprep, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "-o", "json")
			up.Env = append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
			if out, err := up.CombinedOutput(); err != nil {
				t.Fatalf("nodeprep up on the generated tree: %v\n%s", err, out)
			}
			// containerd's CDI cache follows its spec directories.
			upstream.RerootCDI(t, root, cdiDir)
			time.Sleep(time.Second)
			for _, h := range handlers {
				for _, s := range strategies {
					t.Run(h+"/"+s, func(t *testing.T) {
						v := runPod(t, c, inv.GPUs[0], h, s, root)
						t.Logf("%s %s %s: %s", tk, h, s, v)
						results[tk+"/"+h+"/"+s] = v
					})
				}
			}
		})
	}
	t.Logf("the whole matrix took %.1f s", time.Since(start).Seconds())
	if t.Failed() || len(results) != len(setups)*(len(handlers)*len(strategies)+len(strategies)-1) {
		return
	}
	golden(t, filepath.Join(testkit.RepoRoot(t), "docs", "pod-path.md"), matrixDoc(results))
}

// runPod runs the Vulkan and the EGL probe in one host-network pod on
// handler, the container asking for g as the device plugin's strategy
// hands it over, and returns "works" or the reason it does not.
func runPod(t *testing.T, c *upstream.ContainerdInstance, g gpu.GPU, handler, strategy, root string) string {
	logs := t.TempDir()
	// The subtest's name ("1.20/runc/cdi-cri") names the pod.
	_, rest, _ := strings.Cut(t.Name(), "/")
	name := regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(strings.ToLower(rest), "-")
	pod := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "default", "uid": "uid-" + name, "attempt": 0},
		"log_directory": logs,
		"linux":         map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}}},
	}
	podFile := writeJSON(t, logs, "pod.json", pod)
	out, err := c.Crictl("runp", "--runtime", handler, podFile)
	if err != nil {
		return "fails: " + reason(err.Error(), root)
	}
	podID := strings.TrimSpace(string(out))
	defer func() {
		if out, err := c.Crictl("rmp", "--force", podID); err != nil {
			t.Logf("removing pod %s: %v\n%s", podID, err, out)
		}
	}()
	sub := []selftest.ProbeRequest{}
	_, icdPaths := selftest.ICDSearch(nil)
	sub = append(sub,
		selftest.ProbeRequest{API: selftest.APIVulkan, Library: "libvulkan.so.1", ICDPaths: icdPaths, ICDDefaultSearch: true},
		selftest.ProbeRequest{API: selftest.APIEGL, Library: "libEGL.so.1"},
		selftest.ProbeRequest{API: selftest.API(cudaprobe.API), Library: selftest.DefaultCUDALibrary})
	var vk selftest.ProbeResult[selftest.VulkanReport]
	var egl selftest.ProbeResult[selftest.EGLReport]
	var cuda selftest.ProbeResult[cudaprobe.Report]
	for _, req := range sub {
		line, why := runProbe(t, c, podID, podFile, logs, g, string(req.API), strategy, req)
		if why != "" {
			return "fails: " + reason(why, root)
		}
		switch req.API {
		case selftest.API(cudaprobe.API):
			rep, err := cudaprobe.Decode(line)
			if err != nil {
				t.Fatalf("the CUDA probe's report: %v", err)
			}
			cuda.Report = rep
		case selftest.APIVulkan:
			rep, err := selftest.DecodeVulkanReport(line)
			if err != nil {
				t.Fatalf("the Vulkan probe's report: %v", err)
			}
			vk.Report = rep
		default:
			rep, err := selftest.DecodeEGLReport(line)
			if err != nil {
				t.Fatalf("the EGL probe's report: %v", err)
			}
			egl.Report = rep
		}
	}
	one := &gpu.Inventory{Simulated: true, Server: "dgx-h200", GPUs: []gpu.GPU{g}}
	rep := selftest.Evaluate(one, vk, egl, selftest.Policy{RequireEGL: true, AllowCPUAdapter: true, Hints: selftest.Hints{ICDPaths: icdPaths}})
	// A cell works only when CUDA does too: the fake libcuda from the
	// driver's folder, its devices and UVM nodes from the spec.
	required := true
	selftest.ApplyCUDA(rep, one, cuda, &required)
	if rep.Passed {
		// The workload's own proof: real wgpu in the same pod.
		if why := runWgpu(t, c, podID, podFile, logs, g, strategy); why != "" {
			return "fails: " + reason(why, root)
		}
		return "works"
	}
	var msgs []string
	for _, r := range rep.Reasons {
		msgs = append(msgs, r.Message)
	}
	return "fails: " + reason(strings.Join(msgs, "; "), root)
}

// runProbe creates and starts one probe container in the pod and returns
// its report line, or why there is none.
func runProbe(t *testing.T, c *upstream.ContainerdInstance, podID, podFile, logs string, g gpu.GPU, api, strategy string, req selftest.ProbeRequest) ([]byte, string) {
	reqJSON, _ := json.Marshal(req)
	ctr := map[string]any{
		"metadata": map[string]any{"name": api},
		"image":    map[string]any{"image": probeImage},
		"command":  []string{probeInPod, "__probe", string(reqJSON)},
		"log_path": api + ".log",
		"linux":    map[string]any{},
	}
	// What the NVIDIA device plugin's Allocate response carries for one
	// GPU, as the kubelet passes it to the CRI.
	switch strategy {
	case "envvar":
		ctr["envs"] = []map[string]string{{"key": "NVIDIA_VISIBLE_DEVICES", "value": g.UUID}}
	case "cdi-annotations":
		ctr["annotations"] = map[string]string{"cdi.k8s.io/nvidia-device-plugin_" + g.UUID: pluginKind + "=" + g.UUID}
	case "cdi-cri":
		ctr["CDI_devices"] = []map[string]string{{"name": pluginKind + "=" + g.UUID}}
	}
	ctrFile := writeJSON(t, logs, api+".json", ctr)
	data, why := runToExit(c, podID, podFile, ctrFile, filepath.Join(logs, api+".log"), "", "the "+api+" probe")
	if why != "" {
		return nil, why
	}
	line, why := reportLine(data)
	if why != "" {
		return nil, fmt.Sprintf("the %s probe printed %s", api, why)
	}
	return line, ""
}

// runToExit creates and starts the container ctrFile describes in the pod
// and waits (podDeadline at most) until it exits, returning its CRI log
// (logFile), or why there is none: crictl's errors prefixed with prefix,
// a timeout naming what.
func runToExit(c *upstream.ContainerdInstance, podID, podFile, ctrFile, logFile, prefix, what string) ([]byte, string) {
	out, err := c.Crictl("create", podID, ctrFile, podFile)
	if err != nil {
		return nil, prefix + err.Error()
	}
	id := strings.TrimSpace(string(out))
	if out, err := c.Crictl("start", id); err != nil {
		return nil, fmt.Sprintf("%s%v %s", prefix, err, out)
	}
	deadline := time.Now().Add(podDeadline)
	for {
		out, err := c.Crictl("inspect", "-o", "json", id)
		var st struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		if err == nil && json.Unmarshal(out, &st) == nil && st.Status.State == "CONTAINER_EXITED" {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Sprintf("%s did not exit within %s", what, podDeadline)
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		return nil, fmt.Sprintf("reading %s's log: %v", what, err)
	}
	return data, ""
}

// criLog splits a CRI log ("<time> <stream> <P|F> <text>" lines) into
// the container's stdout lines (partial lines joined) and its stderr, on
// one line.
func criLog(data []byte) (stdout [][]byte, stderr []byte) {
	var cur []byte
	for _, l := range bytes.Split(data, []byte("\n")) {
		f := bytes.SplitN(l, []byte(" "), 4)
		if len(f) < 4 {
			continue
		}
		if string(f[1]) == "stderr" {
			stderr = append(append(stderr, f[3]...), ' ')
			continue
		}
		cur = append(cur, f[3]...)
		if string(f[2]) == "F" {
			stdout = append(stdout, cur)
			cur = nil
		}
	}
	return stdout, bytes.TrimSpace(stderr)
}

// podPathSetup is what both pod-path tests need first: root (else the
// test is unavailable), lavapipe's ICD manifest and Mesa EGL's vendor
// manifest, the nodeprep binary, the simulated DGX H200 and the images
// buildImages makes from the container rootfs.
func podPathSetup(t *testing.T) (icd, egl, nodeprep string, inv *gpu.Inventory, images []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		upstream.Unavailable(t, fmt.Errorf("the pod path needs root (mknod, chroot, containerd)"))
	}
	rootfs := testkit.ContainerRootfs(t)
	icd, egl = testkit.Mesa(t)
	nodeprep = testkit.Binary(t)
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	return icd, egl, nodeprep, inv, buildImages(t, rootfs)
}

// buildImages writes the pause image (a static pause(2) loop built here)
// and the probe image (the in-container self-test's rootfs, Mesa EGL's
// own dependencies, which a graphics workload image carries, and
// nodeprep-probe at /nodeprep-probe) as OCI archives.
func buildImages(t *testing.T, rootfs string) []string {
	t.Helper()
	// A workload image has the top-level linker configuration (Debian's
	// libc-bin ships it); toolkit 1.17.8's update-ldcache hook runs
	// `ldconfig -f /etc/ld.so.conf` and, without it, adds no driver folder
	// to the cache. A rootfs from an older make-test-rootfs.sh lacks it and
	// would make every 1.17 cell fail for the test's sake.
	if _, err := os.Stat(filepath.Join(rootfs, "etc", "ld.so.conf")); err != nil {
		t.Fatalf("the test rootfs %s has no etc/ld.so.conf, as a workload image does (rebuild it: make rootfs): %v", rootfs, err)
	}
	dir := t.TempDir()
	pause := filepath.Join(dir, "pause")
	if err := os.MkdirAll(pause, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "pause.c")
	if err := os.WriteFile(src, []byte("#include <signal.h>\n#include <unistd.h>\nstatic void h(int s) { (void)s; _exit(0); }\nint main(void) { signal(SIGTERM, h); signal(SIGINT, h); for (;;) pause(); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", filepath.Join(pause, "pause"), src).CombinedOutput(); err != nil {
		t.Fatalf("building the pause binary: %v\n%s", err, out)
	}
	deps := filepath.Join(dir, "egl-deps")
	for _, l := range []string{"libgbm.so.1", "libglapi.so.0", "libxcb-dri2.so.0", "libwayland-server.so.0", "dri/swrast_dri.so",
		"libsensors.so.5", "libdrm_radeon.so.1", "libdrm_nouveau.so.2", "libdrm_intel.so.1", "libpciaccess.so.0"} {
		upstream.CopyFile(t, filepath.Join("/usr/lib", machine()+"-linux-gnu", l), filepath.Join(deps, "usr", "lib", machine()+"-linux-gnu", l))
	}
	probe := filepath.Join(dir, "probe")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(probe, "nodeprep-probe"), "github.com/nodeprep/nodeprep/cmd/nodeprep-probe").CombinedOutput(); err != nil {
		t.Fatalf("building nodeprep-probe: %v\n%s", err, out)
	}
	archives := []string{filepath.Join(dir, "pause.tar"), filepath.Join(dir, "probe.tar")}
	if err := upstream.WriteOCIArchive(archives[0], upstream.Image{Ref: pauseImage, Layers: []string{pause}, Entrypoint: []string{"/pause"}}); err != nil {
		t.Fatal(err)
	}
	if err := upstream.WriteOCIArchive(archives[1], upstream.Image{Ref: probeImage, Layers: []string{rootfs, deps, probe, wgpuLayer(t, dir)}}); err != nil {
		t.Fatal(err)
	}
	return archives
}

var (
	gpuUUID = regexp.MustCompile(`GPU-[0-9a-f-]{36}`)
	hexID   = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	// The programs' search path and the tools' cache differ by machine.
	searchPath = regexp.MustCompile(`in [^ ]*:[^ ]*`)
	toolsDir   = regexp.MustCompile(`/[^ ]*/\.cache/tools/([^/ ]+)/[0-9a-f]{16}`)
	tmpPath    = regexp.MustCompile(`/tmp/[^\s"':;,)]*`)
	stamp      = regexp.MustCompile(`time="[^"]*" `)
)

// reason makes a failure stable for the matrix: one line, the tree and
// temporary directories, IDs, search paths and log times replaced, at
// most 600 bytes.
func reason(s, root string) string {
	// crictl's own lines (config file warnings, klog) around the CRI's
	// answer: keep what the runtime said.
	if _, desc, ok := strings.Cut(s, "desc = "); ok {
		s, _, _ = strings.Cut(desc, `" podSandboxID=`)
		s, _, _ = strings.Cut(s, `" containerID=`)
	}
	s, _, _ = strings.Cut(s, ` > containerID=`)
	s = gpuUUID.ReplaceAllString(s, "<uuid>")
	s = searchPath.ReplaceAllString(s, "in $$PATH")
	s = toolsDir.ReplaceAllString(s, "<tools>/$1")
	s = strings.ReplaceAll(s, root, "<tree>")
	s = stamp.ReplaceAllString(s, "")
	s = tmpPath.ReplaceAllString(s, "<tmp>")
	s = hexID.ReplaceAllString(s, "<id>")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// matrixDoc renders docs/pod-path.md from the verdicts.
func matrixDoc(results map[string]string) []byte {
	var b bytes.Buffer
	b.WriteString(`# The pod's path: device plugin strategy × runtime handler × toolkit

What a GPU pod gets on a NixOS node that ` + "`nodeprep up`" + ` declared ready, measured by
` + "`TestRealPodPath`" + ` (nodeprep/podpath) on real components: the CDI specs are written by the
pinned NVIDIA container toolkit (nvidia-ctk 1.17.8 as NixOS's older generator unit runs it,
1.20.2 as the newer unit runs it and as it runs with ` + "`disable-hooks = [ ]`" + `, and the device
plugin's own spec), ` + "`nodeprep up`" + ` patches
them, and containerd 2.4.2's CRI runs a host-network pod whose container asks for one GPU exactly
as the NVIDIA device plugin hands it over for each ` + "`deviceListStrategy`" + ` (envvar:
` + "`NVIDIA_VISIBLE_DEVICES=<uuid>`" + `; cdi-annotations: a ` + "`cdi.k8s.io/`" + ` annotation naming
` + "`k8s.device-plugin.nvidia.com/gpu=<uuid>`" + `; cdi-cri: the CRI ` + "`CDIDevices`" + ` field), on each
runtime handler a k3s node has (runc with containerd's own CDI injection, ` + "`nvidia`" + ` and
` + "`nvidia-cdi`" + `, the toolkit's nvidia-container-runtime and nvidia-container-runtime.cdi with their
default config). The node's driver is Mesa standing in for NVIDIA's (lavapipe as the Vulkan ICD's
library, Mesa EGL as the EGL vendor's, and a fake ` + "`libcuda.so.1`" + ` built from C, with its
` + "`libnvidia-ptxjitcompiler`" + `, as the driver's CUDA library), so "works" means: nodeprep's self-test
probe in the pod found the Vulkan ICD and the EGL vendor through what the runtime gave the container
and ran its compute dispatch; its CUDA probe loaded libcuda by its soname, found the GPU by
UUID through the device nodes the runtime gave (the UVM ones included), and ran its PTX kernel
through the JIT compiler; and then real wgpu did too: Deno 2.9.6's WebGPU (wgpu-core 29) ran
` + "`testdata/wgpu-oracle/probe.js`" + ` in a second container of the pod on wgpu's Vulkan backend
(an adapter, a device, a verified dispatch; [wgpu-oracle.md](wgpu-oracle.md)). Regenerate with ` + "`go test ./nodeprep/podpath -run TestRealPodPath -update`" + `
(as root, after ` + "`make rootfs tools`" + `).

The probe image has ` + "`/etc/ld.so.conf`" + ` (` + "`include /etc/ld.so.conf.d/*.conf`" + `) as every Debian and
Ubuntu image has. Toolkit 1.17.8's update-ldcache hook writes the driver's store folder into
` + "`/etc/ld.so.conf.d/`" + ` and runs the host's ldconfig in the container with ` + "`-f /etc/ld.so.conf`" + `: that
makes ` + "`libcuda.so.1`" + ` and its cache entry. In an image without ` + "`/etc/ld.so.conf`" + ` (distroless
images) that ldconfig reads no drop-in, and on NixOS, whose driver folder is no system library
folder, a CUDA pod on 1.17.8 then finds no ` + "`libcuda.so.1`" + `; 1.20.2's hook creates the file
(NVIDIA/nvidia-container-toolkit#1459).

`)
	for _, su := range setups {
		tk := su.name
		fmt.Fprintf(&b, "## %s\n\n| handler | %s |\n|---|%s\n", su.about, strings.Join(strategies, " | "), strings.Repeat("---|", len(strategies)))
		for _, h := range append(append([]string{}, handlers...), unpatched) {
			var cells []string
			for _, s := range strategies {
				v, ok := results[tk+"/"+h+"/"+s]
				if !ok {
					v = "(not run)"
				}
				cells = append(cells, strings.ReplaceAll(v, "|", `\|`))
			}
			row := h
			if h == unpatched {
				row = "runc, before `nodeprep up`"
			}
			fmt.Fprintf(&b, "| %s | %s |\n", row, strings.Join(cells, " | "))
		}
		b.WriteString("\n")
	}
	var works []string
	all := "\n" // each verdict on a line of its own, so a marker may name a verdict's start
	for k, v := range results {
		if v == "works" {
			works = append(works, k)
		}
		all += v + "\n"
	}
	sort.Strings(works)
	fmt.Fprintf(&b, "Combinations that work: %d of %d (the rows \"before `nodeprep up`\" included: the same pods on "+
		"the generator's specs as written, the control that the patch is what makes them work).\n", len(works), len(results))
	// What each kind of failure above means, for the failures measured.
	notes := []struct{ marker, note string }{
		{"VK_ERROR_INCOMPATIBLE_DRIVER", "runc with `envvar`: nothing reads `NVIDIA_VISIBLE_DEVICES` on the plain runc handler, so the " +
			"container gets no device and no driver file at all."},
		{"nvidia-container-cli", "`nvidia` with `envvar` on 1.17: the runtime's `auto` mode picks `legacy`, which runs " +
			"nvidia-container-runtime-hook and needs libnvidia-container's nvidia-container-cli; it never reads a CDI spec, " +
			"patched or not."},
		{"resource busy", "The create-symlinks hook of a spec generated without `--disable-hook create-symlinks` " +
			"creates `<nvidia-x11>/lib/libGLX_nvidia.so.0` in the container, where nodeprep's patch bind-mounts the ICD's " +
			"library: the hook fails and the container does not start."},
		{"ERROR_LIBRARY_NOT_FOUND", "`nvidia` with `envvar` on 1.20: `auto` picks `jit-cdi` and generates a spec of its own from " +
			"the driver; its library search covers the FHS folders and ld.so.cache under the driver root only, so on a NixOS " +
			"tree it does not find libnvidia-ml and the container does not start. Where it finds NVML it still ignores the " +
			"spec nodeprep patched."},
		{"\nfails: CUDA: the CUDA driver library libcuda.so.1 cannot be used: libcuda.so.1: cannot open shared object file", "The CUDA probe in the pod cannot open `libcuda.so.1` by its soname, as the CUDA runtime " +
			"opens it: the spec mounts `libcuda.so.<version>` into the driver's store folder and leaves the soname link and the " +
			"linker cache entry to its update-ldcache hook, whose ldconfig did not add that folder."},
	}
	first := true
	for _, n := range notes {
		if strings.Contains(all, n.marker) {
			if first {
				b.WriteString("\nWhy the failing combinations fail:\n\n")
				first = false
			}
			b.WriteString("- " + n.note + "\n")
		}
	}
	cdiWorks := true
	for k, v := range results {
		if !strings.HasSuffix(k, "/envvar") && !strings.Contains(k, unpatched) && v != "works" {
			cdiWorks = false
		}
	}
	if cdiWorks {
		b.WriteString("\nThe CDI strategies work on every handler: containerd injects the patched device plugin spec " +
			"itself before the runtime runs.\n")
	}
	if strings.HasPrefix(results["1.20/nvidia-cdi/envvar"], "works") {
		b.WriteString("`nvidia-cdi` with `envvar` works because that runtime reads `NVIDIA_VISIBLE_DEVICES=<uuid>` as " +
			"`nvidia.com/gpu=<uuid>` in the patched generator spec.\n")
	}
	return b.Bytes()
}

// golden compares got with the file at path, or rewrites it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *testkit.Update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the matrix measured now (rerun with -update to rewrite it)\n got:\n%s", path, got)
	}
}

func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func machine() string {
	return map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
}

// Where the wgpu program sits in the probe image.
const (
	wgpuDeno  = "/wgpu-oracle/deno"
	wgpuProbe = "/wgpu-oracle/probe.js"
)

// wgpuLayer makes the probe image's layer holding Deno (upstream.Deno) and
// the wgpu program (testdata/wgpu-oracle/probe.js) under /wgpu-oracle.
func wgpuLayer(t *testing.T, dir string) string {
	t.Helper()
	deno, err := filepath.EvalSymlinks(upstream.Tool(t, upstream.Deno, "deno"))
	if err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(dir, "wgpu")
	upstream.CopyFile(t, deno, filepath.Join(layer, wgpuDeno))
	upstream.CopyFile(t, testkit.Testdata(t, "wgpu-oracle", "probe.js"), filepath.Join(layer, wgpuProbe))
	return layer
}

// runWgpu runs the wgpu program on wgpu's Vulkan backend in a container of
// the pod, the GPU handed over as strategy says (as runProbe does), and
// returns "" when it got an adapter and a device and verified its
// dispatch, else why not. A CPU adapter counts: the node's driver here is
// lavapipe.
func runWgpu(t *testing.T, c *upstream.ContainerdInstance, podID, podFile, logs string, g gpu.GPU, strategy string) string {
	const name = "wgpu"
	ctr := map[string]any{
		"metadata": map[string]any{"name": name},
		"image":    map[string]any{"image": probeImage},
		"command":  []string{wgpuDeno, "run", "--quiet", "--no-config", "--no-lock", "--allow-env=DENO_WEBGPU_BACKEND", wgpuProbe},
		"log_path": name + ".log",
		"linux":    map[string]any{},
	}
	envs := []map[string]string{{"key": "DENO_WEBGPU_BACKEND", "value": "vulkan"}, {"key": "DENO_DIR", "value": "/tmp/deno"}, {"key": "HOME", "value": "/tmp"}}
	switch strategy {
	case "envvar":
		envs = append(envs, map[string]string{"key": "NVIDIA_VISIBLE_DEVICES", "value": g.UUID})
	case "cdi-annotations":
		ctr["annotations"] = map[string]string{"cdi.k8s.io/nvidia-device-plugin_" + g.UUID: pluginKind + "=" + g.UUID}
	case "cdi-cri":
		ctr["CDI_devices"] = []map[string]string{{"name": pluginKind + "=" + g.UUID}}
	}
	ctr["envs"] = envs
	ctrFile := writeJSON(t, logs, name+".json", ctr)
	// wgpu has no bound of its own: it hangs on a hanging driver.
	data, why := runToExit(c, podID, podFile, ctrFile, filepath.Join(logs, name+".log"), "wgpu: ", "the wgpu program")
	if why != "" {
		return why
	}
	stdout, stderr := criLog(data)
	for _, l := range stdout {
		var r struct {
			Stage string `json:"stage"`
			Error string `json:"error"`
		}
		if !bytes.HasPrefix(l, []byte(`{"backend"`)) || json.Unmarshal(l, &r) != nil {
			continue
		}
		if r.Stage == "" {
			return ""
		}
		return fmt.Sprintf("wgpu's Vulkan backend: %s failed: %s", r.Stage, r.Error)
	}
	return fmt.Sprintf("the wgpu program printed no report; stderr: %s", stderr)
}
