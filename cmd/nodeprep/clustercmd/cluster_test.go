package clustercmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

var clusterCorpus = filepath.Join("..", "..", "..", "testdata", "cluster")

func clusterRun(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := app.Run(args, app.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}, New)
	code = app.Report(&errOut, err)
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
				"--fallback-instance-types", "g5.xlarge,g5.2xlarge", "--max-gpus", "8", "--node-class", "karpenter.k8s.aws/EC2NodeClass/gpu", "--prometheus-address", "http://prometheus.monitoring.svc:9090", "--scrape-job", "gpu-pool", "--queue-name", "gpu-jobs", "--queue-host", "amqp://rabbitmq.queues.svc:5672/", "--image", "registry.example/gpu/app:1.2", "--fallback-instance-types", "g5.xlarge")
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
	if _, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir, "--node-class", "karpenter.k8s.aws/EC2NodeClass/gpu", "--prometheus-address", "http://prometheus.monitoring.svc:9090", "--scrape-job", "gpu-pool", "--queue-name", "gpu-jobs", "--queue-host", "amqp://rabbitmq.queues.svc:5672/", "--image", "registry.example/gpu/app:1.2", "--fallback-instance-types", "g5.xlarge"); code != 0 {
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
		{[]string{"--config", empty, "cluster", "check"}, 2, "takes one argument, FILE|DIR|-"},
		{[]string{"--config", empty, "cluster", "check", "a.yaml", "b.yaml"}, 2, "takes one argument, FILE|DIR|-"},
		{[]string{"--config", empty, "cluster", "check", "--pool-label", "a=b", "/nonexistent/m.yaml"}, 69, `reading manifests "/nonexistent/m.yaml": stat /nonexistent/m.yaml: no such file or directory`},
		{[]string{"--config", empty, "cluster", "check", "--pool-label", "a=b", "/nodeprep-nope"}, 69, `reading manifests "/nodeprep-nope": stat /nodeprep-nope: no such file or directory`},
		// An empty argument (an unset variable) is not the current directory.
		{[]string{"--config", empty, "cluster", "check", "--pool-label", "a=b", ""}, 2, `cluster check "": the argument is empty`},
		{[]string{"--config", empty, "cluster", "check", "--pool-label", "a=b", "-"}, 1, "nothing was checked"},
		// No pool label: check refuses it as render does.
		{[]string{"--config", empty, "cluster", "check", "-"}, 2, "checking the manifests: " + cluster.ErrNoPoolLabel.Error()},
		{[]string{"--root", t.TempDir(), "cluster", "check", "-"}, 2, cluster.ErrNoPoolLabel.Error()}, // no config file at all
		{[]string{"--config", empty, "cluster", "render"}, 2, "rendering the cluster manifests: " + cluster.ErrNoPoolLabel.Error()},
		// -o json and --out: one or the other.
		{[]string{"--config", empty, "-o", "json", "cluster", "render", "--pool-label", "a=b", "--out", t.TempDir()}, 2, "use one or the other"},
	}
	for _, tt := range tests {
		out, errOut, code := clusterRun(t, "", tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("%v: exit %d, want %d naming %q\n%s%s", tt.args, code, tt.code, tt.want, out, errOut)
		}
	}
	// Malformed input: exit 65 naming the document.
	if _, errOut, code := clusterRun(t, "kind: Pod\napiVersion: v1\nspec: {containerz: []}\n", "--config", empty, "cluster", "check", "--pool-label", "a=b", "-"); code != 65 || !strings.Contains(errOut, "stdin#1") {
		t.Errorf("malformed: exit %d: %s", code, errOut)
	}
}

