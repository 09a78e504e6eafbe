package app

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// k3sTree is a host tree for join: files, symlinks, directories, the k3s
// service's environment and command line, and join's own flags.
type k3sTree struct {
	Files   map[string]string `yaml:"files"`   // host path → content
	Links   map[string]string `yaml:"links"`   // host path → link target (relative)
	Dirs    []string          `yaml:"dirs"`    // host paths of directories
	Env     map[string]string `yaml:"env"`     // the k3s service's EnvironmentFile
	K3sArgs []string          `yaml:"k3sArgs"` // each passed as --k3s-arg
	Flags   []string          `yaml:"flags"`   // more join flags
}

const corpusEnvFile = "/etc/k3s-test/k3s.env"

// build writes the tree under a new root and returns it.
func (tr k3sTree) build(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range tr.Dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := maps(tr.Files)
	if len(tr.Env) > 0 {
		var sb strings.Builder
		for _, k := range sortedKeys(tr.Env) {
			fmt.Fprintf(&sb, "%s=%s\n", k, tr.Env[k])
		}
		files[corpusEnvFile] = sb.String()
	}
	testkit.WriteFiles(t, root, files, tr.Links)
	return root
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// joinArgs are the join flags for the tree.
func (tr k3sTree) joinArgs() []string {
	args := []string{"--gfd-labels=false", "-o", "json"}
	args = append(args, tr.Flags...)
	for _, a := range tr.K3sArgs {
		args = append(args, "--k3s-arg="+a)
	}
	if len(tr.Env) > 0 {
		args = append(args, "--k3s-env-file", corpusEnvFile)
	}
	return args
}

// oracleArgs is the command line k3s runs with: the k3s arguments, split
// into words as nodeprep and a shell do.
func (tr k3sTree) oracleArgs() []string {
	var words []string
	for _, a := range tr.K3sArgs {
		words = append(words, strings.Fields(a)...)
	}
	return words
}

// joinJSON is what the tests read of `join -o json`.
type joinJSON struct {
	DropInPath string `json:"dropInPath"`
	DataDir    string `json:"dataDir"`
	Effective  struct {
		NodeLabels  []k3s.Entry `json:"nodeLabels"`
		NodeTaints  []k3s.Entry `json:"nodeTaints"`
		KubeletArgs []k3s.Entry `json:"kubeletArgs"`
	} `json:"effective"`
	Labels []string `json:"labels"`
	Taints []string `json:"taints"`
}

// checkAgainstK3s is the property: after a join that exited 0, k3s (the
// oracle, reading the tree join left) starts, and the lists it hands the
// kubelet are exactly the ones join reported, nodeprep's own among them.
func checkAgainstK3s(t *testing.T, root string, tr k3sTree, out string) {
	t.Helper()
	var rep joinJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("join -o json: %v\n%s", err, out)
	}
	got := k3sOracle(root, tr.Env, tr.oracleArgs())
	if got.refused != "" || got.ignoredAll {
		t.Fatalf("join exited 0, but k3s would not run with nodeprep's drop-in: refused %q, ignored every file %v", got.refused, got.ignoredAll)
	}
	for _, c := range []struct {
		what     string
		reported []k3s.Entry
		k3s      []string
	}{{"node-label", rep.Effective.NodeLabels, got.labels}, {"node-taint", rep.Effective.NodeTaints, got.taints}, {"kubelet-arg", rep.Effective.KubeletArgs, got.kubeletArgs}} {
		if r := k3s.Values(c.reported); !slices.Equal(r, c.k3s) && !(len(r) == 0 && len(c.k3s) == 0) {
			t.Errorf("%s: join reported %q, k3s passes %q", c.what, r, c.k3s)
		}
	}
	if rep.DataDir != got.dataDir {
		t.Errorf("data-dir: join reported %q, k3s uses %q", rep.DataDir, got.dataDir)
	}
	for _, l := range rep.Labels {
		if !slices.Contains(got.labels, l) {
			t.Errorf("nodeprep's label %s is not among k3s's %q", l, got.labels)
		}
	}
	for _, tt := range rep.Taints {
		if !slices.Contains(got.taints, tt) {
			t.Errorf("nodeprep's taint %s is not among k3s's %q", tt, got.taints)
		}
	}
}

