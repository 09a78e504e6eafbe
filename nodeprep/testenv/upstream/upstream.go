// Package upstream gives nodeprep's tests the real upstream components a
// GPU pod's path goes through — NVIDIA's container toolkit (nvidia-ctk, its
// runtime and hooks), containerd with its CRI plugin, crictl — and the
// workloads' own runtimes (Deno's WebGPU, which is wgpu), built or
// installed from the pinned tools modules under testdata/tools/ by
// scripts/build-tools.sh. Each tools module is its own Go module, so the
// product's go.mod never names them. Only tests import this package.
//
// A test that needs a component says so in its name (TestReal…) and gets
// it with Tool. When the component cannot be built (no Go module proxy,
// no C compiler) the test is skipped with the reason; under CI (CI=true in
// the environment) that is a failure instead, so CI can never pass without
// the real components having run.
package upstream

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// The tools modules, by their directory under testdata/tools/.
const (
	// Toolkit117 is github.com/NVIDIA/nvidia-container-toolkit v1.17.8, the
	// oldest toolkit a supported NixOS release ships: nvidia-ctk,
	// nvidia-cdi-hook, nvidia-container-runtime (+ .cdi) and
	// nvidia-container-runtime-hook.
	Toolkit117 = "nvidia-container-toolkit-1.17"
	// Toolkit120 is github.com/NVIDIA/nvidia-container-toolkit v1.20.2, the
	// newest one NixOS unstable ships; same programs as Toolkit117.
	Toolkit120 = "nvidia-container-toolkit-1.20"
	// Containerd is github.com/containerd/containerd/v2 v2.4.2 (containerd,
	// containerd-shim-runc-v2, ctr) and sigs.k8s.io/cri-tools v1.37.0
	// (crictl, the CRI client that plays the kubelet).
	Containerd = "containerd"
	// DevicePlugin is github.com/NVIDIA/k8s-device-plugin v0.19.0
	// (nvidia-device-plugin), the newest release the Go module proxy
	// serves: the kubelet's device plugin that reads the GPUs through NVML.
	DevicePlugin = "k8s-device-plugin"
	// Kwok is sigs.k8s.io/kwok v0.8.0 (kwok): fake nodes and pods that
	// heartbeat and run by stage files, against a real kube-apiserver.
	Kwok = "kwok"
	// Karpenter is sigs.k8s.io/karpenter v1.14.1's kwok cloud provider
	// (kwok): Karpenter's controllers, launching kwok nodes for NodeClaims.
	Karpenter = "karpenter"
	// KEDA is github.com/kedacore/keda/v2 v2.21.0 (operator): the KEDA
	// operator that runs ScaledJobs from their triggers.
	KEDA = "keda"
	// Deno is the npm package @deno/linux-x64-glibc 2.9.6 (deno), pinned
	// with its integrity hash in testdata/tools/deno/package-lock.json and
	// installed by npm, not built: its WebGPU is wgpu-core 29, the wgpu
	// oracle of the self-test's differential test and of the pod-path
	// matrix (testdata/wgpu-oracle/probe.js).
	Deno = "deno"
)

// Toolkits lists the pinned NVIDIA container toolkits, oldest first.
var Toolkits = []string{Toolkit117, Toolkit120}

var (
	mu    sync.Mutex
	built = map[string]result{}
)

type result struct {
	dir string
	err error
}

// Dir returns the directory holding every program of component's tools
// module (.cache/tools/<component>/<key>/), building them first when the
// cache has no build of the current pin. The build runs once per test
// binary and is shared across test binaries by the script's lock. When it
// cannot be built, Dir skips t with the reason, or fails t under CI=true.
func Dir(t testing.TB, component string) string {
	t.Helper()
	mu.Lock()
	r, ok := built[component]
	if !ok {
		r = build(testkit.RepoRoot(t), component)
		built[component] = r
	}
	mu.Unlock()
	if r.err != nil {
		Unavailable(t, r.err)
	}
	return r.dir
}

// Tool returns the path of program (e.g. "nvidia-ctk", "containerd") from
// component's tools module; see Dir for the build, the skip and the CI
// failure. It fails t when the module has no such program.
func Tool(t testing.TB, component, program string) string {
	t.Helper()
	p := filepath.Join(Dir(t, component), program)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("upstream: tools module %s has no program %s: %v", component, program, err)
	}
	return p
}

// Unavailable skips t because a real component is missing (err says which
// and why), or fails it under CI=true, where every real component must run.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("real component unavailable under CI: %v", err)
	}
	t.Skipf("real component unavailable: %v", err)
}

// NeedPrivateMounts marks t as needing a private mount namespace (unshare
// -m): Unavailable when this process is not root (what says what needs
// it) or util-linux's unshare is not installed.
func NeedPrivateMounts(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, fmt.Errorf("%s in a private mount namespace needs root", what))
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		Unavailable(t, fmt.Errorf("unshare (util-linux): %w", err))
	}
}

func build(repo, component string) result {
	cmd := exec.Command(filepath.Join(repo, "scripts", "build-tools.sh"), component)
	cmd.Dir = repo
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return result{err: fmt.Errorf("building %s with scripts/build-tools.sh: %w: %s", component, err, strings.TrimSpace(stderr.String()))}
	}
	return result{dir: strings.TrimSpace(string(out))}
}
