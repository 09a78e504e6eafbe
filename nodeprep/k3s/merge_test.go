package k3s

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

const (
	cfgPath = "/etc/rancher/k3s/config.yaml"
	dropDir = cfgPath + ".d"
)

func TestMerge(t *testing.T) {
	t.Parallel()
	type src struct{ name, data string }
	for _, tc := range []struct {
		name       string
		files      []src
		args       []string
		wantLabels []string // "value@source"
		wantTaints []string
	}{
		{
			name:       "config only",
			files:      []src{{cfgPath, "node-label: [site=lab, rack=r1]\nnode-taint: a:NoSchedule\n"}},
			wantLabels: []string{"site=lab@config.yaml", "rack=r1@config.yaml"},
			wantTaints: []string{"a:NoSchedule@config.yaml"},
		},
		{
			// F10: config.yaml's labels, nodeprep appends, 90-site.yaml replaces taints.
			name: "F10 append then plain replace",
			files: []src{
				{cfgPath, "node-label: [site=lab, rack=r1]\n"},
				{dropDir + "/50-nodeprep.yaml", "node-label+: [gpu=yes]\nnode-taint+: [nvidia.com/gpu=present:NoSchedule]\n"},
				{dropDir + "/90-site.yaml", "node-taint: [dedicated=infra:NoExecute]\n"},
			},
			wantLabels: []string{"site=lab@config.yaml", "rack=r1@config.yaml", "gpu=yes@50-nodeprep.yaml"},
			wantTaints: []string{"dedicated=infra:NoExecute@90-site.yaml"},
		},
		{
			name: "plain key in a later file replaces the list",
			files: []src{
				{cfgPath, "node-label: [a=1, b=2]\n"},
				{dropDir + "/10.yaml", "node-label: [c=3]\n"},
			},
			wantLabels: []string{"c=3@10.yaml"},
		},
		{
			name: "plus appends across files; a later plain key wipes the appended values",
			files: []src{
				{cfgPath, "node-label: [a=1]\n"},
				{dropDir + "/10.yaml", "node-label+: [b=2]\n"},
				{dropDir + "/20.yaml", "node-label: [c=3]\n"},
				{dropDir + "/30.yaml", "node-label+: d=4\n"},
			},
			wantLabels: []string{"c=3@20.yaml", "d=4@30.yaml"},
		},
		{
			name:       "plus with nothing before sets",
			files:      []src{{dropDir + "/50.yaml", "node-taint+:\n  - x:NoExecute\n"}},
			wantTaints: []string{"x:NoExecute@50.yaml"},
		},
		{
			// Class 8: k3s passes --node-label= for a null value: one empty item.
			name: "null plain value leaves one empty item",
			files: []src{
				{cfgPath, "node-label: [a=1]\n"},
				{dropDir + "/10.yml", "node-label:\n"},
			},
			wantLabels: []string{"@10.yml"},
		},
		{
			name: "null then append: the null adds nothing",
			files: []src{
				{cfgPath, "node-taint:\n"},
				{dropDir + "/50.yml", "node-taint+: [x:NoSchedule]\n"},
			},
			wantTaints: []string{"x:NoSchedule@50.yml"},
		},
		{
			name:       "plain and plus in one file apply in document order",
			files:      []src{{cfgPath, "node-label+: [a=1]\nnode-label: [b=2]\nnode-label+: [c=3]\n"}},
			wantLabels: []string{"b=2@config.yaml", "c=3@config.yaml"},
		},
		{
			name:       "scalar value is a one-element list",
			files:      []src{{cfgPath, "node-label: a=1\nnode-label+: \"b=2\"\n"}},
			wantLabels: []string{"a=1@config.yaml", "b=2@config.yaml"},
		},
		{
			name:       "other keys are ignored",
			files:      []src{{cfgPath, "token: boop\nkubelet-arg: [a=b]\nnode-label: [a=1]\n"}},
			wantLabels: []string{"a=1@config.yaml"},
		},
		{
			// Class 5: urfave/cli appends every --node-taint to the files' values.
			name:       "k3s args append to the file lists",
			files:      []src{{cfgPath, "node-label: [a=1]\nnode-taint: [t:NoSchedule]\n"}, {dropDir + "/50.yaml", "node-taint+: [u:NoSchedule]\n"}},
			args:       []string{"--node-taint=x:NoExecute", "--server", "https://s:6443", "--node-taint", "y:NoExecute"},
			wantLabels: []string{"a=1@config.yaml"},
			wantTaints: []string{"t:NoSchedule@config.yaml", "u:NoSchedule@50.yaml", "x:NoExecute@" + ArgsSource, "y:NoExecute@" + ArgsSource},
		},
		{
			name:       "single-dash and label args",
			args:       []string{"-node-label=a=1", "--node-label", "b=2", "--server https://s --node-label c=3"},
			wantLabels: []string{"a=1@" + ArgsSource, "b=2@" + ArgsSource, "c=3@" + ArgsSource},
		},
		{
			// Class 12: urfave/cli v2 stops at the first positional word.
			name:       "flags after a positional word are not parsed",
			files:      []src{{cfgPath, "node-label: [foo=bar]\n"}},
			args:       []string{"stray --node-label=cli=1"},
			wantLabels: []string{"foo=bar@config.yaml"},
		},
		{
			name:       "-- ends the flags",
			args:       []string{"--node-label=a=1", "--", "--node-label=b=2"},
			wantLabels: []string{"a=1@" + ArgsSource},
		},
		{
			name:       "a boolean flag takes no value word",
			args:       []string{"--debug", "--node-label=a=1", "--with-node-id", "false", "--node-label=b=2"},
			wantLabels: []string{"a=1@" + ArgsSource},
		},
		{
			name:       "agent subcommand word",
			args:       []string{"agent --node-label=a=1"},
			wantLabels: []string{"a=1@" + ArgsSource},
		},
		{
			// Class 9: YAML 1.1 scalars as yaml.v2 reads them, printed by Go, trimmed.
			name:       "YAML 1.1 values",
			files:      []src{{cfgPath, "node-label:\n  - 1e3\n  - 0x1F\n  - 010\n  - yes\n  - on\n  - ~\n  - \" padded=1 \"\n  - [nested=1, dropped=2]\n  - 2001-12-14\n  - .inf\n"}},
			wantLabels: []string{"1000@config.yaml", "31@config.yaml", "8@config.yaml", "true@config.yaml", "true@config.yaml", "@config.yaml", "padded=1@config.yaml", "nested=1@config.yaml", "2001-12-14@config.yaml", "+Inf@config.yaml"},
		},
		{
			name:       "scalar YAML 1.1 value",
			files:      []src{{cfgPath, "node-taint: off\nnode-label: 0o17\n"}},
			wantLabels: []string{"15@config.yaml"}, // yaml.v2 resolves ints with strconv base 0
			wantTaints: []string{"false@config.yaml"},
		},
		{
			// Class 10: only the first document; a trailing --- is fine.
			name:       "first document only",
			files:      []src{{cfgPath, "node-label: [a=1]\n---\nnode-label: [b=2]\n"}, {dropDir + "/10.yaml", "node-taint: [t:NoSchedule]\n---\n"}},
			wantLabels: []string{"a=1@config.yaml"},
			wantTaints: []string{"t:NoSchedule@10.yaml"},
		},
		{
			// yaml.v2 into an ordered map keeps a repeated key; the later wins.
			name:       "repeated key in one file",
			files:      []src{{cfgPath, "node-label: [a=1]\nnode-label: [b=2]\n"}},
			wantLabels: []string{"b=2@config.yaml"},
		},
		{
			name:       "command line values are trimmed",
			args:       []string{"--node-label", " a=1 "},
			wantLabels: []string{"a=1@" + ArgsSource},
		},
		{
			name:  "empty files and comments",
			files: []src{{cfgPath, ""}, {dropDir + "/10.yaml", "# nothing\n"}, {dropDir + "/20.yaml", "---\n"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var files []File
			for _, s := range tc.files {
				files = append(files, File{Path: s.name, Data: []byte(s.data)})
			}
			eff, err := Merge(files, tc.args)
			if err != nil {
				t.Fatalf("Merge: %v", err)
			}
			if got := describe(eff.NodeLabels); !slices.Equal(got, tc.wantLabels) {
				t.Errorf("node-label = %q, want %q", got, tc.wantLabels)
			}
			if got := describe(eff.NodeTaints); !slices.Equal(got, tc.wantTaints) {
				t.Errorf("node-taint = %q, want %q", got, tc.wantTaints)
			}
		})
	}
}

func describe(entries []Entry) []string {
	var out []string
	for _, e := range entries {
		src := e.Source
		if src != ArgsSource {
			src = filepath.Base(src)
		}
		out = append(out, e.Value+"@"+src)
	}
	return out
}

func TestMergeMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, data string }{
		{"bad yaml", "node-label: [a=1\n"},
		{"not a mapping", "- a\n- b\n"},
		{"scalar document", "hello\n"},
		{"tab indent", "node-label:\n\t- a=1\n"},
		// Class 3: keys `k3s agent` does not define stop it.
		{"server key", "disable: [traefik]\n"},
		{"misspelt key", "node-labels: [a=1]\n"},
		// Class 4: one flag under two names.
		{"two forms", "data-dir: /data/a\nd: /data/b\n"},
		{"bool value", "debug: maybe\n"},
		{"int value", "lb-server-port: many\n"},
		{"help", "help: true\n"},
		{"empty key", "'': x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Merge([]File{{Path: "/etc/rancher/k3s/config.yaml.d/20-bad.yaml", Data: []byte(tc.data)}}, nil)
			if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "20-bad.yaml") {
				t.Errorf("Merge error %v: want malformed naming 20-bad.yaml", err)
			}
		})
	}
	for _, args := range [][]string{{"--node-taint"}, {"--node-labels=x"}, {"--disable=traefik"}, {"---node-label=a=1"}, {"-d /a", "--data-dir=/b"}} {
		_, err := Merge(nil, args)
		if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, ErrK3sWouldNotStart) || !strings.Contains(err.Error(), ArgsSource) {
			t.Errorf("Merge(%q) error %v, want k3s-would-not-start naming %s", args, err, ArgsSource)
		}
	}
	// `k3s server` skips keys it does not define (k3s stripInvalidFlags),
	// with a warning, but a misspelt node-label is still refused.
	eff, err := Merge([]File{{Path: cfgPath, Data: []byte("unknown-key: 1\ndisable: [traefik]\nnode-label: [a=1]\n")}}, []string{"server"})
	if err != nil || eff.Role != RoleServer || len(eff.Warnings) != 1 || !slices.Equal(Values(eff.NodeLabels), []string{"a=1"}) {
		t.Errorf("Merge for server = %+v, %v; want one warning and a=1", eff, err)
	}
	if _, err := Merge([]File{{Path: cfgPath, Data: []byte("node_label: [a=1]\n")}}, []string{"server"}); !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("Merge for server with node_label: %v, want malformed", err)
	}
}

