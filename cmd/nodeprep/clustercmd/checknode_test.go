package clustercmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
)

var fleetCorpus = filepath.Join("..", "..", "..", "testdata", "fleet")

// checkNodeArgs are check-node's arguments for a case of testdata/fleet:
// its facts, its manifests, the nixos-h200 spec in place of the
// synthesised one (but for the case generated), and the test stores.
func checkNodeArgs(dir string, extra ...string) []string {
	hosts := filepath.Join("..", "..", "..", "testdata", "hosts")
	args := []string{"cluster", "check-node", "--facts", filepath.Join(dir, "facts.json")}
	if !strings.HasPrefix(filepath.Base(dir), "generated") { // they judge the spec cdi/generate predicts
		args = append(args, "--spec-file", filepath.Join(hosts, "nixos-h200", "run", "cdi", "nvidia-container-toolkit.json"))
	}
	args = append(args,
		"--store-root", filepath.Join(fleetCorpus, "store"),
		"--store-root", filepath.Join(hosts, "nixos-h200"),
		"--store-root", filepath.Join(hosts, "nvruntime-nixos-117"))
	if _, err := os.Stat(filepath.Join(dir, "manifests")); err == nil {
		args = append(args, "--manifests", filepath.Join(dir, "manifests"))
	}
	return append(args, extra...)
}

// TestCheckNode runs `cluster check-node` on every case of
// testdata/fleet (README.md there): one per fault kind fails (exit 1)
// with nodeprep's reason naming the node, the good node passes (exit 0),
// and facts with a field nodeprep does not know are refused (exit 65,
// naming it). The text output is compared with expected.txt.
func TestCheckNode(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		code int
		says string // in the output
	}{
		"good":      {0, "ok: the node would be ready"},
		"generated": {0, "nvidia-container-toolkit.json patched in memory (11 changes) and checked"},
		// Issue 29: toolkit 1.20.0's update-application-profile hook and a
		// device plugin whose ConfigMap is mounted at /etc/nvidia.
		"generated-profile-hook": {1, "container nvidia-device-plugin-ctr mounts volume config read-only at /etc/nvidia: the node's CDI spec carries toolkit 1.20.0's update-application-profile hook"},
		"missing-library":        {1, "unresolved-library: vulkan-icd /run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json names /nix/store/0m1n2p3q4r5s6a7b8c9d0f1g2h3j4k5l-nvidia-x11-550.54.15-6.6.30/lib/libGLX_nvidia.so.0"},
		"template-cdi-off":       {1, "containerd-cdi-disabled: /var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl: enable_cdi = false"},
		"taint-refused":          {1, `taint "dedicated=gpu:NoSchedul": effect "NoSchedul" is not one of`},
		"kubelet-taint":          {1, "registerWithTaints (dedicated=gpu:NoSchedule) never reaches the node"},
		"untolerated":            {1, "untolerated taint nvidia.com/gpu=present:NoSchedule"},
		"no-handler":             {1, "k3s would register no NVIDIA runtime handler"},
		"unknown-field":          {65, `unknown field "nodeLabels"`},
	}
	dirs, _ := filepath.Glob(filepath.Join(fleetCorpus, "*", "facts.json"))
	if len(dirs) != len(want) {
		t.Errorf("%d cases in %s, want %d", len(dirs), fleetCorpus, len(want))
	}
	for _, facts := range dirs {
		dir := filepath.Dir(facts)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, ok := want[name]
			if !ok {
				t.Fatalf("no expectation for %s", name)
			}
			out, errOut, code := clusterRun(t, "", checkNodeArgs(dir)...)
			if code != w.code || !strings.Contains(out+errOut, w.says) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", code, w.code, w.says, out, errOut)
			}
			if code == 65 {
				return
			}
			var f struct{ Name string }
			data, err := os.ReadFile(facts)
			if err != nil || json.Unmarshal(data, &f) != nil {
				t.Fatal(err)
			}
			node := f.Name
			for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if !strings.HasPrefix(line, node+": ") {
					t.Errorf("line %q does not name the node", line)
				}
			}
			if !strings.Contains(out, node+": not judged without a GPU: the Vulkan and EGL adapter self-test") {
				t.Errorf("the output does not say what it cannot judge without a GPU:\n%s", out)
			}
			golden(t, filepath.Join(dir, "expected.txt"), out)
		})
	}
}

// TestCheckNodeJSON: -o json is the report, with the same verdict.
func TestCheckNodeJSON(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{"good": true, "no-handler": false} {
		node := map[string]string{"good": "gpu-01"}[name]
		if node == "" {
			node = name
		}
		out, _, code := clusterRun(t, "", append([]string{"-o", "json"}, checkNodeArgs(filepath.Join(fleetCorpus, name))...)...)
		var rep map[string]any
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if rep["ok"] != ok || rep["node"] != node || (code == 0) != ok {
			t.Errorf("%s: ok %v node %v exit %d, want ok %v", name, rep["ok"], rep["node"], code, ok)
		}
		if name == "good" {
			delete(rep, "durationMs")
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(fleetCorpus, name, "expected.json"), b.String())
		}
	}
}

// TestCheckNodeUsage: no facts, a missing facts file, and a facts file
// that is not one are told apart by exit code.
func TestCheckNodeUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"cluster", "check-node"}, 2},
		{[]string{"cluster", "check-node", "--facts", filepath.Join(fleetCorpus, "nope.json")}, 2},
		{[]string{"cluster", "check-node", "--facts", filepath.Join(fleetCorpus, "README.md")}, 65},
	} {
		if _, errOut, code := clusterRun(t, "", tt.args...); code != tt.code {
			t.Errorf("%q: exit %d, want %d\n%s", tt.args, code, tt.code, errOut)
		}
	}
}