// k3sCase is one file of testdata/k3s/cases: a tree and what join and k3s
// do with it.
type k3sCase struct {
	Class   string `yaml:"class"` // the issue #20 class, or "docs" for a k3s docs example
	Doc     string `yaml:"doc"`   // what the case shows, and the rule's source
	k3sTree `yaml:",inline"`
	Want    struct {
		Exit    int       `yaml:"exit"`
		Stderr  []string  `yaml:"stderr"`  // substrings of stderr
		Labels  *[]string `yaml:"labels"`  // effective node-label values (exit 0)
		Taints  *[]string `yaml:"taints"`  // effective node-taint values (exit 0)
		DataDir string    `yaml:"dataDir"` // effective data-dir (exit 0)
		DropIn  string    `yaml:"dropIn"`  // where the drop-in is written (exit 0)
		// K3s is what k3s does with the tree and nodeprep's drop-in in
		// place: "runs", "refuses" (does not start, or the node does not
		// register) or "ignores" (runs with no config file).
		K3s string `yaml:"k3s"`
	} `yaml:"want"`
}

// TestK3sCorpus runs join over every case of testdata/k3s/cases (each
// class of issue #20 with its instance and variants, and k3s's documented
// examples) and checks join's exit, message and effective lists, and what
// k3s does with the same tree.
func TestK3sCorpus(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "k3s", "cases", "*.yaml"))
	if err != nil || len(paths) < 30 {
		t.Fatalf("corpus: %d cases, %v", len(paths), err)
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".yaml"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var c k3sCase
			dec := yaml.NewDecoder(strings.NewReader(string(data)))
			dec.KnownFields(true)
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if c.Class == "" || c.Doc == "" || c.Want.K3s == "" {
				t.Fatalf("%s: class, doc and want.k3s are required", p)
			}
			root := c.build(t)
			out, errOut, code := joinRun(t, root, c.joinArgs()...)
			if code != c.Want.Exit {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, c.Want.Exit, out, errOut)
			}
			for _, s := range c.Want.Stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if code == 0 {
				checkAgainstK3s(t, root, c.k3sTree, out)
				var rep joinJSON
				_ = json.Unmarshal([]byte(out), &rep)
				if c.Want.Labels != nil && !slices.Equal(k3s.Values(rep.Effective.NodeLabels), *c.Want.Labels) && !(len(*c.Want.Labels) == 0 && len(rep.Effective.NodeLabels) == 0) {
					t.Errorf("effective labels %q, want %q", k3s.Values(rep.Effective.NodeLabels), *c.Want.Labels)
				}
				if c.Want.Taints != nil && !slices.Equal(k3s.Values(rep.Effective.NodeTaints), *c.Want.Taints) && !(len(*c.Want.Taints) == 0 && len(rep.Effective.NodeTaints) == 0) {
					t.Errorf("effective taints %q, want %q", k3s.Values(rep.Effective.NodeTaints), *c.Want.Taints)
				}
				if c.Want.DataDir != "" && rep.DataDir != c.Want.DataDir {
					t.Errorf("data-dir %q, want %q", rep.DataDir, c.Want.DataDir)
				}
				if c.Want.DropIn != "" && rep.DropInPath != c.Want.DropIn {
					t.Errorf("drop-in %q, want %q", rep.DropInPath, c.Want.DropIn)
				}
				if c.Want.K3s != "runs" {
					t.Errorf("want.k3s %q with exit 0", c.Want.K3s)
				}
				return
			}
			// What k3s does with the tree and nodeprep's drop-in placed
			// where join would have written it.
			placeDropIn(t, root, c.k3sTree)
			got := k3sOracle(root, c.Env, c.oracleArgs())
			verdict := "runs"
			switch {
			case got.refused != "":
				verdict = "refuses"
			case got.ignoredAll:
				verdict = "ignores"
			}
			if verdict != c.Want.K3s {
				t.Errorf("k3s %s (%s), want %s", verdict, got.refused, c.Want.K3s)
			}
		})
	}
}

