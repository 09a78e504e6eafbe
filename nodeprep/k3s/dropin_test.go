package k3s

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

const ourPath = dropDir + "/" + DefaultDropIn

func mustLabels(t *testing.T, ss ...string) []Label {
	t.Helper()
	ls, err := ParseLabels(ss)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func mustTaints(t *testing.T, ss ...string) []Taint {
	t.Helper()
	ts, err := ParseTaints(ss)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func hostFile(t *testing.T, root *hostfs.Root, p string) string {
	t.Helper()
	return filepath.Join(root.Dir(), p)
}

func exists(t *testing.T, root *hostfs.Root, p string) bool {
	t.Helper()
	_, err := os.Lstat(hostFile(t, root, p))
	return err == nil
}

func TestRender(t *testing.T) {
	t.Parallel()
	got := string(Render(mustLabels(t, "z=1", "a=2"), mustTaints(t, "b:NoSchedule", "a=x:NoExecute")))
	want := dropInHeader + `node-label+:
  - a=2
  - z=1
node-taint+:
  - a=x:NoExecute
  - b:NoSchedule
`
	if got != want {
		t.Errorf("Render =\n%s\nwant\n%s", got, want)
	}
	if got := string(Render(nil, nil)); got != dropInHeader {
		t.Errorf("Render(nil, nil) = %q, want the header only", got)
	}
}

// TestRoundTrip: a drop-in nodeprep wrote, read back through the merge code,
// yields exactly the labels and taints asked for.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	labels := mustLabels(t, "nvidia.com/gpu.product=NVIDIA-H200", "nvidia.com/gpu.count=8", "example.com/empty=", "nodeprep.dev/selftest=passed")
	taints := mustTaints(t, "nvidia.com/gpu=present:NoSchedule", "k=:NoExecute", "k2:PreferNoSchedule")
	root := newHost(t, nil)
	r, err := Plan(root, Options{Labels: labels, Taints: taints})
	if err != nil {
		t.Fatal(err)
	}
	if err := Apply(root, r); err != nil {
		t.Fatal(err)
	}
	files, err := ReadFiles(root, DefaultConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Merge(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := func(xs []string) []string { s := slices.Clone(xs); slices.Sort(s); return s }
	var wl, wt []string
	for _, l := range labels {
		wl = append(wl, l.String())
	}
	for _, tt := range taints {
		wt = append(wt, tt.String())
	}
	if got := Values(eff.NodeLabels); !slices.Equal(got, want(wl)) {
		t.Errorf("labels read back = %q, want %q", got, want(wl))
	}
	if got := Values(eff.NodeTaints); !slices.Equal(got, want(wt)) {
		t.Errorf("taints read back = %q, want %q", got, want(wt))
	}
	for _, e := range append(slices.Clone(eff.NodeLabels), eff.NodeTaints...) {
		if e.Source != ourPath {
			t.Errorf("entry %q from %s, want %s", e.Value, e.Source, ourPath)
		}
	}
}

func TestPlanApply(t *testing.T) {
	t.Parallel()
	root := newHost(t, map[string]string{cfgPath: "token: boop\nnode-label: [site=lab, rack=r1]\n"})
	opts := Options{Labels: mustLabels(t, "gpu=yes"), Taints: mustTaints(t, "nvidia.com/gpu=present:NoSchedule")}
	r, err := Plan(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Changed || r.Written || r.Registered || len(r.Warnings) != 0 {
		t.Errorf("Plan on a fresh host = changed %v written %v registered %v warnings %q", r.Changed, r.Written, r.Registered, r.Warnings)
	}
	if exists(t, root, ourPath) {
		t.Fatal("Plan wrote the drop-in")
	}
	if got, want := Values(r.Effective.NodeLabels), []string{"site=lab", "rack=r1", "gpu=yes"}; !slices.Equal(got, want) {
		t.Errorf("effective labels = %q, want %q", got, want)
	}
	if err := Apply(root, r); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(hostFile(t, root, ourPath))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("drop-in mode %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(hostFile(t, root, ourPath))
	if string(data) != r.Content || !strings.HasPrefix(r.Content, "# Written by nodeprep") {
		t.Errorf("drop-in content %q, want %q with the header", data, r.Content)
	}

	// Same input again: nothing to write.
	r2, err := Plan(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Changed {
		t.Error("second Plan with the same input: Changed, want unchanged")
	}
	before := st.ModTime()
	if err := Apply(root, r2); err != nil || r2.Written {
		t.Errorf("second Apply: written %v, %v", r2.Written, err)
	}
	if st2, _ := os.Stat(hostFile(t, root, ourPath)); !st2.ModTime().Equal(before) {
		t.Error("second Apply rewrote the file")
	}

	// A loosened mode is repaired even when the content is the same.
	if err := os.Chmod(hostFile(t, root, ourPath), 0o644); err != nil {
		t.Fatal(err)
	}
	r3, err := Plan(root, opts)
	if err != nil || !r3.Changed {
		t.Fatalf("Plan after chmod 0644: changed %v, %v; want changed", r3 != nil && r3.Changed, err)
	}
	if err := Apply(root, r3); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(hostFile(t, root, ourPath)); st.Mode().Perm() != 0o600 {
		t.Errorf("mode after rewrite %v, want 0600", st.Mode().Perm())
	}
}

func TestPlanConflicts(t *testing.T) {
	t.Parallel()
	labels := []string{"gpu=yes"}
	taints := []string{"nvidia.com/gpu=present:NoSchedule"}
	for _, tc := range []struct {
		name     string
		files    map[string]string
		args     []string
		wantFile string // named in the error; "" means no conflict
	}{
		{
			name: "F10: later plain node-taint",
			files: map[string]string{
				cfgPath:                   "node-label: [site=lab, rack=r1]\n",
				dropDir + "/90-site.yaml": "node-taint: [dedicated=infra:NoExecute]\n",
			},
			wantFile: "90-site.yaml",
		},
		{
			name:     "later plain node-label",
			files:    map[string]string{dropDir + "/60-x.yml": "node-label: [a=1]\n"},
			wantFile: "60-x.yml",
		},
		{
			name:     "later label overrides ours",
			files:    map[string]string{dropDir + "/70-x.yaml": "node-label+: [gpu=no]\n"},
			wantFile: "70-x.yaml",
		},
		{
			// Class 5: a command-line label comes after every file.
			name:     "k3s argument overrides our label",
			args:     []string{"--node-label", "gpu=no"},
			wantFile: ArgsSource,
		},
		{
			// Class 5: the command line appends; it does not replace.
			name: "k3s argument taint appends",
			args: []string{"--node-taint", "x:NoSchedule", "--node-label=cli=1"},
		},
		{
			// Class 5: the file's kubelet-arg is kept beside the command
			// line's, and the kubelet keeps the last register-with-taints.
			name:     "file kubelet-arg with a command-line kubelet-arg",
			files:    map[string]string{cfgPath: "kubelet-arg: [register-with-taints+=a:NoSchedule]\n"},
			args:     []string{"--kubelet-arg=v=4"},
			wantFile: cfgPath,
		},
		{
			name:  "earlier plain keys are fine",
			files: map[string]string{cfgPath: "node-taint: [a:NoSchedule]\n", dropDir + "/10-x.yaml": "node-label: [gpu=no]\n"},
		},
		{
			name:  "later appends are fine",
			files: map[string]string{dropDir + "/90-x.yaml": "node-taint+: [a:NoSchedule]\nnode-label+: [b=1]\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := newHost(t, tc.files)
			opts := Options{Labels: mustLabels(t, labels...), Taints: mustTaints(t, taints...), K3sArgs: tc.args}
			r, err := Plan(root, opts)
			if tc.wantFile == "" {
				if err != nil {
					t.Fatalf("Plan: %v", err)
				}
				for _, want := range append(append([]string{}, labels...), taints...) {
					if !slices.Contains(Values(r.Effective.NodeLabels), want) && !slices.Contains(Values(r.Effective.NodeTaints), want) {
						t.Errorf("effective lists lack nodeprep's %s", want)
					}
				}
				return
			}
			if !errors.Is(err, fault.ErrCheckFailed) || !strings.Contains(err.Error(), tc.wantFile) {
				t.Fatalf("Plan error %v: want a failed check naming %s", err, tc.wantFile)
			}
			if exists(t, root, ourPath) {
				t.Error("drop-in written despite the conflict")
			}
			opts.AllowOverride = true
			r, err = Plan(root, opts)
			if err != nil {
				t.Fatalf("Plan with AllowOverride: %v", err)
			}
			if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, tc.wantFile) }) {
				t.Errorf("warnings %q: want one naming %s", r.Warnings, tc.wantFile)
			}
		})
	}
}

// TestPlanF11: every example of FIELD-REPORTS F11 is refused with exit 65,
// the offending value named, nothing written.
func TestPlanF11(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		files   map[string]string
		labels  []Label
		taints  []Taint
		args    []string
		wantMsg []string
	}{
		{
			name:    "kubelet-forbidden label in config.yaml",
			files:   map[string]string{cfgPath: "node-label: [node-role.kubernetes.io/gpu=true]\n"},
			wantMsg: []string{"node-role.kubernetes.io/gpu=true", cfgPath, "kubelet may not set"},
		},
		{
			name:    "kubelet-forbidden label given to nodeprep",
			labels:  []Label{{Key: "node-role.kubernetes.io/gpu", Value: "true"}},
			wantMsg: []string{"node-role.kubernetes.io/gpu=true", "kubelet may not set"},
		},
		{
			name:    "plural node-labels key",
			files:   map[string]string{cfgPath: "node-labels: [site=lab]\n"},
			wantMsg: []string{`"node-labels"`, cfgPath, `did you mean "node-label"`},
		},
		{
			name:    "underscore node_taint+ key in a drop-in",
			files:   map[string]string{dropDir + "/10-x.yaml": "node_taint+: [a:NoSchedule]\n"},
			wantMsg: []string{`"node_taint+"`, "10-x.yaml", `did you mean "node-taint"`},
		},
		{
			name:    "bad effect in a drop-in",
			files:   map[string]string{dropDir + "/10-x.yaml": "node-taint: [nvidia.com/gpu=present:NoScheduled]\n"},
			wantMsg: []string{"nvidia.com/gpu=present:NoScheduled", "10-x.yaml", "NoSchedule, PreferNoSchedule, NoExecute"},
		},
		{
			name:    "bad effect given to nodeprep",
			taints:  []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoScheduled"}},
			wantMsg: []string{"nvidia.com/gpu=present:NoScheduled"},
		},
		{
			name:    "bad taint in a k3s argument",
			args:    []string{"--node-taint=nvidia.com/gpu=present:NoScheduled"},
			wantMsg: []string{"nvidia.com/gpu=present:NoScheduled", ArgsSource},
		},
		{
			name:    "malformed YAML",
			files:   map[string]string{dropDir + "/20-broken.yaml": "node-label: [a=1\n"},
			wantMsg: []string{"20-broken.yaml"},
		},
		{
			name:    "duplicate label key",
			labels:  []Label{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}},
			wantMsg: []string{`"a" given twice`},
		},
		{
			name:    "duplicate taint key and effect",
			taints:  []Taint{{Key: "a", Value: "1", Effect: NoSchedule}, {Key: "a", Value: "2", Effect: NoSchedule}},
			wantMsg: []string{"unique by key and effect"},
		},
		{
			// Class 6, the instance: config.yaml already has nodeprep's taint.
			name:    "our taint again in config.yaml",
			files:   map[string]string{cfgPath: "node-taint: [\"nvidia.com/gpu=present:NoSchedule\"]\n"},
			taints:  []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: NoSchedule}},
			wantMsg: []string{cfgPath, ourPath, "same key and effect", "would not register", "the kubelet refuses to start"},
		},
		{
			name:    "our taint key and effect with another value later",
			files:   map[string]string{dropDir + "/70-x.yaml": "node-taint+: [nvidia.com/gpu=absent:NoSchedule]\n"},
			taints:  []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: NoSchedule}},
			wantMsg: []string{"70-x.yaml", "same key and effect"},
		},
		{
			name:    "two files with one taint key and effect",
			files:   map[string]string{cfgPath: "node-taint: [a=1:NoExecute]\n", dropDir + "/10.yaml": "node-taint+: [a=2:NoExecute]\n"},
			wantMsg: []string{cfgPath, "10.yaml", "same key and effect"},
		},
		{
			name:    "duplicate taint from the command line",
			files:   map[string]string{cfgPath: "node-taint: [a:NoExecute]\n"},
			args:    []string{"--node-taint=a:NoExecute"},
			wantMsg: []string{cfgPath, ArgsSource, "same key and effect"},
		},
		{
			// The real kubelet registers "true" as a key with an empty
			// value (TestRealKubeletRegistersAsJoinReports): a mistake,
			// not a node that would not register.
			name:    "label without a value after YAML conversion",
			files:   map[string]string{cfgPath: "node-label: [yes]\n"},
			wantMsg: []string{"want key=value", cfgPath, "the kubelet would register the whole item as a label key with an empty value"},
		},
		{
			name:    "map as a label",
			files:   map[string]string{cfgPath: "node-label: {a: b}\n"},
			wantMsg: []string{cfgPath},
		},
		{
			name:    "empty taint beside others",
			files:   map[string]string{cfgPath: "node-taint: ['', 'a:NoSchedule']\n"},
			wantMsg: []string{cfgPath, "empty"},
		},
		{
			// Class 3, the instance.
			name:    "server option in an agent config",
			files:   map[string]string{cfgPath: "disable: [traefik]\n"},
			wantMsg: []string{cfgPath, "flag provided but not defined: -disable", "k3s server"},
		},
		{
			// Class 4, the instance.
			name:    "data-dir in two spellings",
			files:   map[string]string{cfgPath: "data-dir: /data/a\n", dropDir + "/10.yaml": "d: /data/b\n"},
			wantMsg: []string{"Cannot use two forms of the same flag: d data-dir", cfgPath, "10.yaml"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := newHost(t, tc.files)
			r, err := Plan(root, Options{Labels: tc.labels, Taints: tc.taints, K3sArgs: tc.args})
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("Plan = %v, %v; want an error marked malformed", r, err)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
			if exists(t, root, ourPath) {
				t.Error("drop-in written")
			}
		})
	}
}