// TestClusterCheckNothing: a check that judges nothing fails (exit 1) and
// says why, once, on stderr (nothing on stdout), or in JSON: an empty directory, /dev/null, an empty
// file, empty stdin, a directory holding only the config, and manifests
// with nothing to do with the pool.
func TestClusterCheckNothing(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	dir := t.TempDir()
	emptyDir := filepath.Join(dir, "empty")
	emptyFile := filepath.Join(dir, "empty.yaml")
	onlyConfig := filepath.Join(dir, "only-config")
	unrelated := filepath.Join(dir, "web.yaml")
	os.Mkdir(emptyDir, 0o755)
	os.WriteFile(emptyFile, nil, 0o644)
	os.Mkdir(onlyConfig, 0o755)
	copyFile(t, cfg, filepath.Join(onlyConfig, "config.yaml"))
	os.WriteFile(unrelated, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: c, image: nginx}]}}}\n"), 0o644)
	tests := []struct{ src, want string }{
		{emptyDir, "no manifests found in " + emptyDir},
		{os.DevNull, "no manifests found in " + os.DevNull},
		{emptyFile, "no manifests found in " + emptyFile},
		{"-", "no manifests found in stdin"},
		{onlyConfig, "(0 objects, 1 skipped document)"},
		{unrelated, "(1 object, 0 skipped documents)"},
	}
	for _, tt := range tests {
		out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", tt.src)
		if code != 1 || !strings.Contains(errOut, tt.want) || strings.Count(out+errOut, "nothing was checked") != 1 || strings.Count(errOut, "\n") != 1 || out != "" {
			t.Errorf("%s: exit %d, want 1 naming %q\n%s%s", tt.src, code, tt.want, out, errOut)
		}
		js, _, code := clusterRun(t, "", "--config", cfg, "-o", "json", "cluster", "check", tt.src)
		var rep cluster.Report
		if err := json.Unmarshal([]byte(js), &rep); err != nil || rep.OK || code != 1 {
			t.Errorf("%s -o json: exit %d, ok %v (%v)\n%s", tt.src, code, rep.OK, err, js)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClusterCheckDirWithConfig: a directory holding the nodes' config.yaml
// next to the manifests is checked as the manifests alone; the config is
// counted as not judged. A manifest with several decode errors gets one
// line on stderr.
func TestClusterCheckDirWithConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []string{"config.yaml", "manifests.yaml"} {
		copyFile(t, filepath.Join(clusterCorpus, "wrong-effect", f), filepath.Join(dir, f))
	}
	cfg := filepath.Join(dir, "config.yaml")
	out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", dir)
	if code != 1 || !strings.Contains(out, "effect NoExecute, not NoSchedule") || !strings.Contains(out, "; 1 nodeprep config\n") ||
		!strings.Contains(out, "FAILED: 2 problems\n") || strings.Contains(out+errOut, "unknown field") {
		t.Errorf("exit %d, want 1 with the wrong effect and the config not judged\n%s%s", code, out, errOut)
	}
	// The seed's manifests and its config: all pass.
	for _, f := range []string{"config.yaml", "manifests.yaml"} {
		copyFile(t, filepath.Join(clusterCorpus, "seed-sku", f), filepath.Join(dir, f))
	}
	if out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", dir); code != 0 || !strings.Contains(out, "ok: the manifests match the nodes") {
		t.Errorf("seed-sku with its config: exit %d\n%s%s", code, out, errOut)
	}
	// Neither values nor a config: exit 65, one line naming both fields.
	bad := filepath.Join(dir, "zz-bad.yaml")
	os.WriteFile(bad, []byte("nodeSelectr: {a: b}\ntoleration: []\n"), 0o644)
	_, errOut, code = clusterRun(t, "", "--config", cfg, "cluster", "check", dir)
	if code != 65 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `unknown field "nodeSelectr"; unknown field "toleration"`) {
		t.Errorf("exit %d, want 65 with one line naming both fields:\n%s", code, errOut)
	}
}

// TestClusterRenderOutput: -o json prints one JSON list of the documents,
// which check reads back and passes; -o yaml is the YAML stream.
func TestClusterRenderOutput(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	nc := []string{"--node-class=karpenter.k8s.aws/EC2NodeClass/gpu", "--prometheus-address=http://prometheus.monitoring.svc:9090", "--scrape-job=gpu-pool", "--queue-name=gpu-jobs", "--queue-host=amqp://rabbitmq.queues.svc:5672/", "--image=registry.example/gpu/app:1.2", "--fallback-instance-types=g5.xlarge"}
	text, _, code := clusterRun(t, "", append([]string{"--config", cfg, "cluster", "render"}, nc...)...)
	if code != 0 {
		t.Fatalf("render: exit %d", code)
	}
	js, errOut, code := clusterRun(t, "", append([]string{"--config", cfg, "-o", "json", "cluster", "render"}, nc...)...)
	var docs []map[string]any
	if err := json.Unmarshal([]byte(js), &docs); code != 0 || err != nil || len(docs) != 4 {
		t.Fatalf("-o json: exit %d, %d documents (%v)\n%s%s", code, len(docs), err, js, errOut)
	}
	if docs[3]["kind"] != "NodePool" || docs[1]["kind"] != "Job" {
		t.Errorf("-o json documents out of order: %v, %v", docs[1]["kind"], docs[3]["kind"])
	}
	if out, errOut, code := clusterRun(t, js, "--config", cfg, "cluster", "check", "-"); code != 0 || !strings.Contains(out, "ok: the manifests match the nodes") {
		t.Errorf("check on -o json: exit %d\n%s%s", code, out, errOut)
	}
	if y, _, code := clusterRun(t, "", append([]string{"--config", cfg, "-o", "yaml", "cluster", "render"}, nc...)...); code != 0 || y != text {
		t.Errorf("-o yaml: exit %d, differs from the text stream", code)
	}
}