// newHost makes a host root with the given files (host path → content).
func newHost(t testing.TB, files map[string]string) *hostfs.Root {
	t.Helper()
	root, err := hostfs.New(testkit.HostFiles(t, files))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestReadFilesOrder(t *testing.T) {
	t.Parallel()
	root := newHost(t, map[string]string{
		cfgPath:                       "a: 1\n",
		dropDir + "/b.yaml":           "",
		dropDir + "/B.YML":            "",
		dropDir + "/a.Yaml":           "",
		dropDir + "/_z.yml":           "",
		dropDir + "/c.txt":            "",
		dropDir + "/d.yaml.bak":       "",
		dropDir + "/dir.yaml/x":       "",
		"/etc/rancher/k3s/other.yaml": "",
	})
	files, err := ReadFiles(root, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, f.Path)
	}
	// Byte order: upper case before '_' before lower case.
	want := []string{cfgPath, dropDir + "/B.YML", dropDir + "/_z.yml", dropDir + "/a.Yaml", dropDir + "/b.yaml"}
	if !slices.Equal(got, want) {
		t.Errorf("ReadFiles = %q, want %q", got, want)
	}
}

func TestReadFilesMissing(t *testing.T) {
	t.Parallel()
	files, err := ReadFiles(newHost(t, nil), cfgPath)
	if err != nil || len(files) != 0 {
		t.Errorf("ReadFiles on an empty host = %v, %v; want none, nil", files, err)
	}
	// Drop-ins without config.yaml are read (k3s does too).
	files, err = ReadFiles(newHost(t, map[string]string{dropDir + "/x.yaml": "node-label: [a=1]\n"}), cfgPath)
	if err != nil || len(files) != 1 {
		t.Errorf("ReadFiles with only a drop-in = %v, %v; want it", files, err)
	}
}

