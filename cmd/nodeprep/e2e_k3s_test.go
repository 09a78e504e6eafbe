package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpK3sAsItRuns: `up`, on an H200 NixOS tree whose k3s runs with
// --config /srv/k3s.yaml, a data-dir on a data disk and an embedded
// containerd with CDI off, writes its drop-in where k3s reads, stays ready
// (the containerd config is k3s's from its last start) and reports the
// containerd problem on the join stage.
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
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "srv/k3s.yaml.d/50-nodeprep.yaml")); err != nil {
		t.Errorf("drop-in not where k3s reads: %v", err)
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
	if !rep.Ready || rep.Join.DataDir != "/data/k3s" {
		t.Errorf("ready %v, data dir %q", rep.Ready, rep.Join.DataDir)
	}
	last := rep.Stages[len(rep.Stages)-1]
	if last.Name != "join" || last.Status != "warning" || !strings.Contains(strings.Join(last.Reasons, "\n"), "containerd-cdi-disabled") {
		t.Errorf("join stage %+v, want a warning naming containerd-cdi-disabled", last)
	}
}