// complete runs cobra's hidden __complete command, as the shell scripts of
// `nodeprep completion` do, and returns the candidates and the directive.
func complete(t *testing.T, args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	stdout, stderr, code := clusterRun(t, "", append([]string{cobra.ShellCompRequestCmd}, args...)...)
	if code != app.ExitOK {
		t.Fatalf("__complete %q: exit %d: %s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	d, err := strconv.Atoi(strings.TrimPrefix(lines[len(lines)-1], ":"))
	if err != nil {
		t.Fatalf("__complete %q: no directive line: %q", args, stdout)
	}
	return lines[:len(lines)-1], cobra.ShellCompDirective(d)
}

// TestClusterCheckCompletion: check's argument completes as manifest files
// and directories; a second argument gets nothing.
func TestClusterCheckCompletion(t *testing.T) {
	t.Parallel()
	got, d := complete(t, "cluster", "check", "")
	if strings.Join(got, " ") != "yaml yml json" || d != cobra.ShellCompDirectiveFilterFileExt {
		t.Errorf("candidates %q directive %d, want yaml yml json, FilterFileExt", got, d)
	}
	if got, d := complete(t, "cluster", "check", "m.yaml", ""); len(got) != 0 || d != cobra.ShellCompDirectiveNoFileComp {
		t.Errorf("second argument: candidates %q directive %d, want none, NoFileComp", got, d)
	}
}

// TestClusterHelpDefaults: each cluster flag's help says its default once:
// the flag library's "(default X)" or the text's own, not both.
func TestClusterHelpDefaults(t *testing.T) {
	t.Parallel()
	root := app.NewRootCommand(app.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, New)
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, l := range strings.Split(strings.TrimSpace(c.LocalFlags().FlagUsages()), "\n") {
			if l == "" {
				continue
			}
			n++
			if strings.Count(l, "(default") > 1 {
				t.Errorf("%s: a default said twice: %s", c.CommandPath(), strings.TrimSpace(l))
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range root.Commands() {
		if c.Name() == "cluster" {
			walk(c)
		}
	}
	if n < 10 {
		t.Fatalf("visited %d flags", n)
	}
}

// runGuarded runs nodeprep with args and stdin under ctx and fails the
// test if it has not returned after a minute: a hang guard, not a timing
// target.
func runGuarded(t *testing.T, ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		root := app.NewRootCommand(app.IOStreams{In: stdin, Out: &out, ErrOut: &errOut}, New)
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		done <- app.Report(&errOut, err)
	}()
	select {
	case code = <-done:
		return out.String(), errOut.String(), code
	case <-time.After(time.Minute):
		t.Fatalf("%v does not return", args)
		return "", "", 0
	}
}

// TestClusterCheckNotRegular: check refuses a named pipe, named or in a
// directory, and a directory's dangling symlink, with exit 65 naming the
// path, instead of blocking in open().
func TestClusterCheckNotRegular(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	dir := filepath.Join(t.TempDir(), "d1")
	os.Mkdir(dir, 0o755)
	copyFile(t, filepath.Join(clusterCorpus, "seed-sku", "manifests.yaml"), filepath.Join(dir, "a.yaml"))
	fifo := filepath.Join(dir, "f.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{fifo, dir} {
		_, errOut, code := runGuarded(t, context.Background(), strings.NewReader(""), "--config", cfg, "cluster", "check", src)
		if code != 65 || !strings.Contains(errOut, "f.yaml") || !strings.Contains(errOut, "a named pipe (FIFO)") {
			t.Errorf("%s: exit %d, want 65 naming the FIFO\n%s", src, code, errOut)
		}
	}
	os.Remove(fifo)
	os.Symlink("gone.yaml", filepath.Join(dir, "l.yaml"))
	if _, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", dir); code != 65 || !strings.Contains(errOut, `l.yaml" is a symlink that does not resolve`) {
		t.Errorf("dangling symlink: exit %d, want 65 naming it\n%s", code, errOut)
	}
}

// TestClusterCheckKubeconfigNotRegular: `check --kubeconfig` refuses a
// kubeconfig, or a CA or client file it names, that is a named pipe (whose
// open would block until a writer comes), a device that never ends
// (/dev/zero) or a file over bounded.MaxKubeconfig, with exit 65 naming
// it, instead of hanging or reading it into memory.
func TestClusterCheckKubeconfigNotRegular(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, bounded.MaxKubeconfig+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	naming := func(name, ca, cert string) string {
		p := filepath.Join(dir, name)
		kc := "apiVersion: v1\nkind: Config\ncurrent-context: x\n" +
			"clusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\", certificate-authority: \"" + ca + "\"}\n" +
			"contexts:\n- name: x\n  context: {cluster: c, user: u}\n" +
			"users:\n- name: u\n  user: {client-certificate: \"" + cert + "\", client-key: \"" + cert + "\"}\n"
		if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct{ name, kubeconfig, message string }{
		{"FIFO", fifo, "fifo is a named pipe (FIFO)"},
		{"/dev/zero", "/dev/zero", "/dev/zero is a character device"},
		{"too large", big, "big has 1048577 bytes, more than the 1 MiB this file may have"},
		{"CA a FIFO", naming("ca-fifo.yaml", "fifo", "/dev/null"), "reading the CA that kubeconfig " + filepath.Join(dir, "ca-fifo.yaml") + " names: " + fifo + " is a named pipe (FIFO)"},
		{"client certificate /dev/zero", naming("cert-zero.yaml", "", "/dev/zero"), "reading the client certificate that kubeconfig " + filepath.Join(dir, "cert-zero.yaml") + " names: /dev/zero is a character device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := runGuarded(t, context.Background(), strings.NewReader(""), "--config", cfg, "cluster", "check", "--kubeconfig", tt.kubeconfig)
			if code != app.ExitMalformed || !strings.Contains(errOut, tt.message) {
				t.Errorf("exit %d, want %d naming %q\n%s", code, app.ExitMalformed, tt.message, errOut)
			}
		})
	}
}

// TestClusterCheckStdinCancelled: `check -` on a stdin that never sends
// anything returns when the command's context is cancelled (SIGTERM and
// SIGINT cancel it), saying so.
func TestClusterCheckStdinCancelled(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	pr, pw := io.Pipe() // an idle stdin: nothing written, never closed
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	out, errOut, code := runGuarded(t, ctx, pr, "--config", cfg, "cluster", "check", "-")
	if code != 1 || !strings.Contains(errOut, "cancelled while reading stdin") || out != "" {
		t.Errorf("exit %d, want 1 saying it was cancelled\n%s%s", code, out, errOut)
	}
}

// TestClusterCheckEscapesNames: a name holding a right-to-left override or
// an escape sequence is printed escaped in the table and its notes.
func TestClusterCheckEscapesNames(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	manifest := "apiVersion: batch/v1\nkind: Job\nmetadata: {name: \"evil\u202egpj\", namespace: \"n\\x1b[31m\"}\n" +
		"spec: {template: {spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}}}\n"
	out, errOut, code := clusterRun(t, manifest, "--config", cfg, "cluster", "check", "-")
	if code != 1 || !strings.Contains(out, `job/n\x1b[31m/evil\u202egpj`) || strings.ContainsAny(out, "\u202e\x1b") {
		t.Errorf("exit %d, want the names escaped\n%s%s", code, out, errOut)
	}
}

// TestClusterCheckBadGPUQuantity: a negative GPU request is malformed input
// naming the object and the field, not "no GPU request".
func TestClusterCheckBadGPUQuantity(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	for gpu, want := range map[string]string{
		"-3":     `job/default/j: spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: -3: want a whole number`,
		`"lots"`: `job/default/j: spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: "lots" is not a quantity`,
	} {
		manifest := "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: default}\n" +
			"spec: {template: {spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: " + gpu + "}}}]}}}\n"
		if _, errOut, code := clusterRun(t, manifest, "--config", cfg, "cluster", "check", "-"); code != 65 || !strings.Contains(errOut, "stdin#1: "+want) {
			t.Errorf("nvidia.com/gpu %s: exit %d, want 65 naming %q\n%s", gpu, code, want, errOut)
		}
	}
}

// TestClusterRenderBadValues: a bad instance type, Prometheus address or
// node class is exit 65 naming the config key when it comes from the
// config file, exit 2 naming the flag when it comes from the command line;
// a bad name, namespace, image, capacity type, or a non-positive duration
// (a negative consolidateAfter) is exit 2 naming the flag and the value;
// nothing is written.
func TestClusterRenderBadValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := func(cluster string) string {
		p := filepath.Join(dir, fmt.Sprintf("config%d.yaml", len(cluster)))
		os.WriteFile(p, []byte("join: {labels: [payload=task_runner]}\ncluster:\n"+cluster), 0o644)
		return p
	}
	good := config("  poolLabel: payload=task_runner\n")
	out := filepath.Join(dir, "out")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", config("  fallbackInstanceTypes: [\"\"]\n")}, 65, `cluster.fallbackInstanceTypes: instance type "" is empty`},
		{[]string{"--config", config("  fallbackInstanceTypes: [\"g5.xlarge\\nx\"]\n")}, 65, `cluster.fallbackInstanceTypes: instance type "g5.xlarge\nx"`},
		{[]string{"--config", config("  prometheusAddress: not a url\n")}, 65, `cluster.prometheusAddress: "not a url": want an absolute http:// or https:// URL`},
		{[]string{"--config", config("  prometheusAddress: http://\n")}, 65, `cluster.prometheusAddress: "http://": the URL has no host`},
		{[]string{"--config", config("  nodeClass: a/b\n")}, 65, `cluster.nodeClass: "a/b": want group/kind/name`},
		{[]string{"--config", config("  queueHost: http://rabbitmq:15672\n")}, 65, `cluster.queueHost: "http://rabbitmq:15672": want an absolute amqp:// or amqps:// URL`},
		{[]string{"--config", config("  queueName: \"a b\"\n")}, 65, `cluster.queueName: queue name "a b": whitespace`},
		{[]string{"--config", config("  scrapeJob: 'j\"'\n")}, 65, `cluster.scrapeJob: scrape job "j\"": whitespace, control characters, quotes`},
		{[]string{"--config", good, "cluster", "render", "--queue-host", "amqp://u:pw@"}, 2, `--queue-host: "amqp://u:xxxxx@": the URL has no host`},
		{[]string{"--config", good, "cluster", "render", "--queue-name", ""}, 2, `--queue-name: queue name "" is empty`},
		{[]string{"--config", good, "cluster", "render", "--scrape-job", "a b"}, 2, `--scrape-job: scrape job "a b": whitespace`},
		{[]string{"--config", good, "cluster", "render", "--queue-metric", "a-b"}, 2, `--queue-metric: queue metric "a-b": want a Prometheus metric name`},
		{[]string{"--config", good, "cluster", "render", "--queue-backlog", "0"}, 2, `--queue-backlog 0: want 1 or more`},
		{[]string{"--config", good, "cluster", "render", "--fallback-instance-types", "a b"}, 2, `--fallback-instance-types: instance type "a b"`},
		{[]string{"--config", good, "cluster", "render", "--fallback-instance-types", ""}, 2, `--fallback-instance-types "": give one or more`},
		{[]string{"--config", good, "cluster", "render", "--fallback-instance-types", "a,"}, 2, `--fallback-instance-types: instance type "" is empty`},
		{[]string{"--config", good, "cluster", "render", "--prometheus-address", "ftp://p:9090"}, 2, `--prometheus-address: "ftp://p:9090": want an absolute http`},
		{[]string{"--config", good, "cluster", "render", "--node-class", "a/b/c d"}, 2, `--node-class: "a/b/c d": whitespace`},
		{[]string{"--config", good, "cluster", "render", "--name", "x/y"}, 2, `--name: name "x/y": a lowercase RFC 1123 subdomain`},
		{[]string{"--config", good, "cluster", "render", "--name", ""}, 2, `--name: name "": a lowercase RFC 1123 subdomain`},
		{[]string{"--config", good, "cluster", "render", "--name", strings.Repeat("a", 250)}, 2, `-fallback": must be no more than 253 characters`},
		{[]string{"--config", good, "cluster", "render", "--namespace", "Bad_NS"}, 2, `--namespace: namespace "Bad_NS": a lowercase RFC 1123 label`},
		{[]string{"--config", good, "cluster", "render", "--namespace", "a.b"}, 2, `--namespace: namespace "a.b"`},
		{[]string{"--config", good, "cluster", "render", "--image", "bad image ref"}, 2, `--image: image "bad image ref": whitespace or control characters`},
		{[]string{"--config", good, "cluster", "render", "--image", "r/i:t\x1b"}, 2, `--image: image "r/i:t\x1b": whitespace`},
		{[]string{"--config", good, "cluster", "render", "--image", ""}, 2, `--image: image "" is empty`},
		{[]string{"--config", good, "cluster", "render", "--capacity-types", "bogus"}, 2, `--capacity-types: capacity type "bogus": want one of on-demand, spot, reserved`},
		{[]string{"--config", good, "cluster", "render", "--capacity-types", "spot,"}, 2, `--capacity-types: capacity type "": want one of`},
		{[]string{"--config", good, "cluster", "render", "--capacity-types", ""}, 2, `--capacity-types: "": want one or more of on-demand, spot, reserved`},
		{[]string{"--config", good, "cluster", "render", "--health-interval", "0s"}, 2, `--health-interval: health interval 0s: want a positive duration`},
		{[]string{"--config", good, "cluster", "render", "--health-interval", "-5m"}, 2, `--health-interval: health interval -5m0s: want a positive duration`},
		{[]string{"--config", good, "cluster", "render", "--health-interval", "1500ms"}, 2, `--health-interval: health interval 1.5s: want whole seconds`},
		{[]string{"--config", good, "cluster", "render", "--consolidate-after", "-1m"}, 2, `--consolidate-after: consolidateAfter -1m0s: want 0s or a positive duration`},
		{[]string{"--config", good, "cluster", "render", "--consolidate-after", "90.5s"}, 2, `--consolidate-after: consolidateAfter 1m30.5s: want whole seconds`},
	}
	for _, tt := range tests {
		args := tt.args
		if len(args) == 2 {
			args = append(args, "cluster", "render")
		}
		args = append(args, "--out", out)
		stdout, errOut, code := clusterRun(t, "", args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, want %d naming %q\n%s%s", args, code, tt.code, tt.want, stdout, errOut)
		}
		if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v: --out made: %v", args, err)
		}
	}
}

// TestClusterRenderOutAllOrNothing: when one target cannot be replaced (a
// symlink, an immutable file, a directory), render exits 73 naming its
// full path and every old file is as it was; a new --out directory is not
// left behind.
func TestClusterRenderOutAllOrNothing(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	files := []string{"device-plugin-values.yaml", "job.yaml", "scaledjob.yaml", "nodepool.yaml"}
	setup := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "out")
		os.Mkdir(dir, 0o755)
		for _, f := range files {
			os.WriteFile(filepath.Join(dir, f), []byte("old "+f), 0o600)
		}
		return dir
	}
	unchanged := func(t *testing.T, dir string, skip string) {
		t.Helper()
		for _, f := range files {
			if f == skip {
				continue
			}
			if data, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(data) != "old "+f {
				t.Errorf("%s changed: %q %v", f, data, err)
			}
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != len(files) {
			t.Errorf("%d entries in --out, want %d (no temporary or backup files)", len(ents), len(files))
		}
	}
	// refused renders into dir and wants exit 73 naming target and why.
	refused := func(t *testing.T, dir, target, why string) {
		t.Helper()
		_, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir)
		if code != 73 || !strings.Contains(errOut, strconv.Quote(target)+": "+why) {
			t.Errorf("exit %d, want 73 naming %s\n%s", code, target, errOut)
		}
	}
	t.Run("symlink", func(t *testing.T) {
		t.Parallel()
		dir := setup(t)
		target := filepath.Join(dir, "scaledjob.yaml")
		os.Remove(target)
		os.Symlink("/etc/passwd", target)
		refused(t, dir, target, "it is a symlink")
		unchanged(t, dir, "scaledjob.yaml")
	})
	// --out a symlink to a directory: its files would be replaced
	// through it. Refused, with or without a trailing slash.
	t.Run("symlinked out", func(t *testing.T) {
		t.Parallel()
		dir := setup(t)
		link := filepath.Join(t.TempDir(), "link")
		os.Symlink(dir, link)
		for _, out := range []string{link, link + "/"} {
			refused(t, out, out, "it is a symlink")
		}
		unchanged(t, dir, "")
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		dir := setup(t)
		target := filepath.Join(dir, "nodepool.yaml")
		os.Remove(target)
		os.Mkdir(target, 0o755)
		refused(t, dir, target, "it is a directory")
		unchanged(t, dir, "nodepool.yaml")
	})
	t.Run("immutable", func(t *testing.T) {
		t.Parallel()
		dir := setup(t)
		target := filepath.Join(dir, "scaledjob.yaml")
		if out, err := exec.Command("chattr", "+i", target).CombinedOutput(); err != nil {
			t.Skipf("chattr +i (needs root and a file system with the flag): %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", target).Run() })
		refused(t, dir, target, "it cannot be replaced (immutable")
		unchanged(t, dir, "")
	})
	t.Run("new directory", func(t *testing.T) {
		t.Parallel()
		parent := t.TempDir()
		os.Chmod(parent, 0o500)
		t.Cleanup(func() { os.Chmod(parent, 0o755) })
		dir := filepath.Join(parent, "out")
		if os.Geteuid() == 0 {
			// root writes anyway: make the failure a symlink-free clash instead
			os.Chmod(parent, 0o755)
			os.WriteFile(filepath.Join(parent, "blocker"), nil, 0o644)
			dir = filepath.Join(parent, "blocker", "out")
		}
		if _, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir); code != 73 || !strings.Contains(errOut, strconv.Quote(dir)) {
			t.Errorf("exit %d, want 73 naming %s\n%s", code, dir, errOut)
		}
	})
	t.Run("replaces all", func(t *testing.T) {
		t.Parallel()
		dir := setup(t)
		out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir)
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
		for _, f := range files {
			p := filepath.Join(dir, f)
			st, err := os.Stat(p)
			if err != nil || st.Mode().Perm() != 0o600 || !strings.Contains(out, "wrote "+p+"\n") {
				t.Errorf("%s: %v, mode %v (want the old file's 0600)", f, err, st.Mode())
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != len(files) {
			t.Errorf("%d entries, want %d", len(ents), len(files))
		}
	})
}