// placeDropIn writes the drop-in join would have written (the default
// taint unless --no-default-taint, and --label/--taint) where k3s reads.
func placeDropIn(t *testing.T, root string, tr k3sTree) {
	t.Helper()
	var labels, taints []string
	defaultTaint := true
	for i := 0; i < len(tr.Flags); i++ {
		switch f := tr.Flags[i]; {
		case f == "--no-default-taint":
			defaultTaint = false
		case (f == "--label" || f == "--taint") && i+1 < len(tr.Flags):
			if f == "--label" {
				labels = append(labels, tr.Flags[i+1])
			} else {
				taints = append(taints, tr.Flags[i+1])
			}
			i++
		}
	}
	ls, err := k3s.ParseLabels(labels)
	if err != nil {
		return
	}
	ts, err := k3s.ParseTaints(taints)
	if err != nil {
		return
	}
	opts := k3s.Options{Env: tr.Env, K3sArgs: tr.K3sArgs}
	p := filepath.Join(root, opts.DropInPath())
	if os.MkdirAll(filepath.Dir(p), 0o755) != nil {
		return
	}
	_ = os.WriteFile(p, k3s.Render(ls, nodepolicy.NodeTaints(defaultTaint, ts)), 0o600)
}

// TestK3sProperty generates host trees — config files, drop-ins that are
// files, links (to files, to directories, to nothing) and directories,
// the k3s service's environment and command line, join's own labels and
// taints — and runs join on each. Whenever join exits 0, the tree it
// leaves, read and parsed as k3s does (k3sOracle: k3s's file rules and
// the real urfave/cli v2), must give exactly the labels, taints,
// kubelet-args and data-dir join reported, nodeprep's own among them.
// Whenever join refuses with exit 65, it must say why k3s would not run.
// The size is bounded for CI (NODEPREP_K3S_PROPERTY_N sets another; the
// seed is fixed, NODEPREP_K3S_PROPERTY_SEED sets another).
func TestK3sProperty(t *testing.T) {
	t.Parallel()
	n, seed := 250, uint64(20)
	if v, err := strconv.Atoi(os.Getenv("NODEPREP_K3S_PROPERTY_N")); err == nil {
		n = v
	}
	if v, err := strconv.ParseUint(os.Getenv("NODEPREP_K3S_PROPERTY_SEED"), 10, 64); err == nil {
		seed = v
	}
	start := time.Now()
	exits := map[int]int{}
	for i := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		tr := genTree(rng)
		ok := t.Run(fmt.Sprintf("case%d", i), func(t *testing.T) {
			root := tr.build(t)
			out, errOut, code := joinRun(t, root, tr.joinArgs()...)
			exits[code]++
			switch code {
			case 0:
				checkAgainstK3s(t, root, tr, out)
			case ExitCheckFailed, ExitMalformed:
			default:
				t.Errorf("exit %d: %s", code, errOut)
			}
			if code == ExitMalformed && !strings.Contains(errOut, "would") && !strings.Contains(errOut, "malformed") && !strings.Contains(errOut, "label") && !strings.Contains(errOut, "taint") {
				t.Errorf("exit 65 without saying what k3s or the kubelet would do: %s", errOut)
			}
		})
		if !ok {
			data, _ := yaml.Marshal(tr)
			t.Logf("case %d (seed %d):\n%s", i, seed, data)
		}
	}
	t.Logf("%d trees in %v: exits %v", n, time.Since(start).Round(time.Millisecond), exits)
	if exits[0] < n/5 || exits[ExitMalformed] < n/10 {
		t.Errorf("exits %v: the generator must give both joins that pass and refusals", exits)
	}
}

