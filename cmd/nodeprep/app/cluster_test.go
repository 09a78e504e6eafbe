package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testkit"
)

var clusterCorpus = filepath.Join("..", "..", "..", "testdata", "cluster")

func clusterRun(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(args, IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	code = report(&errOut, err)
	return out.String(), errOut.String(), code
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *testkit.Update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n%s", path, got)
	}
}

// TestClusterCheckCorpus runs `cluster check` on every setup under
// testdata/cluster/ (a config.yaml and a manifests.yaml each) and compares
// the table and the JSON report with the expected files. The seed setups
// pass (exit 0); every broken variant fails (exit 1).
func TestClusterCheckCorpus(t *testing.T) {
	t.Parallel()
	dirs, _ := filepath.Glob(filepath.Join(clusterCorpus, "*", "config.yaml"))
	if len(dirs) < 12 {
		t.Fatalf("corpus has %d setups", len(dirs))
	}
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Relative names keep the sources in the golden files stable.
			manifests := filepath.Join(dir, "manifests.yaml")
			out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", manifests)
			wantCode := 1
			if strings.HasPrefix(name, "seed-") {
				wantCode = 0
			}
			if code != wantCode {
				t.Errorf("exit %d, want %d\n%s%s", code, wantCode, out, errOut)
			}
			golden(t, filepath.Join(dir, "expected.txt"), out)
			js, _, _ := clusterRun(t, "", "--config", cfg, "-o", "json", "cluster", "check", manifests)
			golden(t, filepath.Join(dir, "expected.json"), js)
		})
	}
}

// TestClusterRender: render's output for each seed config is the golden
// file, and check passes on it (from stdin, with nodeprep's real metrics).
func TestClusterRender(t *testing.T) {
	t.Parallel()
	for _, seed := range []string{"seed-sku", "seed-nvidia"} {
		t.Run(seed, func(t *testing.T) {
			t.Parallel()
			cfg := filepath.Join(clusterCorpus, seed, "config.yaml")
			out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--arch", "amd64",
				"--fallback-instance-types", "g5.xlarge,g5.2xlarge", "--max-gpus", "8", "--node-class", "karpenter.k8s.aws/EC2NodeClass/gpu")
			if code != 0 {
				t.Fatalf("render: exit %d\n%s", code, errOut)
			}
			golden(t, filepath.Join(clusterCorpus, seed, "render.yaml"), out)
			table, errOut, code := clusterRun(t, out, "--config", cfg, "cluster", "check", "-")
			if code != 0 || !strings.Contains(table, "ok: the manifests match the nodes") {
				t.Errorf("check on render's output: exit %d\n%s%s", code, table, errOut)
			}
		})
	}
}

func TestClusterRenderOut(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "out")
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	if _, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, f := range []string{"device-plugin-values.yaml", "job.yaml", "scaledjob.yaml", "nodepool.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.HasPrefix(data, []byte("# ")) {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The directory as a whole passes check.
	if out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", dir); code != 0 {
		t.Errorf("check --out dir: exit %d\n%s%s", code, out, errOut)
	}
}

func TestClusterUsage(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(empty, []byte("join: {}\n"), 0o644)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", empty, "cluster", "render"}, 2, "no pool label"},
		{[]string{"--config", empty, "cluster", "render", "--pool-label", "a=b", "--node-class", "x/y"}, 2, "group/kind/name"},
		{[]string{"--config", empty, "cluster", "render", "--pool-label", "bad label=x"}, 2, "--pool-label"},
		{[]string{"--config", empty, "cluster", "check"}, 2, "accepts 1 arg"},
		{[]string{"--config", empty, "cluster", "check", "/nonexistent/m.yaml"}, 69, "reading manifests"},
		{[]string{"--config", empty, "cluster", "check", "-"}, 0, "ok"},
	}
	for _, tt := range tests {
		out, errOut, code := clusterRun(t, "", tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("%v: exit %d, want %d naming %q\n%s%s", tt.args, code, tt.code, tt.want, out, errOut)
		}
	}
	// Malformed input: exit 65 naming the document.
	if _, errOut, code := clusterRun(t, "kind: Pod\napiVersion: v1\nspec: {containerz: []}\n", "--config", empty, "cluster", "check", "-"); code != 65 || !strings.Contains(errOut, "stdin#1") {
		t.Errorf("malformed: exit %d: %s", code, errOut)
	}
}