// BenchmarkEffective reads and merges a config.yaml with five drop-ins
// (nodeprep's among them) and a few k3s arguments.
func BenchmarkEffective(b *testing.B) {
	files := map[string]string{cfgPath: "token: boop\nserver: https://k3s:6443\nnode-label: [site=lab, rack=r1]\nkubelet-arg: [max-pods=250]\n"}
	for i := range 5 {
		var sb strings.Builder
		fmt.Fprintf(&sb, "node-label+:\n")
		for j := range 10 {
			fmt.Fprintf(&sb, "  - example.com/l%d-%d=v%d\n", i, j, j)
		}
		fmt.Fprintf(&sb, "node-taint+: [t%d=x:NoSchedule]\n", i)
		files[fmt.Sprintf("%s/%02d-x.yaml", dropDir, i*20)] = sb.String()
	}
	root := newHost(b, files)
	args := []string{"--server", "https://k3s:6443", "--kubelet-arg=v=2"}
	b.ReportAllocs()
	for b.Loop() {
		fs, err := ReadFiles(root, cfgPath)
		if err != nil {
			b.Fatal(err)
		}
		eff, err := Merge(fs, args)
		if err != nil || len(eff.NodeLabels) != 52 {
			b.Fatalf("Merge: %d labels, %v", len(eff.NodeLabels), err)
		}
	}
}

