package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// The store paths of the committed NixOS trees (testdata/hosts/nixos-h200*)
// that GPUHost fills with this machine's stand-ins.
const (
	nvStore    = "/nix/store/4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30"
	glvndStore = "/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0"
	ldconfig   = "/nix/store/3c4d5f6g7h8j9k0l1m2n3p4q5r6s7a8b-glibc-2.39-52-bin/bin/ldconfig"
)

// DevicePluginSpec is where GPUHost puts the spec the real generator
// writes for the device plugin's CDI kind (k8s.device-plugin.nvidia.com/gpu),
// as the NVIDIA device plugin's own spec sits on a node.
const DevicePluginSpec = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"

// GPUPauseImage is the sandbox image StartGPUNode's containerd pins (a
// static pause loop, WritePauseImage).
const GPUPauseImage = "localhost/nodeprep-pause:test"

// GPUHostSetup names a committed NixOS tree and the pinned toolkit whose
// generator unit it matches.
type GPUHostSetup struct {
	// Tree is the testdata/hosts scenario ("nixos-h200").
	Tree string
	// Toolkit is the tools module of nvidia-container-toolkit (Toolkit120).
	Toolkit string
	// Unit is scripts/nvidia-cdi-generate.sh's unit ("old", "new",
	// "new-hooks").
	Unit string
}

