package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestUpK3sAsItRuns: `up`, on an H200 NixOS tree whose k3s runs with
// --config /srv/k3s.yaml, a data-dir on a data disk and an embedded
// containerd with CDI off, finds k3s's files where k3s reads them and is
// not ready for CDI off, as cdi check says (one fact, one verdict); with
// the containerd k3s ships laid in its data dir (the real 2.4.2, which
// ignores enable_cdi) it is ready, the ignored key a warning.
func TestUpK3sAsItRuns(t *testing.T) {
	icd, egl := lavapipe(t)
	root := hostCopy(t, "nixos-h200")
	over := filepath.Join("..", "..", "testdata", "hosts", "k3s-containerd-cdi-off", "var", "lib", "rancher", "k3s")
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", over, filepath.Join(root, "data", "k3s")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "srv", "k3s.yaml"), []byte("data-dir: /data/k3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
		"up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--k3s-arg=--config=/srv/k3s.yaml", "-o", "json")
	// One fact, one verdict: CDI off in the containerd k3s runs is an
	// error of cdi check, and up is not ready for it either.
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (containerd has CDI off)\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "srv/k3s.yaml.d/50-nodeprep.yaml")); err == nil {
		t.Errorf("up wrote the drop-in although it is not ready")
	}
	if _, err := os.Stat(filepath.Join(root, "etc/rancher/k3s/config.yaml.d")); err == nil {
		t.Error("up wrote under /etc/rancher/k3s, which this k3s never reads")
	}
	var rep struct {
		Ready  bool `json:"ready"`
		Stages []struct {
			Name, Status string
			Reasons      []string
		} `json:"stages"`
		Join struct {
			DataDir string `json:"dataDir"`
		} `json:"join"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if rep.Ready {
		t.Errorf("ready with CDI off in containerd")
	}
	last := rep.Stages[len(rep.Stages)-1]
	if last.Name != "join" || last.Status != "failed" || !strings.Contains(strings.Join(last.Reasons, "\n"), "containerd-cdi-disabled") {
		t.Errorf("join stage %+v, want it failed naming containerd-cdi-disabled", last)
	}
	// The same tree with the containerd k3s ships, 2.4.2 (CDI always on,
	// enable_cdi ignored): ready, as cdi check says.
	{
		bin := upstream.Tool(t, upstream.Containerd, "containerd")
		dst := filepath.Join(root, "data/k3s/data/current/bin/containerd")
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if out, err := exec.Command("cp", bin, dst).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		r = run(t, []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
			"up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--k3s-arg=--config=/srv/k3s.yaml")
		if r.code != 0 || !strings.Contains(r.stdout, "containerd-ignored-key") {
			t.Errorf("up with containerd 2.4.2: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	}
}