// genTree draws one host tree.
func genTree(rng *rand.Rand) k3sTree {
	tr := k3sTree{Files: map[string]string{}, Links: map[string]string{}}
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	chance := func(p float64) bool { return rng.Float64() < p }
	cfg := "/etc/rancher/k3s/config.yaml"
	switch r := rng.IntN(10); {
	case r == 0:
		cfg = "/srv/k3s.yaml"
		tr.K3sArgs = append(tr.K3sArgs, pick("--config=/srv/k3s.yaml", "-c /srv/k3s.yaml"))
	case r == 1:
		cfg = "/opt/k3s/conf.yml"
		tr.Env = map[string]string{"K3S_CONFIG_FILE": cfg}
	}
	if chance(0.15) {
		if tr.Env == nil {
			tr.Env = map[string]string{}
		}
		tr.Env["K3S_DATA_DIR"] = "/data/env"
	}
	labels := []string{"a=1", "b=2", "gpu=no", "site=lab", " padded=1 ", "yes", "bad label", "k=v", "nodeprep.dev/x=1", "1e3", "x=0x1F"}
	taints := []string{"t:NoSchedule", "u=1:NoExecute", "nvidia.com/gpu=present:NoSchedule", "nvidia.com/gpu=absent:NoSchedule", "x:Bad", " v=2:PreferNoSchedule ", "w:NoSchedule"}
	kargs := []string{"v=2", "max-pods=100", "register-with-taints=z:NoSchedule", "register-with-taints+=z:NoSchedule", "node-labels+=q=1"}
	value := func(pool []string) string {
		switch r := rng.IntN(10); {
		case r == 0:
			return ""
		case r == 1:
			return " " + strconv.Quote(pick(pool...))
		case r < 5:
			var items []string
			for range rng.IntN(3) + 1 {
				items = append(items, strconv.Quote(pick(pool...)))
			}
			return " [" + strings.Join(items, ", ") + "]"
		default:
			var sb strings.Builder
			for range rng.IntN(3) + 1 {
				v := pick(pool...)
				if chance(0.5) {
					v = strconv.Quote(v)
				}
				sb.WriteString("\n  - " + v)
			}
			return sb.String()
		}
	}
	doc := func() string {
		var sb strings.Builder
		for range rng.IntN(4) {
			switch rng.IntN(14) {
			case 0, 1:
				sb.WriteString("node-label" + pick("", "+") + ":" + value(labels) + "\n")
			case 2, 3:
				sb.WriteString("node-taint" + pick("", "+") + ":" + value(taints) + "\n")
			case 4:
				sb.WriteString("kubelet-arg" + pick("", "+") + ":" + value(kargs) + "\n")
			case 5:
				sb.WriteString(pick("data-dir", "d") + ":" + pick(" /data/a", " /data/b", "") + "\n")
			case 6:
				sb.WriteString("token: " + pick("boop", "K10abc::server:x") + "\n")
			case 7:
				sb.WriteString(pick("debug: true", "debug: maybe", "with-node-id: yes", "lb-server-port: 6444", "lb-server-port: many") + "\n")
			case 8:
				if chance(0.3) {
					sb.WriteString(pick("disable: [traefik]", "node-labels: [a=1]", "node_taint: [t:NoSchedule]") + "\n")
				}
			case 9:
				if chance(0.3) {
					sb.WriteString(pick("node-label: [a=1\n", "\t- x\n", "- a\n- b\n") + "\n")
				}
			case 10:
				sb.WriteString("node-label:\n  - [nested=1, n=2]\n")
			case 11:
				sb.WriteString("---\n" + pick("node-label: [second=doc]\n", ""))
			default:
				sb.WriteString("server: https://k3s:6443\n")
			}
		}
		return sb.String()
	}
	switch r := rng.IntN(20); {
	case r < 14:
		tr.Files[cfg] = doc()
	case r == 14:
		tr.Dirs = append(tr.Dirs, cfg)
	case r == 15:
		tr.Links[cfg] = "gone.yaml"
	}
	dir := cfg + ".d"
	switch r := rng.IntN(30); {
	case r == 0:
		tr.Files[dir] = ""
	case r < 12:
	default:
		for _, name := range []string{"10-a.yaml", "20-b.yml", "60-c.YAML", "90-z.yaml", "notes.txt", "55-x.yaml", "05-first.yaml"} {
			if !chance(0.3) {
				continue
			}
			p := dir + "/" + name
			switch r := rng.IntN(50); {
			case r == 0:
				tr.Links[p] = "../gone.yaml"
			case r == 1:
				tr.Dirs = append(tr.Dirs, "/etc/elsewhere")
				tr.Links[p] = "../../../etc/elsewhere"
			case r == 2:
				tr.Dirs = append(tr.Dirs, p)
			case r == 3 && tr.Files[cfg] != "":
				tr.Links[p] = "../" + filepath.Base(cfg)
			default:
				tr.Files[p] = doc()
			}
		}
	}
	for range rng.IntN(4) {
		tr.K3sArgs = append(tr.K3sArgs, pick("--node-label=cli=1", "--node-taint=c:NoSchedule", "--node-label cli2=2", "-d /data/cli", "--data-dir=/data/cli",
			"--kubelet-arg=v=4", "stray", "--debug", "--", "--node-labels=x=1", "--node-label=gpu=yes", "--node-taint=nvidia.com/gpu=present:NoSchedule"))
	}
	if chance(0.1) {
		tr.K3sArgs = append([]string{"server"}, tr.K3sArgs...)
	}
	if chance(0.2) {
		tr.Flags = append(tr.Flags, "--no-default-taint")
	}
	if chance(0.3) {
		tr.Flags = append(tr.Flags, "--label", pick("gpu=yes", "site=gpu", "a=1"))
	}
	if chance(0.2) {
		tr.Flags = append(tr.Flags, "--taint", pick("extra=1:NoExecute", "t:NoSchedule"))
	}
	return tr
}

