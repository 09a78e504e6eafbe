package app

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

const joinDropIn = "/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml"

// joinHost makes a host root holding files (host path → content).
func joinHost(t *testing.T, files map[string]string) string {
	t.Helper()
	return testkit.HostFiles(t, files)
}

func joinRun(t *testing.T, root string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"--root", root, "join"}, args...)
	err := Run(args, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	code = report(&errOut, err)
	return out.String(), errOut.String(), code
}

func goldenH200(t *testing.T) string {
	t.Helper()
	want, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "k3s", "dgx-h200", "50-nodeprep.yaml"))
	if err != nil {
		t.Fatalf("golden drop-in (go test ./nodeprep -update writes it): %v", err)
	}
	return string(want)
}

func TestJoinSimulatedH200(t *testing.T) {
	t.Parallel()
	root := joinHost(t, map[string]string{"/etc/rancher/k3s/config.yaml": "token: x\nnode-label: [site=lab]\n"})
	out, errOut, code := joinRun(t, root, "--simulate", "dgx-h200")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	data, err := os.ReadFile(filepath.Join(root, joinDropIn))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != goldenH200(t) {
		t.Errorf("drop-in =\n%s\nwant the golden file", data)
	}
	st, _ := os.Stat(filepath.Join(root, joinDropIn))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	for _, want := range []string{"wrote " + joinDropIn, "15 labels, 1 taint)", "site=lab", "/etc/rancher/k3s/config.yaml", "nvidia.com/gpu=present:NoSchedule"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, _, code = joinRun(t, root, "--simulate", "dgx-h200")
	if code != 0 || !strings.Contains(out, "unchanged "+joinDropIn) {
		t.Errorf("second run: exit %d, output %s; want unchanged", code, out)
	}
}

func TestJoinDryRun(t *testing.T) {
	t.Parallel()
	root := joinHost(t, nil)
	out, errOut, code := joinRun(t, root, "--simulate", "dgx-h200", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if out != goldenH200(t) {
		t.Errorf("dry run printed\n%s\nwant the golden drop-in", out)
	}
	if _, err := os.Lstat(filepath.Join(root, "/etc/rancher")); err == nil {
		t.Error("dry run wrote to the host")
	}
}

func TestJoinJSON(t *testing.T) {
	t.Parallel()
	root := joinHost(t, nil)
	out, errOut, code := joinRun(t, root, "--gfd-labels=false", "--label", "site=lab", "--taint", "x=y:NoExecute", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var got struct {
		DropInPath string   `json:"dropInPath"`
		Labels     []string `json:"labels"`
		Taints     []string `json:"taints"`
		Written    bool     `json:"written"`
		Effective  struct {
			NodeTaints []struct{ Value, Source string } `json:"nodeTaints"`
		} `json:"effective"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.DropInPath != joinDropIn || !got.Written || strings.Join(got.Labels, ",") != "site=lab" ||
		strings.Join(got.Taints, ",") != "nvidia.com/gpu=present:NoSchedule,x=y:NoExecute" || len(got.Effective.NodeTaints) != 2 {
		t.Errorf("json report %+v", got)
	}
	out, _, code = joinRun(t, root, "--gfd-labels=false", "--no-default-taint", "-o", "yaml", "--dry-run")
	if code != 0 || !strings.Contains(out, "dropInPath: "+joinDropIn) || !strings.Contains(out, "dryRun: true") {
		t.Errorf("yaml report (exit %d):\n%s", code, out)
	}
}

// TestJoinF11: invalid labels, taints and keys exit 65 naming the value and
// write nothing (FIELD-REPORTS F11).
func TestJoinF11(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		args  []string
		want  string
	}{
		{"forbidden label flag", nil, []string{"--label", "node-role.kubernetes.io/gpu=true"}, "node-role.kubernetes.io/gpu=true"},
		{"forbidden label in config.yaml", map[string]string{"/etc/rancher/k3s/config.yaml": "node-label: [node-role.kubernetes.io/gpu=true]\n"}, nil, "node-role.kubernetes.io/gpu=true"},
		{"plural key", map[string]string{"/etc/rancher/k3s/config.yaml": "node-labels: [a=b]\n"}, nil, `"node-labels"`},
		{"bad effect flag", nil, []string{"--taint", "nvidia.com/gpu=present:NoScheduled"}, "nvidia.com/gpu=present:NoScheduled"},
		{"bad effect in k3s arg", nil, []string{"--k3s-arg=--node-taint=nvidia.com/gpu=present:NoScheduled"}, "nvidia.com/gpu=present:NoScheduled"},
		{"malformed yaml", map[string]string{"/etc/rancher/k3s/config.yaml.d/10-x.yaml": "node-label: [\n"}, nil, "10-x.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := joinHost(t, tc.files)
			_, errOut, code := joinRun(t, root, append([]string{"--gfd-labels=false"}, tc.args...)...)
			if code != ExitMalformed || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want 65 naming %q", code, errOut, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(root, joinDropIn)); err == nil {
				t.Error("drop-in written")
			}
		})
	}
}

func TestJoinConflicts(t *testing.T) {
	t.Parallel()
	// F10: a later drop-in replaces node-taint.
	files := map[string]string{
		"/etc/rancher/k3s/config.yaml":                "node-label: [site=lab, rack=r1]\n",
		"/etc/rancher/k3s/config.yaml.d/90-site.yaml": "node-taint: [dedicated=infra:NoExecute]\n",
	}
	root := joinHost(t, files)
	_, errOut, code := joinRun(t, root, "--gfd-labels=false")
	if code != ExitCheckFailed || !strings.Contains(errOut, "90-site.yaml") {
		t.Errorf("exit %d, stderr %q; want 1 naming 90-site.yaml", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(root, joinDropIn)); err == nil {
		t.Error("drop-in written despite the conflict")
	}
	out, errOut, code := joinRun(t, root, "--gfd-labels=false", "--allow-override")
	if code != 0 || !strings.Contains(errOut, "90-site.yaml") || !strings.Contains(out, "dedicated=infra:NoExecute") {
		t.Errorf("--allow-override: exit %d, stderr %q, out %q", code, errOut, out)
	}
	// Class 5: k3s appends command-line taints to the files'; a label of
	// nodeprep's key on the command line comes last and wins.
	out, errOut, code = joinRun(t, joinHost(t, nil), "--gfd-labels=false", "--k3s-arg", "--node-taint=a:NoSchedule", "-o", "json")
	if code != 0 || !strings.Contains(out, `"a:NoSchedule"`) || !strings.Contains(out, `"nvidia.com/gpu=present:NoSchedule"`) {
		t.Errorf("--k3s-arg taint: exit %d, stderr %q, out %s; want both taints", code, errOut, out)
	}
	_, errOut, code = joinRun(t, joinHost(t, nil), "--gfd-labels=false", "--label", "site=gpu", "--k3s-arg", "--node-label=site=cpu")
	if code != ExitCheckFailed || !strings.Contains(errOut, "k3s arguments") {
		t.Errorf("--k3s-arg label conflict: exit %d, stderr %q", code, errOut)
	}
}

func TestJoinRegistered(t *testing.T) {
	t.Parallel()
	root := joinHost(t, map[string]string{"/var/lib/rancher/k3s/agent/client-kubelet.crt": "x"})
	out, errOut, code := joinRun(t, root, "--gfd-labels=false")
	if code != 0 || !strings.Contains(errOut, "will not reach") || !strings.Contains(out, "registered: yes") {
		t.Errorf("exit %d, stderr %q, out %q; want 0 with the registration warning", code, errOut, out)
	}
	_, errOut, code = joinRun(t, root, "--gfd-labels=false", "--require-unregistered")
	if code != ExitCheckFailed || !strings.Contains(errOut, "already registered") {
		t.Errorf("--require-unregistered: exit %d, stderr %q", code, errOut)
	}
}

func TestJoinConfigFile(t *testing.T) {
	t.Parallel()
	root := joinHost(t, map[string]string{
		"/etc/nodeprep/config.yaml": "join:\n  k3sConfig: /etc/k3s.yaml\n  dropIn: 60-gpu.yml\n  labels: [site=lab]\n  defaultTaint: false\n  gfdLabels: false\n",
	})
	_, errOut, code := joinRun(t, root)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	data, err := os.ReadFile(filepath.Join(root, "/etc/k3s.yaml.d/60-gpu.yml"))
	if err != nil || !strings.Contains(string(data), "- site=lab") || strings.Contains(string(data), "node-taint+") {
		t.Errorf("drop-in from the config file: %q, %v", data, err)
	}
	// Flags override the config file.
	_, errOut, code = joinRun(t, root, "--drop-in", "70-x.yaml", "--label", "a=b", "--no-default-taint=false")
	data, err = os.ReadFile(filepath.Join(root, "/etc/k3s.yaml.d/70-x.yaml"))
	if code != 0 || err != nil || !strings.Contains(string(data), "- a=b") || strings.Contains(string(data), "site=lab") || !strings.Contains(string(data), "nvidia.com/gpu=present:NoSchedule") {
		t.Errorf("flags over config: exit %d %s, drop-in %q, %v", code, errOut, data, err)
	}
}

func TestJoinK3sConfigEnv(t *testing.T) {
	t.Setenv("K3S_CONFIG_FILE", "/etc/custom/k3s.yaml")
	root := joinHost(t, nil)
	// Class 11: a file k3s was given that does not exist is no error: k3s
	// reads its drop-ins (nodeprep's), or nothing.
	if _, errOut, code := joinRun(t, root, "--gfd-labels=false", "--dry-run"); code != 0 {
		t.Fatalf("missing K3S_CONFIG_FILE: exit %d, stderr %s", code, errOut)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/custom"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/custom/k3s.yaml"), []byte("node-label: [site=lab]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := joinRun(t, root, "--gfd-labels=false"); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/custom/k3s.yaml.d/50-nodeprep.yaml")); err != nil {
		t.Errorf("K3S_CONFIG_FILE not used: %v", err)
	}
	// k3s lets K3S_CONFIG_FILE win over everything: nodeprep's own setting
	// gives way, with a warning.
	_, errOut, code := joinRun(t, root, "--gfd-labels=false", "--k3s-config", "/etc/flag.yaml")
	if code != 0 || !strings.Contains(errOut, "but k3s reads /etc/custom/k3s.yaml (from K3S_CONFIG_FILE)") {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(root, "/etc/flag.yaml.d")); err == nil {
		t.Errorf("--k3s-config wrote where k3s does not read (K3S_CONFIG_FILE wins)")
	}
}

func TestJoinSymlinkRefused(t *testing.T) {
	t.Parallel()
	root := joinHost(t, map[string]string{"/etc/target": "keep\n"})
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(joinDropIn)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/target", filepath.Join(root, joinDropIn)); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := joinRun(t, root, "--gfd-labels=false")
	if code != ExitCantWrite || !strings.Contains(errOut, "symlink") {
		t.Errorf("exit %d, stderr %q; want 73 refusing the symlink", code, errOut)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "/etc/target")); string(data) != "keep\n" {
		t.Errorf("link target changed: %q", data)
	}
}

// TestJoinRefusesReservedLabelsFromK3s: k3s's own config and arguments
// may not set a label nodeprep derives, as --label may not: a node-label
// nodeprep.dev/gpu-ready=true there would register the node ready without
// nodeprep's self-test (join by hand writes no such label). Refused with
// the source named; --allow-override makes it a warning.
func TestJoinRefusesReservedLabelsFromK3s(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		args  []string
		src   string
	}{
		{"k3s config.yaml", map[string]string{"/etc/rancher/k3s/config.yaml": "node-label:\n  - nodeprep.dev/gpu-ready=true\n"}, nil, "/etc/rancher/k3s/config.yaml"},
		{"a k3s argument", nil, []string{"--k3s-arg=--node-label=nodeprep.dev/selftest=passed"}, "arguments"},
		{"a GFD label with the GFD labels on", map[string]string{"/etc/rancher/k3s/config.yaml.d/90-x.yaml": "node-label+:\n  - nvidia.com/gpu.count=99\n"}, nil, "90-x.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := joinHost(t, tc.files)
			_, errOut, code := joinRun(t, root, append([]string{"--simulate", "dgx-h200", "--dry-run"}, tc.args...)...)
			if code != ExitCheckFailed || !strings.Contains(errOut, "nodeprep derives") || !strings.Contains(errOut, tc.src) {
				t.Errorf("exit %d, want %d naming the source %q:\n%s", code, ExitCheckFailed, tc.src, errOut)
			}
			if _, errOut, code := joinRun(t, root, append([]string{"--simulate", "dgx-h200", "--dry-run", "--allow-override"}, tc.args...)...); code != 0 || !strings.Contains(errOut, "allowed by --allow-override") {
				t.Errorf("with --allow-override: exit %d, want 0 and a warning:\n%s", code, errOut)
			}
		})
	}
	// nodeprep's own labels in a k3s file it does not derive are the user's.
	root := joinHost(t, map[string]string{"/etc/rancher/k3s/config.yaml": "node-label:\n  - nodeprep.dev/rack=r1\n"})
	if _, errOut, code := joinRun(t, root, "--simulate", "dgx-h200", "--dry-run"); code != 0 {
		t.Errorf("a nodeprep.dev/ label nodeprep does not derive: exit %d\n%s", code, errOut)
	}
}
