package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testkit"
)

// binaries returns nodeprep and nodeprep-cluster, built side by side as
// installed (testkit.Binary; skipped with -short).
func binaries(t *testing.T) (nodeprep, full string) {
	t.Helper()
	nodeprep = testkit.Binary(t)
	return nodeprep, filepath.Join(filepath.Dir(nodeprep), "nodeprep-cluster")
}

type ran struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, stdin, bin string, args ...string) ran {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return ran{out.String(), errOut.String(), code}
}

// TestClusterForwarding: `nodeprep cluster …` is nodeprep-cluster's, run
// from beside nodeprep with the same arguments, global flags before the
// command included: the same output, stdin and exit code for the commands,
// their help and shell completion. Without nodeprep-cluster it says where
// it looked and exits 69, writing nothing.
func TestClusterForwarding(t *testing.T) {
	nodeprep, full := binaries(t)
	root := t.TempDir()
	cfg := filepath.Join(root, "config.yaml")
	if err := os.WriteFile(cfg, []byte("join:\n  labels: [pool=gpu]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out")
	manifest := "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      nodeSelector: {pool: gpu}\n      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]\n"
	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		has   string // in stdout
	}{
		{"render", "", []string{"--root", root, "--config", cfg, "cluster", "render"}, 0, "kind: NodePool"},
		{"render -o json", "", []string{"-o", "json", "--config", cfg, "cluster", "render", "--name", "x"}, 0, `"kind": "ScaledJob"`},
		{"check on stdin, exit 1", manifest, []string{"--config", cfg, "cluster", "check", "-"}, 1, "j"},
		{"usage error, exit 2", "", []string{"--config", cfg, "cluster", "check", ""}, 2, ""},
		{"help", "", []string{"help", "cluster"}, 0, "render"},
		{"--help", "", []string{"cluster", "check", "--help"}, 0, "FILE|DIR|-"},
		{"completion", "", []string{"__complete", "cluster", "check", ""}, 0, "yaml\nyml\njson\n:8"},
		{"completion of a flag", "", []string{"__complete", "--root", "/", "cluster", "render", "--capa"}, 0, "--capacity-types"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := run(t, c.stdin, nodeprep, c.args...)
			want := run(t, c.stdin, full, c.args...)
			if got != want {
				t.Errorf("nodeprep %q differs from nodeprep-cluster's:\n got %+v\nwant %+v", c.args, got, want)
			}
			if got.code != c.code || !strings.Contains(got.stdout, c.has) {
				t.Errorf("nodeprep %q: exit %d, want %d; stdout lacks %q:\n%s%s", c.args, got.code, c.code, c.has, got.stdout, got.stderr)
			}
		})
	}
	if r := run(t, "", nodeprep, "--config", cfg, "cluster", "render", "--out", out); r.code != 0 {
		t.Fatalf("render --out: exit %d: %s", r.code, r.stderr)
	}
	if files, _ := filepath.Glob(filepath.Join(out, "*.yaml")); len(files) != 4 {
		t.Errorf("render --out wrote %d files, want 4", len(files))
	}
	// Other commands stay in nodeprep.
	if r := run(t, "", nodeprep, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "nodeprep ") {
		t.Errorf("version: exit %d: %q", r.code, r.stdout)
	}

	// nodeprep alone.
	alone := filepath.Join(t.TempDir(), "nodeprep")
	data, err := os.ReadFile(nodeprep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(root, "out2")
	r := run(t, "", alone, "--config", cfg, "cluster", "render", "--out", out2)
	if r.code != 69 || !strings.Contains(r.stderr, "nodeprep-cluster, which is not installed beside "+alone) {
		t.Errorf("without nodeprep-cluster: exit %d, want 69 naming where it looked: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(out2); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("without nodeprep-cluster, render --out made %s (%v)", out2, err)
	}
	if r := run(t, "", alone, "help", "cluster"); r.code != 0 || !strings.Contains(r.stdout, "nodeprep-cluster") {
		t.Errorf("help cluster without nodeprep-cluster: exit %d, want 0 and a word on where the commands are: %s", r.code, r.stdout)
	}
}

// TestClusterExecutableIsFull: nodeprep-cluster answers every nodeprep
// command as nodeprep does (it is nodeprep with the cluster commands).
func TestClusterExecutableIsFull(t *testing.T) {
	nodeprep, full := binaries(t)
	for _, args := range [][]string{{"version"}, {"--help"}, {"cdi", "--help"}, {"up", "--simulate", "dgx-h999"}} {
		got := run(t, "", full, args...)
		want := run(t, "", nodeprep, args...)
		if got != want {
			t.Errorf("nodeprep-cluster %q differs from nodeprep:\n got %+v\nwant %+v", args, got, want)
		}
	}
}