// GPUHost builds the host tree of s: the committed NixOS tree with real
// device nodes (testkit.HostCopy), whose driver is Mesa — the nvidia-x11
// store path's libGLX_nvidia (the Vulkan ICD's library) is lavapipe
// (icdManifest's library), its libEGL_nvidia (named by store path in the
// EGL vendor manifest) Mesa's EGL (eglManifest's), libglvnd's libraries
// are this machine's, libnvidia-ml the fake dgx-h200 NVML, libcuda the
// fake CUDA driver, the toolkit's store paths hold the real programs and
// glibc's ldconfig this machine's — and whose specs the real generator
// writes (scripts/nvidia-cdi-generate.sh: the unit's spec and the device
// plugin's, DevicePluginSpec). It returns the tree's root.
func GPUHost(t testing.TB, s GPUHostSetup, icdManifest, eglManifest string) string {
	t.Helper()
	tkDir := Dir(t, s.Toolkit)
	root := testkit.HostCopy(t, s.Tree)
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	lib := func(manifest string) string {
		var m struct {
			ICD struct {
				LibraryPath string `json:"library_path"`
			} `json:"ICD"`
		}
		data, err := os.ReadFile(manifest)
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		if err != nil {
			t.Fatalf("reading %s: %v", manifest, err)
		}
		p := m.ICD.LibraryPath
		if !filepath.IsAbs(p) {
			p = filepath.Join("/usr/lib", arch+"-linux-gnu", p)
		}
		return p
	}
	CopyFile(t, lib(icdManifest), root+nvStore+"/lib/libGLX_nvidia.so.550.54.15")
	CopyFile(t, lib(eglManifest), root+nvStore+"/lib/libEGL_nvidia.so.550.54.15")
	vendor := root + nvStore + "/share/glvnd/egl_vendor.d/10_nvidia.json"
	if err := os.WriteFile(vendor, fmt.Appendf(nil, `{"file_format_version": "1.0.0", "ICD": {"library_path": %q}}`, nvStore+"/lib/libEGL_nvidia.so.0"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"libEGL.so.1.1.0", "libGLX.so.0.0.0", "libOpenGL.so.0.0.0", "libGLdispatch.so.0.0.0"} {
		CopyFile(t, filepath.Join("/usr/lib", arch+"-linux-gnu", l), root+glvndStore+"/lib/"+l)
	}
	nvml, _, err := fakedriver.Build(t.TempDir(), fakedriver.NVMLDGXH200)
	if err != nil {
		t.Fatal(err)
	}
	CopyFile(t, nvml, root+nvStore+"/lib/libnvidia-ml.so.550.54.15")
	// The CUDA driver: the fake libcuda (the dgx-h200's UUIDs, the devices
	// whose nodes the container has) and its JIT compiler, in place of the
	// tree's stand-ins, for the generator to find and the pods to load.
	cudaLib, _, err := fakedriver.Build(t.TempDir(), fakedriver.CUDA)
	if err != nil {
		t.Fatal(err)
	}
	CopyFile(t, cudaLib, root+nvStore+"/lib/libcuda.so.550.54.15")
	CopyFile(t, filepath.Join(filepath.Dir(cudaLib), "libnvidia-ptxjitcompiler.so.1"), root+nvStore+"/lib/libnvidia-ptxjitcompiler.so.550.54.15")
	CopyFile(t, "/sbin/ldconfig", root+ldconfig)
	for _, p := range []string{"nvidia-ctk", "nvidia-cdi-hook"} {
		matches, _ := filepath.Glob(filepath.Join(root, "nix/store/*-nvidia-container-toolkit-*", "bin", p))
		for _, m := range matches {
			CopyFile(t, filepath.Join(tkDir, p), m)
		}
	}
	gen := filepath.Join(testkit.RepoRoot(t), "scripts", "nvidia-cdi-generate.sh")
	for unit, spec := range map[string]string{s.Unit: cdi.DefaultSpecPath, "plugin": DevicePluginSpec} {
		cmd := exec.Command(gen, s.Toolkit, root, unit)
		cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the real generator (%s, %s): %v\n%s", s.Toolkit, unit, err, stderr.String())
		}
		p := filepath.Join(root, strings.Replace(spec, "/var/run/", "/run/", 1))
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// RerootCDI writes every spec in the tree's /var/run/cdi into dir with
// each path the runtime resolves on this machine — mount sources, device
// nodes, hook programs and update-ldcache's ldconfig — moved under the
// tree, symlinks followed inside it (hostfs.Root.Path): on a node the tree
// is / and nothing would change. Container paths stay as they are.
func RerootCDI(t testing.TB, root, dir string) {
	t.Helper()
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	at := func(p string) string {
		full, err := host.Path(p)
		if err != nil {
			t.Fatalf("re-rooting %s: %v", p, err)
		}
		return full
	}
	edits := func(e *specs.ContainerEdits) {
		for _, m := range e.Mounts {
			m.HostPath = at(m.HostPath)
		}
		for _, d := range e.DeviceNodes {
			hp := d.HostPath
			if hp == "" {
				hp = d.Path
			}
			d.HostPath = at(hp)
		}
		for _, h := range e.Hooks {
			h.Path = at(h.Path)
			for i := 0; i+1 < len(h.Args); i++ {
				if h.Args[i] == "--ldconfig-path" {
					h.Args[i+1] = at(h.Args[i+1])
				}
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "run", "cdi", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s specs.Spec
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		edits(&s.ContainerEdits)
		for i := range s.Devices {
			edits(&s.Devices[i].ContainerEdits)
		}
		// A device node's hostPath needs a newer cdiVersion than a
		// UUID-only spec's 0.3.0.
		if v, err := specs.MinimumRequiredVersion(&s); err == nil && cdiVersionLess(s.Version, v) {
			s.Version = v
		}
		out, err := json.MarshalIndent(&s, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cdiVersionLess compares two CDI versions "major.minor.patch".
func cdiVersionLess(a, b string) bool {
	var x, y [3]int
	fmt.Sscanf(a, "%d.%d.%d", &x[0], &x[1], &x[2])
	fmt.Sscanf(b, "%d.%d.%d", &y[0], &y[1], &y[2])
	for i := range x {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return false
}

// WriteNVIDIARuntimeConfig writes the tree's /etc/nvidia-container-runtime/config.toml:
// the toolkit's defaults (mode auto, default-kind nvidia.com/gpu, the
// cdi.k8s.io/ annotation prefix), with the paths that are the tree's on
// this machine — the driver root, the CDI spec directory the re-rooted
// specs are in (RerootCDI) — and the toolkit's own programs (tkDir).
func WriteNVIDIARuntimeConfig(t testing.TB, root, tkDir, cdiDir string) {
	t.Helper()
	cfg := fmt.Sprintf(`[nvidia-container-cli]
root = %q
ldconfig = "@/sbin/ldconfig"

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc"]

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
annotation-prefixes = ["cdi.k8s.io/"]
spec-dirs = [%q]

[nvidia-container-runtime-hook]
path = %q

[nvidia-ctk]
path = %q
`, root, cdiDir, filepath.Join(tkDir, "nvidia-container-runtime-hook"), filepath.Join(tkDir, "nvidia-ctk"))
	p := filepath.Join(root, "etc", "nvidia-container-runtime", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// NVIDIAContainerd is the ContainerdConfig of a k3s GPU node whose tree is
// root and toolkit tkDir: the runtime handlers k3s registers when it finds
// the NVIDIA runtimes (runc, the default; nvidia; nvidia-cdi), CDI on with
// cdiDir (RerootCDI's), the sandbox image GPUPauseImage, and the
// environment the NVIDIA runtime reads its config.toml from
// ($XDG_CONFIG_HOME/nvidia-container-runtime/config.toml,
// WriteNVIDIARuntimeConfig) and finds its hooks by.
func NVIDIAContainerd(t testing.TB, root, tkDir, cdiDir string) ContainerdConfig {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		Unavailable(t, fmt.Errorf("runc (Debian's) is not installed (scripts/install-deps.sh test): %w", err))
	}
	return ContainerdConfig{
		Runtimes: []Runtime{
			{Name: "runc", BinaryName: runc},
			{Name: "nvidia", BinaryName: filepath.Join(tkDir, "nvidia-container-runtime")},
			{Name: "nvidia-cdi", BinaryName: filepath.Join(tkDir, "nvidia-container-runtime.cdi")},
		},
		CDISpecDirs:  []string{cdiDir},
		SandboxImage: GPUPauseImage,
		Env:          []string{"XDG_CONFIG_HOME=" + filepath.Join(root, "etc"), "PATH=" + tkDir + ":" + os.Getenv("PATH")},
	}
}

// GPUNodeOptions is what StartGPUNode's node differs in.
type GPUNodeOptions struct {
	// NodeName is the Node's name.
	NodeName string
	// Root is the node's host tree (GPUHost's) after `nodeprep up` patched
	// its spec and wrote the k3s drop-in.
	Root string
	// Toolkit is the tools module of the toolkit whose runtimes run the
	// pods (Toolkit120).
	Toolkit string
	// Images are OCI archives (WriteOCIArchive) imported into the node's
	// containerd besides the pause image: a registry is out of reach.
	Images []string
	// Network gives the node a pod network (ContainerdConfig.Network),
	// so the Node goes Ready and pods that are not on the host network
	// run; without it the Node stays NotReady.
	Network bool
	// GPUs is the nvidia.com/gpu capacity the device plugin must report
	// (the simulated dgx-h200's 8).
	GPUs int
	// DeviceListStrategy, DeviceIDStrategy and DriverRoot are the device
	// plugin's flags (the chart values `cluster render` emits:
	// deviceListStrategy, deviceIDStrategy, nvidiaDriverRoot; DriverRoot
	// is a path inside Root).
	DeviceListStrategy, DeviceIDStrategy, DriverRoot string
}

// GPUNode is a k3s GPU node StartGPUNode started.
type GPUNode struct {
	// Kubelet is the node's kubelet (and through it its namespace and
	// containerd).
	Kubelet *KubeletInstance
	// CDIDir holds the tree's specs re-rooted (RerootCDI); after the
	// tree's specs change, RerootCDI(t, Root, CDIDir) again.
	CDIDir string
	// DevicePluginLog is the device plugin's log file.
	DevicePluginLog string
}

// StartGPUNode starts a k3s GPU node on the tree o.Root against api, as
// the node's own programs run it: the tree's CDI specs re-rooted and the
// NVIDIA runtime's config written (RerootCDI, WriteNVIDIARuntimeConfig);
// containerd with the NVIDIA runtime handlers (NVIDIAContainerd) in a
// NodeNamespace, the pause image and o.Images imported; the real kubelet
// registering the Node with the flags k3s's agent builds from the tree's
// effective k3s configuration — nodeprep's drop-in among it — (k3s
// pkg/daemons/agent/agent_linux.go: --node-labels is the node-label list
// joined with ",", --register-with-taints the node-taint list, when it has
// any); then the real NVIDIA device plugin (tools module DevicePlugin) as
// a process in the node's namespace against the fake dgx-h200 NVML, with
// o's strategies and driver root. It returns once the Node's
// nvidia.com/gpu capacity is o.GPUs, and fails t (with the plugin's log)
// when it is not within 2 minutes. t.Cleanup stops everything, then
// checks that the host is as it was (CheckHostUnchanged).
func StartGPUNode(t testing.TB, api *APIServer, o GPUNodeOptions) *GPUNode {
	t.Helper()
	CheckHostUnchanged(t)
	plugin := Tool(t, DevicePlugin, "nvidia-device-plugin")
	tkDir := Dir(t, o.Toolkit)
	cdiDir := filepath.Join(t.TempDir(), "cdi")
	RerootCDI(t, o.Root, cdiDir)
	WriteNVIDIARuntimeConfig(t, o.Root, tkDir, cdiDir)

	host, err := hostfs.New(o.Root)
	if err != nil {
		t.Fatal(err)
	}
	view, err := k3s.Read(host, k3s.Options{})
	if err != nil {
		t.Fatalf("reading the node's k3s configuration: %v", err)
	}
	labels, taints := k3s.Values(view.Effective.NodeLabels), k3s.Values(view.Effective.NodeTaints)
	args := []string{"--node-labels=" + strings.Join(labels, ",")}
	if len(taints) > 0 {
		args = append(args, "--register-with-taints="+strings.Join(taints, ","))
	}

	ns := StartNodeNamespace(t)
	cc := NVIDIAContainerd(t, o.Root, tkDir, cdiDir)
	cc.Namespace, cc.Network = ns, o.Network
	c := StartContainerd(t, cc)
	pause := filepath.Join(t.TempDir(), "pause.tar")
	WritePauseImage(t, pause, GPUPauseImage)
	for _, a := range append([]string{pause}, o.Images...) {
		c.ImportImage(t, a)
	}
	k := StartKubelet(t, api, KubeletOptions{NodeName: o.NodeName, Namespace: ns, Containerd: c, Args: args})
	if _, err := k.Registered(2 * time.Minute); err != nil {
		t.Fatal(err)
	}

	// The device plugin, with the fake NVML (LD_LIBRARY_PATH: go-nvml
	// dlopens libnvidia-ml.so.1).
	nvmlDir := t.TempDir()
	if _, _, err := fakedriver.Build(nvmlDir, fakedriver.NVMLDGXH200); err != nil {
		t.Fatal(err)
	}
	logDir, err := os.MkdirTemp("", "device-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(logDir) })
	n := &GPUNode{Kubelet: k, CDIDir: cdiDir, DevicePluginLog: filepath.Join(logDir, "device-plugin.log")}
	dpLog, err := os.Create(n.DevicePluginLog)
	if err != nil {
		t.Fatal(err)
	}
	defer dpLog.Close()
	dp := ns.Command(plugin, "--device-list-strategy="+o.DeviceListStrategy, "--device-id-strategy="+o.DeviceIDStrategy,
		"--nvidia-driver-root="+filepath.Join(o.Root, o.DriverRoot), "--device-discovery-strategy=nvml", "--fail-on-init-error=true")
	// Health checks wait on NVML events, which the fake NVML does not
	// serve (DP_DISABLE_HEALTHCHECKS is the plugin's own switch).
	dp.Env = append(os.Environ(), "LD_LIBRARY_PATH="+nvmlDir, "DP_DISABLE_HEALTHCHECKS=all")
	dp.Stdout, dp.Stderr = dpLog, dpLog
	if err := dp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dp.Process.Kill()
		_ = dp.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(n.DevicePluginLog)
			t.Logf("the device plugin's log:\n%s", tail(log, 6000))
		}
	})
	want := fmt.Sprint(o.GPUs)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var node struct {
			Status struct {
				Capacity map[string]string `json:"capacity"`
			} `json:"status"`
		}
		if err := json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/nodes/"+o.NodeName, "", nil), &node); err != nil {
			t.Fatal(err)
		}
		got := node.Status.Capacity["nvidia.com/gpu"]
		if got == want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Node's nvidia.com/gpu capacity is %q, want %s", got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// CopyFile copies src to dst (mode 0755), making dst's directory and
// replacing what was there (a symlink of the tree, say); it fails t on
// any error.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(dst)
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}