// TestClusterCheckStdinSIGTERM: the real binary, `check -` on an idle pipe,
// ends on SIGTERM with exit 1 saying it was cancelled. A SIGTERM that lands
// before the process installs its handler kills it outright; that try is
// repeated (it says nothing about the read).
func TestClusterCheckStdinSIGTERM(t *testing.T) {
	t.Parallel()
	bin := testkit.Binary(t)
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	for try := 0; try < 5; try++ {
		cmd := exec.Command(bin, "--config", cfg, "cluster", "check", "-")
		stdin, err := cmd.StdinPipe() // kept open and idle
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Fatal("check - did not end on SIGTERM") // a hang guard, not a timing target
		}
		stdin.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("exit: %v, want status 1", err)
		}
		if ee.ExitCode() == -1 { // killed by the signal: it came too early
			continue
		}
		if ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "cancelled while reading stdin") {
			t.Errorf("exit %d, want 1 saying cancelled\n%s", ee.ExitCode(), stderr.String())
		}
		return
	}
	t.Fatal("every SIGTERM came before the handler was installed")
}

// TestClusterRenderDurations: --consolidate-after 0s is Karpenter's "remove
// an empty node at once" and is rendered as 0s, not replaced by the 5m
// default; render's output with it, reserved and spot capacity, a named
// image and names passes check.
func TestClusterRenderDurations(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	dir := t.TempDir()
	_, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir, "--consolidate-after", "0s",
		"--health-interval", "90s", "--capacity-types", "reserved,spot", "--image", "registry.example/gpu/app:1.2",
		"--name", "train.v2", "--namespace", "ml-jobs", "--node-class", "karpenter.k8s.aws/EC2NodeClass/gpu", "--prometheus-address", "http://prometheus.monitoring.svc:9090", "--scrape-job", "gpu-pool", "--queue-name", "gpu-jobs", "--queue-host", "amqp://rabbitmq.queues.svc:5672/", "--image", "registry.example/gpu/app:1.2", "--fallback-instance-types", "g5.xlarge")
	if code != 0 {
		t.Fatalf("render: exit %d\n%s", code, errOut)
	}
	np, err := os.ReadFile(filepath.Join(dir, "nodepool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"consolidateAfter: 0s\n", "name: train.v2-fallback\n", "- reserved\n        - spot\n"} {
		if !strings.Contains(string(np), want) {
			t.Errorf("nodepool.yaml lacks %q:\n%s", want, np)
		}
	}
	sj, _ := os.ReadFile(filepath.Join(dir, "scaledjob.yaml"))
	if !strings.Contains(string(sj), "< 270)") || !strings.Contains(string(sj), "namespace: ml-jobs") {
		t.Errorf("scaledjob.yaml: want staleness 270 s (3 × 90s) and namespace ml-jobs:\n%s", sj)
	}
	if out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", dir); code != 0 {
		t.Errorf("check of the render: exit %d\n%s%s", code, out, errOut)
	}
}

