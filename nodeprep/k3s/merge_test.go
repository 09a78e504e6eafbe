package k3s

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testkit"
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
			name: "null plain value empties the list",
			files: []src{
				{cfgPath, "node-label: [a=1]\n"},
				{dropDir + "/10.yml", "node-label:\n"},
			},
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
			name:       "k3s args replace the file lists",
			files:      []src{{cfgPath, "node-label: [a=1]\nnode-taint: [t:NoSchedule]\n"}, {dropDir + "/50.yaml", "node-taint+: [u:NoSchedule]\n"}},
			args:       []string{"--node-taint=x:NoExecute", "--server", "https://s:6443", "--node-taint", "y:NoExecute"},
			wantLabels: []string{"a=1@config.yaml"},
			wantTaints: []string{"x:NoExecute@" + ArgsSource, "y:NoExecute@" + ArgsSource},
		},
		{
			name:       "single-dash and label args",
			args:       []string{"-node-label=a=1", "--node-label", "b=2", "--node-labels=ignored", "--server https://s --node-label c=3"},
			wantLabels: []string{"a=1@" + ArgsSource, "b=2@" + ArgsSource, "c=3@" + ArgsSource},
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
		{"map value", "node-label: {a: 1}\n"},
		{"nested list", "node-taint: [[a]]\n"},
		{"two documents", "a: 1\n---\nb: 2\n"},
		{"tab indent", "node-label:\n\t- a=1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Merge([]File{{Path: "/etc/rancher/k3s/config.yaml.d/20-bad.yaml", Data: []byte(tc.data)}}, nil)
			if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "20-bad.yaml") {
				t.Errorf("Merge error %v: want malformed naming 20-bad.yaml", err)
			}
		})
	}
	_, err := Merge(nil, []string{"--node-taint"})
	if !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("Merge(--node-taint without value) error %v, want malformed", err)
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