// BenchmarkMerge is the merge alone, on bytes already read.
func BenchmarkMerge(b *testing.B) {
	var files []File
	files = append(files, File{Path: cfgPath, Data: []byte("node-label: [site=lab, rack=r1]\n")})
	for i := range 5 {
		files = append(files, File{Path: fmt.Sprintf("%s/%02d.yaml", dropDir, i), Data: []byte("node-label+: [a=1, b=2, c=3, d=4]\nnode-taint+: [t=x:NoSchedule]\n")})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Merge(files, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReadFilesAsK3s: the entries k3s cannot read. Class 1: a dangling
// drop-in makes k3s ignore every file; class 2: a link to a directory
// stops it, while a real directory is skipped; the drop-in directory as a
// regular file stops it.
func TestReadFilesAsK3s(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		want    error  // nil: no error
		msg     string // in the error
		files   []string
	}{
		{
			name: "dangling drop-in link",
			prepare: func(t *testing.T, dir string) {
				symlink(t, "../gone.yaml", filepath.Join(dir, dropDir, "10-gone.yaml"))
			},
			want: ErrK3sIgnoresConfig, msg: "10-gone.yaml",
		},
		{
			name: "link to a directory",
			prepare: func(t *testing.T, dir string) {
				mkdir(t, filepath.Join(dir, "/etc/rancher/k3s/real"))
				symlink(t, "../real", filepath.Join(dir, dropDir, "20-dir.yaml"))
			},
			want: ErrK3sWouldNotStart, msg: "20-dir.yaml",
		},
		{
			name: "a real directory is skipped",
			prepare: func(t *testing.T, dir string) {
				mkdir(t, filepath.Join(dir, dropDir, "20-dir.yaml"))
			},
			files: []string{cfgPath},
		},
		{
			name: "link to a file is read",
			prepare: func(t *testing.T, dir string) {
				symlink(t, "../config.yaml", filepath.Join(dir, dropDir, "30-same.yml"))
			},
			files: []string{cfgPath, dropDir + "/30-same.yml"},
		},
		{
			name: "a FIFO",
			prepare: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, dropDir, "40-fifo.yaml"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			want: ErrK3sWouldNotStart, msg: "40-fifo.yaml",
		},
		{
			name: "drop-in directory is a file",
			prepare: func(t *testing.T, dir string) {
				if err := os.RemoveAll(filepath.Join(dir, dropDir)); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, dropDir), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: ErrK3sWouldNotStart, msg: dropDir,
		},
		{
			name: "config.yaml is a dangling link: only the drop-ins",
			prepare: func(t *testing.T, dir string) {
				p := filepath.Join(dir, cfgPath)
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				symlink(t, "gone.yaml", p)
				if err := os.WriteFile(filepath.Join(dir, dropDir, "10.yaml"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			files: []string{dropDir + "/10.yaml"},
		},
		{
			name: "config.yaml is a directory",
			prepare: func(t *testing.T, dir string) {
				p := filepath.Join(dir, cfgPath)
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				mkdir(t, p)
			},
			want: ErrK3sWouldNotStart, msg: cfgPath,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := newHost(t, map[string]string{cfgPath: "node-taint: [gpu=present:NoSchedule]\n"})
			mkdir(t, filepath.Join(root.Dir(), dropDir))
			tc.prepare(t, root.Dir())
			files, err := ReadFiles(root, cfgPath)
			if tc.want != nil {
				if !errors.Is(err, tc.want) || !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("ReadFiles error %v: want %v (malformed) naming %s", err, tc.want, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.files) {
				t.Errorf("ReadFiles = %q, want %q", got, tc.files)
			}
		})
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestMergeAliasBomb: a config whose first document expands past
// yamlbound.MaxK3sConfig is refused, naming the file, before yaml.v2
// expands it (the 212 KB file of one 200 KB string aliased 4,000 times
// took 1 GiB and 13 s); aliases within the bound are read as k3s reads
// them; text yaml.v3 cannot parse gets yaml.v2's, and so k3s's, verdict.
func TestMergeAliasBomb(t *testing.T) {
	t.Parallel()
	const drop = "/etc/rancher/k3s/config.yaml.d/60-bomb.yaml"
	bomb := "node-name: &a \"" + strings.Repeat("x", 200_000) + "\"\nnode-label: [" + strings.Repeat("*a, ", 3999) + "*a]\n"
	_, err := Merge([]File{{Path: cfgPath, Data: []byte("node-label: [a=1]\n")}, {Path: drop, Data: []byte(bomb)}}, nil)
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), drop) || !strings.Contains(err.Error(), "763.1 MiB") {
		t.Errorf("Merge of the bomb: %v; want malformed, ErrExpands, naming %s and its expanded size", err, drop)
	}
	// A second document k3s never reads may hold anything.
	eff, err := Merge([]File{{Path: drop, Data: []byte("node-label: &l [gpu=yes]\nnode-taint: *l\n---\n" + bomb)}}, nil)
	if err != nil || !slices.Equal(Values(eff.NodeLabels), []string{"gpu=yes"}) || !slices.Equal(Values(eff.NodeTaints), []string{"gpu=yes"}) {
		t.Errorf("Merge with aliases within the bound = %+v, %v; want gpu=yes twice", eff, err)
	}
	_, err = Merge([]File{{Path: drop, Data: []byte("node-label: &a [x=1, *a\n")}}, nil)
	if !errors.Is(err, ErrK3sWouldNotStart) || errors.Is(err, yamlbound.ErrExpands) {
		t.Errorf("Merge of unparsable YAML with an alias: %v; want yaml.v2's k3s-would-not-start", err)
	}
}

// TestMergeAliasBudget: drop-ins each within yamlbound.MaxK3sConfig but
// whose aliases add up past it are refused at the file that goes over,
// naming it (50 drop-ins of 12 KB, each 7.6 MB expanded, took 1 GiB
// through `join`).
func TestMergeAliasBudget(t *testing.T) {
	t.Parallel()
	drop := "node-label+: &a [\"k=" + strings.Repeat("v", 4000) + "\"]\nnode-taint: [" + strings.Repeat("*a, ", 249) + "*a]\n" // 1 MB each
	var files []File
	for i := range 10 {
		files = append(files, File{Path: fmt.Sprintf("/etc/rancher/k3s/config.yaml.d/%02d.yaml", i), Data: []byte(drop)})
	}
	_, err := Merge(files, nil)
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "config.yaml.d/08.yaml") {
		t.Errorf("Merge of 10 drop-ins of 1 MB: %v; want malformed, ErrExpands, naming 08.yaml", err)
	}
}