// TestPlanKubeletArgDropsList: a first kubelet-arg register-with-taints=
// drops k3s's node-taint list (k3s GetArgs), so a bad taint in it never
// reaches the kubelet; the node registers, without nodeprep's taint: a
// conflict, not a node that would not register (measured by
// TestRealKubeletRegistersAsJoinReports).
func TestPlanKubeletArgDropsList(t *testing.T) {
	t.Parallel()
	root := newHost(t, map[string]string{cfgPath: "node-taint: [x:Bad]\nkubelet-arg: [register-with-taints=z:NoSchedule]\n"})
	_, err := Plan(root, Options{Taints: []Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: NoSchedule}}})
	if err == nil || errors.Is(err, ErrNodeRefused) || !strings.Contains(err.Error(), "register-with-taints") {
		t.Errorf("Plan = %v; want the kubelet-arg's conflict, not %v", err, ErrNodeRefused)
	}
}

func TestPlanUnknownKeyWarning(t *testing.T) {
	t.Parallel()
	root := newHost(t, map[string]string{cfgPath: "token: x\nnode-lable-extra: 1\nkubelet-arg: [a=b]\n"})
	// Class 3: `k3s agent` stops on a key it does not define.
	if _, err := Plan(root, Options{}); !errors.Is(err, ErrK3sWouldNotStart) || !strings.Contains(err.Error(), `"node-lable-extra"`) {
		t.Errorf("Plan for an agent: %v; want k3s-would-not-start naming node-lable-extra", err)
	}
	// `k3s server` skips it with a warning.
	r, err := Plan(root, Options{K3sArgs: []string{"server"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], `"node-lable-extra"`) {
		t.Errorf("warnings %q: want one for node-lable-extra", r.Warnings)
	}
}

func TestPlanRegistered(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"/var/lib/rancher/k3s/agent/client-kubelet.crt", "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"} {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			root := newHost(t, map[string]string{f: "x"})
			opts := Options{Taints: mustTaints(t, "nvidia.com/gpu=present:NoSchedule")}
			r, err := Plan(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Registered || r.RegistrationEvidence != f {
				t.Errorf("Registered %v (%q), want true (%q)", r.Registered, r.RegistrationEvidence, f)
			}
			if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "will not reach") || !strings.Contains(r.Warnings[0], "kubectl taint") || !strings.Contains(r.Warnings[0], "kubectl delete node") {
				t.Errorf("warnings %q: want the registration warning with both remedies", r.Warnings)
			}
			opts.RequireUnregistered = true
			if _, err := Plan(root, opts); !errors.Is(err, fault.ErrCheckFailed) || !strings.Contains(err.Error(), "already registered") {
				t.Errorf("Plan with RequireUnregistered: %v, want a failed check", err)
			}
		})
	}
	r, err := Plan(newHost(t, map[string]string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml": ""}), Options{DataDir: "/var/lib/rancher/k3s"})
	if err != nil || r.Registered {
		t.Errorf("agent dir without kubelet credentials: registered %v, %v; want false", r != nil && r.Registered, err)
	}
}

func TestApplyRefusesSymlink(t *testing.T) {
	t.Parallel()
	root := newHost(t, map[string]string{"/etc/target.yaml": "keep: me\n"})
	if err := os.MkdirAll(hostFile(t, root, dropDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/target.yaml", hostFile(t, root, ourPath)); err != nil {
		t.Fatal(err)
	}
	r, err := Plan(root, Options{Labels: mustLabels(t, "a=1")})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Changed || !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "symlink") }) {
		t.Errorf("Plan through a symlink: changed %v warnings %q", r.Changed, r.Warnings)
	}
	err = Apply(root, r)
	if !errors.Is(err, fault.ErrCantWrite) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Apply error %v: want cannot-write refusing the symlink", err)
	}
	if data, _ := os.ReadFile(hostFile(t, root, "/etc/target.yaml")); string(data) != "keep: me\n" {
		t.Errorf("link target changed: %q", data)
	}
}