// TestUpRefusesWhatK3sRefuses: `up` fails as `join` does where k3s would
// not start or would ignore its config (exit 65, the file named), and
// quotes no token given by mistake as a label.
func TestUpRefusesWhatK3sRefuses(t *testing.T) {
	t.Parallel()
	const token = "K1075d5c2b1f6a1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5::server:9f8e7d6c5b4a"
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, root string)
		args    []string
		stderr  []string
	}{
		{name: "dangling drop-in", prepare: func(t *testing.T, root string) {
			p := filepath.Join(root, "etc/rancher/k3s/config.yaml.d/10-gone.yaml")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../gone.yaml", p); err != nil {
				t.Fatal(err)
			}
		}, stderr: []string{"10-gone.yaml", "ignore every config file"}},
		{name: "server key on an agent", prepare: func(t *testing.T, root string) {
			p := filepath.Join(root, "etc/rancher/k3s/config.yaml")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("disable: [traefik]\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, stderr: []string{"config.yaml", "flag provided but not defined: -disable"}},
		{name: "token as a label", args: []string{"--label", "K3S_TOKEN=" + token}, stderr: []string{"K3S_TOKEN=<redacted>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := hostCopy(t, "nixos-h200")
			if tc.prepare != nil {
				tc.prepare(t, root)
			}
			args := append([]string{"--root", root, "up", "--simulate", "dgx-h200", "--allow-cpu-adapter"}, tc.args...)
			stdout, stderr, code := runCLI(t, args...)
			if code != ExitMalformed {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, ExitMalformed, stdout, stderr)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stdout+stderr, s) {
					t.Errorf("output lacks %q:\n%s%s", s, stdout, stderr)
				}
			}
			status, _ := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json"))
			for _, out := range []string{stdout, stderr, string(status)} {
				if strings.Contains(out, "9f8e7d6c5b4a") {
					t.Errorf("the token is printed or stored:\n%s", out)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml")); err == nil {
				t.Error("up wrote a drop-in")
			}
		})
	}
}