// TestCheckNodeDocExamples: the check-node examples in docs/commands.md
// are what the command prints for testdata/fleet's cases (the facts file
// the example names, minus .json, is the case; gpu-01 is "good"): each
// line of an example is a line of the output, in order, "…" skipping
// lines, as TestCommandsDocExamples pins the cdi examples.
func TestCheckNodeDocExamples(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "$ nodeprep cluster check-node"):
			cur = line
			examples[cur] = nil
		case cur != "" && line == "```":
			cur = ""
		case cur != "":
			examples[cur] = append(examples[cur], line)
		}
	}
	if len(examples) < 2 {
		t.Fatalf("docs/commands.md has %d check-node examples, want the good node and no-handler", len(examples))
	}
	for command, lines := range examples {
		fields := strings.Fields(command)
		i := slices.Index(fields, "--facts")
		if i < 0 || i+1 == len(fields) {
			t.Fatalf("%q names no facts file", command)
		}
		name := strings.TrimSuffix(fields[i+1], ".json")
		if name == "gpu-01" {
			name = "good"
		}
		stdout, _, _ := clusterRun(t, "", checkNodeArgs(filepath.Join(fleetCorpus, name))...)
		out := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		elided, j := false, 0
		for _, l := range lines {
			if strings.TrimSpace(l) == "…" {
				elided = true
				continue
			}
			for j < len(out) && out[j] != l && elided {
				j++
			}
			if j == len(out) || out[j] != l {
				t.Fatalf("docs/commands.md's example line\n%s\nis not in the output of %s (in order):\n%s", l, name, stdout)
			}
			j++
		}
		if !elided && j != len(out) {
			t.Errorf("the example of %s stops before the output does:\n%s", name, stdout)
		}
	}
}

// TestCheckNodeSaysNoTreePath: when the generator refuses the facts (the
// good case's generator arguments, without --spec-file, name no
// nvidia-cdi-hook) the stages that had no spec say so in the node's
// paths, not in the throw-away tree's on this machine, and a stage the
// failure skipped says why.
func TestCheckNodeSaysNoTreePath(t *testing.T) {
	t.Parallel()
	args := checkNodeArgs(filepath.Join(fleetCorpus, "good"))
	i := slices.Index(args, "--spec-file")
	args = slices.Delete(args, i, i+2)
	for _, format := range []string{"text", "json"} {
		out, errOut, code := clusterRun(t, "", append(args, "-o", format)...)
		if code != 1 || !strings.Contains(out, "the toolkit's generator would write no CDI spec") {
			t.Fatalf("-o %s: exit %d, want 1 with the generator's refusal:\n%s%s", format, code, out, errOut)
		}
		if strings.Contains(out+errOut, "nodeprep-check-node-") {
			t.Errorf("-o %s names the throw-away tree:\n%s", format, out)
		}
		if format == "text" && regexp.MustCompile(`(?m)^gpu-01: - \S+ *$`).MatchString(out) {
			t.Errorf("a skipped check says nothing:\n%s", out)
		}
	}
}

// TestCheckNodeManifestsWithNothingToJudge: --manifests whose documents
// are no workload (or a directory with none) is a warning saying so, not
// "no manifests" as if none were given.
func TestCheckNodeManifestsWithNothingToJudge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := checkNodeArgs(filepath.Join(fleetCorpus, "generated"))
	i := slices.Index(args, "--manifests")
	args = slices.Delete(args, i, i+2) // the case's own
	for _, m := range []string{dir, t.TempDir()} {
		out, errOut, code := clusterRun(t, "", append(slices.Clone(args), "--manifests", m)...)
		if code != 0 || !strings.Contains(out, "! cluster check  nothing to judge in the manifests given") || strings.Contains(out, "no manifests") {
			t.Errorf("--manifests %s: exit %d, want 0 with a warning that nothing was judged:\n%s%s", m, code, out, errOut)
		}
	}
}

// TestCheckNodeReadsNoHostConfig: the config file of the machine the
// check runs on (here a malformed one under --root) neither fails nor
// changes the judgement: the node's config is in its facts.
func TestCheckNodeReadsNoHostConfig(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc", "nodeprep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "nodeprep", "config.yaml"), []byte("cdi: [not, a, map\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := clusterRun(t, "", checkNodeArgs(filepath.Join(fleetCorpus, "good"), "--root", root)...)
	if code != 0 {
		t.Errorf("exit %d with a malformed config file on this machine, want 0:\n%s%s", code, out, errOut)
	}
}

// TestCheckNodeStopped: once the command's context is done (SIGTERM or
// SIGINT), the judgement cut short is no verdict: an error naming the
// node, exit 1, whatever the judgement returned; before, errors pass.
func TestCheckNodeStopped(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	if err := stopped(ctx, "gpu-01", nil); err != nil {
		t.Errorf("stopped before the context is done: %v", err)
	}
	cancel()
	err := stopped(ctx, "gpu-01", nil)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "gpu-01: stopped") || app.ExitCode(err) != 1 {
		t.Errorf("stopped after SIGTERM: %v (exit %d), want an error naming the node, exit 1", err, app.ExitCode(err))
	}
}