// TestClusterCheckBadNodePoolValues: check refuses, as malformed input
// (exit 65) naming the field and the value, a NodePool whose
// consolidateAfter Karpenter's CRD refuses or whose capacity-type
// requirement names no capacity type, as render would never write them.
func TestClusterCheckBadNodePoolValues(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	dir := t.TempDir()
	if _, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--out", dir, "--node-class", "karpenter.k8s.aws/EC2NodeClass/gpu", "--prometheus-address", "http://prometheus.monitoring.svc:9090", "--scrape-job", "gpu-pool", "--queue-name", "gpu-jobs", "--queue-host", "amqp://rabbitmq.queues.svc:5672/", "--image", "registry.example/gpu/app:1.2", "--fallback-instance-types", "g5.xlarge"); code != 0 {
		t.Fatalf("render: exit %d\n%s", code, errOut)
	}
	orig, err := os.ReadFile(filepath.Join(dir, "nodepool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ old, new, want string }{
		{"consolidateAfter: 5m", "consolidateAfter: -1m", `spec.disruption.consolidateAfter "-1m": want a duration of whole s, m or h`},
		{"consolidateAfter: 5m", "consolidateAfter: 1.5m", `consolidateAfter "1.5m"`},
		{"- on-demand", "- bogus", `spec.template.spec.requirements[1]: capacity type "bogus": want one of on-demand, spot, reserved`},
	} {
		bad := strings.Replace(string(orig), tt.old, tt.new, 1)
		if bad == string(orig) {
			t.Fatalf("nodepool.yaml has no %q", tt.old)
		}
		_, errOut, code := clusterRun(t, bad, "--config", cfg, "cluster", "check", "-")
		if code != 65 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%s: exit %d, want 65 naming %q\n%s", tt.new, code, tt.want, errOut)
		}
	}
	for _, ok := range []string{"0s", "Never", "1h30m"} {
		good := strings.Replace(string(orig), "consolidateAfter: 5m", "consolidateAfter: "+ok, 1)
		if _, errOut, code := clusterRun(t, good, "--config", cfg, "cluster", "check", "-"); code == 65 {
			t.Errorf("consolidateAfter %s refused: %s", ok, errOut)
		}
	}
}

// TestClusterCheckKubeconfigAndFiles: `cluster check --kubeconfig K DIR`
// is a usage error (exit 2) naming both, not a check of DIR that drops
// the kubeconfig without a word (and never reaches the cluster).
func TestClusterCheckKubeconfigAndFiles(t *testing.T) {
	t.Parallel()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "..", "testdata", "fleet", "good", "manifests")
	out, errOut, code := clusterRun(t, "", "cluster", "check", "--pool-label", "nodeprep.dev/pool=gpu", "--kubeconfig", kc, dir)
	if code != 2 || !strings.Contains(errOut, "not both") {
		t.Errorf("exit %d, want 2 saying not both:\n%s%s", code, out, errOut)
	}
}
