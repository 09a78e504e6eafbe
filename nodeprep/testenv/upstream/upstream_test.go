package upstream_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealToolsArePinned builds every tools module and checks that each
// program reports the version its go.mod pins: a pin moved in one place
// but not the other (go.mod, ldflags, the constants' docs) fails here.
func TestRealToolsArePinned(t *testing.T) {
	tests := []struct {
		component, program string
		args               []string
		module, version    string
	}{
		{upstream.Toolkit117, "nvidia-ctk", []string{"--version"}, "github.com/NVIDIA/nvidia-container-toolkit", "1.17.8"},
		{upstream.Toolkit117, "nvidia-container-runtime", []string{"--version"}, "github.com/NVIDIA/nvidia-container-toolkit", "1.17.8"},
		{upstream.Toolkit117, "nvidia-cdi-hook", []string{"--version"}, "github.com/NVIDIA/nvidia-container-toolkit", "1.17.8"},
		{upstream.Toolkit120, "nvidia-ctk", []string{"--version"}, "github.com/NVIDIA/nvidia-container-toolkit", "1.20.2"},
		{upstream.Toolkit120, "nvidia-container-runtime", []string{"--version"}, "github.com/NVIDIA/nvidia-container-toolkit", "1.20.2"},
		{upstream.Toolkit120, "nvidia-cdi-hook", []string{"--version"}, "github.com/NVIDIA/nvidia-container-toolkit", "1.20.2"},
		{upstream.Containerd, "containerd", []string{"--version"}, "github.com/containerd/containerd/v2", "2.4.2"},
		{upstream.Containerd, "crictl", []string{"--version"}, "sigs.k8s.io/cri-tools", "1.37.0"},
		{upstream.Kubernetes, "kube-apiserver", []string{"--version"}, "k8s.io/kubernetes", "1.37.2"},
		{upstream.Kubernetes, "kine", []string{"--version"}, "github.com/k3s-io/kine", "0.17.5"},
	}
	for _, tt := range tests {
		t.Run(tt.component+"/"+tt.program, func(t *testing.T) {
			gomod, err := os.ReadFile(testkit.Testdata(t, "tools", tt.component, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if want := tt.module + " v" + tt.version; !strings.Contains(string(gomod), want) {
				t.Fatalf("testdata/tools/%s/go.mod does not pin %s", tt.component, want)
			}
			out, err := exec.Command(upstream.Tool(t, tt.component, tt.program), tt.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %v: %v: %s", tt.program, tt.args, err, out)
			}
			if !strings.Contains(string(out), tt.version) {
				t.Errorf("%s %v says %q, want version %s", tt.program, tt.args, strings.TrimSpace(string(out)), tt.version)
			}
		})
	}
}

// TestRealDenoIsPinned installs Deno from its npm pin and checks that the
// lock pins the package with an integrity hash (npm ci refuses a package
// whose hash differs) and that the program is the version the lock and
// the constant's doc name.
func TestRealDenoIsPinned(t *testing.T) {
	const pkg, version = "@deno/linux-x64-glibc", "2.9.6"
	data, err := os.ReadFile(testkit.Testdata(t, "tools", upstream.Deno, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		t.Fatalf("testdata/tools/deno/package-lock.json: %v", err)
	}
	p := lock.Packages["node_modules/"+pkg]
	if p.Version != version || !strings.HasPrefix(p.Integrity, "sha512-") {
		t.Fatalf("the lock pins %s at %q with integrity %q, want %s with a sha512 hash", pkg, p.Version, p.Integrity, version)
	}
	out, err := exec.Command(upstream.Tool(t, upstream.Deno, "deno"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("deno --version: %v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), "deno "+version+" ") {
		t.Errorf("deno --version says %q, want deno %s", strings.TrimSpace(string(out)), version)
	}
}
