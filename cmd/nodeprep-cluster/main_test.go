package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
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
	// Not a timing assertion: a nodeprep that runs itself forever (see
	// TestClusterBrokenInstall) fails instead of hanging the test binary.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
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
		{"check on stdin, exit 1", manifest, []string{"--config", cfg, "cluster", "check", "-"}, 1, "job/j   gpu-workload  ✗ [1]\n"},
		{"usage error, exit 2", "", []string{"--config", cfg, "cluster", "check", ""}, 2, ""},
		{"mistyped command, exit 2", "", []string{"--config", cfg, "cluster", "rendr"}, 2, ""},
		{"help", "", []string{"help", "cluster"}, 0, "render"},
		{"help after a global flag", "", []string{"--root", root, "help", "cluster", "check"}, 0, "FILE|DIR|-"},
		{"help with a global flag", "", []string{"help", "-q", "cluster"}, 0, "render"},
		{"--help", "", []string{"cluster", "check", "--help"}, 0, "FILE|DIR|-"},
		{"completion", "", []string{"__complete", "cluster", "check", ""}, 0, "yaml\nyml\njson\n:8"},
		{"completion of a flag", "", []string{"__complete", "--root", "/", "cluster", "render", "--capa"}, 0, "--capacity-types"},
		{"completion after help", "", []string{"__complete", "help", "cluster", ""}, 0, "check\t"},
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
	if files, _ := filepath.Glob(filepath.Join(out, "*.yaml")); len(files) != 5 {
		t.Errorf("render --out wrote %d files, want 5", len(files))
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

// TestClusterBrokenInstall: when what sits beside nodeprep as
// nodeprep-cluster cannot serve `nodeprep cluster`, nodeprep says what is
// wrong with it, exits 69 and writes nothing (render --out makes no
// directory). A copy of or a link to nodeprep in its place must not run
// itself forever.
func TestClusterBrokenInstall(t *testing.T) {
	nodeprepBin, fullBin := binaries(t)
	nodeprepData, err := os.ReadFile(nodeprepBin)
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(fullBin)
	if err != nil {
		t.Fatal(err)
	}
	write := func(data []byte, mode os.FileMode) func(string) error {
		return func(p string) error { return os.WriteFile(p, data, mode) }
	}
	cases := []struct {
		name  string
		place func(p string) error // makes p, nodeprep-cluster beside nodeprep
		want  string               // in stderr
	}{
		{"missing", func(string) error { return nil }, "which is not installed beside"},
		{"dangling symlink", func(p string) error { return os.Symlink("/nonexistent/nodeprep-cluster", p) }, "which is not installed beside"},
		{"not executable", write(full, 0o644), "nodeprep-cluster is not executable (mode -rw-r--r--"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, "nodeprep-cluster is a directory, not the nodeprep-cluster executable"},
		{"not a program", write([]byte("not a program\n"), 0o755), "exec format error: it is not a program this machine can run"},
		{"missing interpreter", write([]byte("#!/nonexistent/sh\n"), 0o755), "no such file or directory: its interpreter or dynamic loader is missing"},
		{"a link to nodeprep", func(p string) error { return os.Symlink("nodeprep", p) }, "does not have them: it is a copy of or a link to nodeprep"},
		{"a copy of nodeprep", write(nodeprepData, 0o755), "does not have them: it is a copy of or a link to nodeprep"},
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("join:\n  labels: [pool=gpu]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			nodeprep, p := filepath.Join(dir, "nodeprep"), filepath.Join(dir, "nodeprep-cluster")
			if err := os.WriteFile(nodeprep, nodeprepData, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := c.place(p); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			r := run(t, "", nodeprep, "--config", cfg, "cluster", "render", "--out", out)
			if r.code != 69 || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("exit %d, want 69 and one line saying %q:\n%s", r.code, c.want, r.stderr)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("render --out made %s (%v)", out, err)
			}
		})
	}
}

// TestClusterThroughSymlink: nodeprep finds nodeprep-cluster beside the
// file it is, not beside the name it was called by: a profile's symlink
// (/usr/local/bin, ~/.nix-profile/bin, /run/current-system/sw/bin) to the
// real bin directory, found through PATH or called by a relative path
// from another directory.
func TestClusterThroughSymlink(t *testing.T) {
	nodeprepBin, _ := binaries(t)
	dir := t.TempDir()
	profile, cwd := filepath.Join(dir, "profile", "bin"), filepath.Join(dir, "work")
	for _, d := range []string{profile, cwd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(nodeprepBin, filepath.Join(profile, "nodeprep")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "config.yaml"), []byte("join:\n  labels: [pool=gpu]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string]*exec.Cmd{
		"PATH":          exec.Command("sh", "-c", `PATH="$1:$PATH" exec nodeprep --config config.yaml cluster render`, "sh", profile),
		"relative path": exec.Command(filepath.Join("..", "profile", "bin", "nodeprep"), "--config", "config.yaml", "cluster", "render"),
	} {
		cmd.Dir = cwd
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("%s: %v: %s", name, err, ee.Stderr)
		} else if err != nil || !strings.Contains(string(out), "kind: NodePool") {
			t.Errorf("%s: %v; stdout lacks the NodePool:\n%s", name, err, out)
		}
	}
}
