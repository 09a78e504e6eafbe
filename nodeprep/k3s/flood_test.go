package k3s

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// floodFiles are config.yaml and n drop-ins, each appending one label
// with node-label+ (the kind of tree a configuration generator leaves).
func floodFiles(n int) []File {
	files := []File{{Path: cfgPath, Data: []byte("node-label: [site=lab]\n")}}
	for i := range n {
		files = append(files, File{Path: fmt.Sprintf("%s/%06d.yaml", dropDir, i), Data: fmt.Appendf(nil, "node-label+: [example.com/d%d=v]\n", i)})
	}
	return files
}

// floodHost writes floodFiles(n) under a new host root.
func floodHost(tb testing.TB, n int) *hostfs.Root {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, dropDir), 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, f := range floodFiles(n) {
		if err := os.WriteFile(filepath.Join(dir, f.Path), f.Data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	root, err := hostfs.New(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return root
}

// TestMergeFloodKeepsEveryAppend: every node-label+ of many drop-ins
// appends, in file order, after config.yaml's list, each entry naming its
// file (k3s readConfigFile appends "key+" values to the list so far).
func TestMergeFloodKeepsEveryAppend(t *testing.T) {
	t.Parallel()
	const n = 3000
	files := floodFiles(n)
	eff, err := Merge(files, []string{"--node-label=cli=1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.NodeLabels) != n+2 {
		t.Fatalf("%d labels, want %d", len(eff.NodeLabels), n+2)
	}
	if e := eff.NodeLabels[0]; e.Value != "site=lab" || e.Source != cfgPath {
		t.Errorf("first label %+v, want config.yaml's site=lab", e)
	}
	for i := range n {
		e := eff.NodeLabels[i+1]
		if want := fmt.Sprintf("example.com/d%d=v", i); e.Value != want || e.Source != files[i+1].Path {
			t.Fatalf("label %d = %+v, want %s from %s", i+1, e, want, files[i+1].Path)
		}
	}
	if e := eff.NodeLabels[n+1]; e.Value != "cli=1" || e.Source != ArgsSource {
		t.Errorf("last label %+v, want the argument's", e)
	}
	if len(eff.Changes) != n+2 {
		t.Errorf("%d changes, want %d", len(eff.Changes), n+2)
	}
}

// BenchmarkPlanDropInFlood is `join`'s plan (read every file, merge, judge)
// over config.yaml and N drop-ins that each append a label with
// node-label+: linear in N (it was quadratic: 8,000 took 2.2 s and
// 100,000 over 120 s through `nodeprep join`).
func BenchmarkPlanDropInFlood(b *testing.B) {
	for _, n := range []int{8000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			root := floodHost(b, n)
			opts := Options{ConfigPath: cfgPath, Labels: []Label{{Key: "nodeprep.dev/pool", Value: "gpu"}}}
			b.ReportAllocs()
			for b.Loop() {
				r, err := Plan(root, opts)
				if err != nil {
					b.Fatal(err)
				}
				if got := len(r.Effective.NodeLabels); got != n+2 {
					b.Fatalf("%d labels, want %d", got, n+2)
				}
			}
		})
	}
}

// BenchmarkMergeDropInFlood is the merge alone over N drop-ins already
// read.
func BenchmarkMergeDropInFlood(b *testing.B) {
	for _, n := range []int{8000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			files := floodFiles(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Merge(files, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