func TestPlanDropInName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"x.conf", "../x.yaml", "a/b.yaml", ".."} {
		if _, err := Plan(newHost(t, nil), Options{DropIn: name}); !errors.Is(err, fault.ErrMalformed) {
			t.Errorf("Plan(DropIn %q) error %v, want malformed", name, err)
		}
	}
	root := newHost(t, map[string]string{dropDir + "/90-late.yaml": "node-label+: [b=2]\n"})
	r, err := Plan(root, Options{DropIn: "95-NODEPREP.YML", Labels: mustLabels(t, "a=1"), ConfigPath: cfgPath})
	if err != nil {
		t.Fatal(err)
	}
	if r.DropInPath != dropDir+"/95-NODEPREP.YML" {
		t.Errorf("DropInPath %q", r.DropInPath)
	}
	// "95-NODEPREP.YML" sorts before "90-late.yaml"? No: '5' > '0', so after.
	if got, want := Values(r.Effective.NodeLabels), []string{"b=2", "a=1"}; !slices.Equal(got, want) {
		t.Errorf("effective labels %q, want %q", got, want)
	}
}

func TestMisspelt(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"node-labels": KeyNodeLabel, "node_label": KeyNodeLabel, "nodelabel": KeyNodeLabel, "node-lable": KeyNodeLabel,
		"Node-Label": KeyNodeLabel, "node-taints": KeyNodeTaint, "node_taint": KeyNodeTaint, "node-tiant": KeyNodeTaint,
		"node-label": "", "node-taint": "", "node-name": "", "node-ip": "", "kubelet-arg": "", "no-flannel": "",
		"node-external-ip": "", "node-internal-dns": "", "with-node-id": "",
	} {
		got, ok := misspelt(key)
		if got != want || ok != (want != "") {
			t.Errorf("misspelt(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
	for k := range serverFlags() {
		if _, ok := misspelt(k); ok {
			t.Errorf("known k3s key %q taken for a misspelling", k)
		}
	}
}

// TestPlanWarnsAboutOwnDropIns: replacing a drop-in that `up` wrote drops
// its nodeprep.dev/ labels with a warning, and an older nodeprep drop-in
// under another name is named.
func TestPlanWarnsAboutOwnDropIns(t *testing.T) {
	t.Parallel()
	byUp := string(Render(mustLabels(t, "nodeprep.dev/selftest=passed", "gpu=yes"), mustTaints(t, "a=b:NoSchedule")))
	old := string(Render(mustLabels(t, "gpu=yes"), nil))
	root := newHost(t, map[string]string{ourPath: byUp, dropDir + "/60-old.yaml": old})
	r, err := Plan(root, Options{Labels: mustLabels(t, "gpu=yes"), Taints: mustTaints(t, "a=b:NoSchedule")})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"loses nodeprep.dev/selftest=passed", dropDir + "/60-old.yaml was also written by nodeprep"} {
		if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
			t.Errorf("warnings %q lack %q", r.Warnings, want)
		}
	}
}
