package k3s

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// FuzzMerge: any config.yaml, drop-in and k3s argument merge without a
// panic; a refusal is malformed input; every effective entry comes from one
// of the inputs.
func FuzzMerge(f *testing.F) {
	f.Add([]byte("node-label: [site=lab, rack=r1]\n"), []byte("node-label+: [gpu=yes]\n"), "--node-taint=a=b:NoSchedule")
	f.Add([]byte("node-taint: x:NoExecute\nnode-label:\n"), []byte("node-taint+:\n  - y:NoSchedule\n"), "")
	f.Add([]byte("- not a map\n"), []byte("{}"), "--node-label")
	f.Add([]byte("node-label: {a: b}\n"), []byte(""), "--node-label x=y --node-taint")
	const cfg, drop = "/etc/rancher/k3s/config.yaml", "/etc/rancher/k3s/config.yaml.d/50-x.yaml"
	f.Fuzz(func(t *testing.T, config, dropIn []byte, arg string) {
		eff, err := Merge([]File{{Path: cfg, Data: config}, {Path: drop, Data: dropIn}}, []string{arg})
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("refusal not marked malformed: %v", err)
			}
			return
		}
		for _, list := range [][]Entry{eff.NodeLabels, eff.NodeTaints} {
			for _, e := range list {
				src := map[string][]byte{cfg: config, drop: dropIn, ArgsSource: []byte(arg)}[e.Source]
				if src == nil && e.Source != ArgsSource {
					t.Fatalf("entry %q from unknown source %q", e.Value, e.Source)
				}
			}
		}
	})
}

// FuzzMergeModel checks Merge's values and its "key+" semantics against a
// model of the k3s rules. The fuzzer picks operations: ops[i] names a file
// (bit 0: config.yaml or the drop-in), a key (bits 1-2: node-label,
// node-label+, node-taint, node-taint+) and how many values it writes (bits
// 3-5; 0 writes null); the values are taken in turn from vals (split at
// ','). Each file is rendered as YAML (keys in the order chosen); a
// non-empty arg without white space is passed as --node-taint=<arg>,
// which k3s appends to the taints from the files. The model is written
// out below, apart from Merge's code.
func FuzzMergeModel(f *testing.F) {
	f.Add([]byte{0b001_01_0, 0b001_00_1, 0b010_11_1}, "site=lab,gpu=yes,a=b:NoSchedule,rack=r1", "")
	f.Add([]byte{0b011_00_0, 0b001_01_1, 0b000_00_1}, "a=1,b=2,c=3", "x=y:NoExecute")
	f.Add([]byte{0b010_10_0, 0b001_11_0, 0b001_11_1, 0b001_10_1}, "t1:NoSchedule,t2:NoExecute,t3:PreferNoSchedule", "")
	const cfg, drop = "/etc/rancher/k3s/config.yaml", "/etc/rancher/k3s/config.yaml.d/50-x.yaml"
	keys := []string{"node-label", "node-label+", "node-taint", "node-taint+"}
	f.Fuzz(func(t *testing.T, ops []byte, vals, arg string) {
		pool := strings.Split(vals, ",")
		next := 0
		docs := [2]*yaml.Node{{Kind: yaml.MappingNode}, {Kind: yaml.MappingNode}}
		used := [2]map[string]bool{{}, {}}
		type write struct {
			file   int
			key    string
			values []string
		}
		var writes []write
		for _, op := range ops {
			file, key, n := int(op&1), keys[op>>1&3], int(op>>3&7)
			if used[file][key] {
				continue
			}
			used[file][key] = true
			w := write{file: file, key: key}
			value := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
			if n > 0 {
				value = &yaml.Node{Kind: yaml.SequenceNode}
				for range n {
					v := pool[next%len(pool)]
					next++
					w.values = append(w.values, v)
					value.Content = append(value.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Style: yaml.DoubleQuotedStyle})
				}
			}
			docs[file].Content = append(docs[file].Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, value)
			writes = append(writes, w)
		}
		var data [2][]byte
		for i, d := range docs {
			if len(d.Content) == 0 {
				continue
			}
			b, err := yaml.Marshal(d)
			if err != nil {
				t.Skip("not representable in YAML")
			}
			data[i] = b
		}
		var args []string
		if arg != "" && !strings.HasPrefix(arg, "-") && slices.Equal(strings.Fields(arg), []string{arg}) {
			args = []string{"--node-taint=" + arg}
		} else {
			arg = ""
		}
		eff, err := Merge([]File{{Path: cfg, Data: data[0]}, {Path: drop, Data: data[1]}}, args)
		if err != nil {
			t.Fatalf("Merge refused a well-formed input: %v\nconfig.yaml:\n%s\ndrop-in:\n%s", err, data[0], data[1])
		}
		// The model (k3s readConfigFile, then urfave/cli's slice flag): a
		// plain key replaces the value so far, "key+" appends to it (null
		// appends nothing) or, with nothing so far, sets it; a value that
		// ends up null is one empty flag value; values are trimmed; the
		// command line's values come after the files'.
		type state struct {
			set, null  bool
			entries    []Entry
			nullSource string
		}
		st := map[string]*state{KeyNodeLabel: {}, KeyNodeTaint: {}}
		for file := range 2 {
			for _, w := range writes {
				if w.file != file {
					continue
				}
				name, plus := strings.CutSuffix(w.key, "+")
				s := st[name]
				src := []string{cfg, drop}[file]
				var add []Entry
				for _, v := range w.values {
					add = append(add, Entry{Value: strings.TrimSpace(v), Source: src})
				}
				switch {
				case plus && s.set:
					s.entries = append(s.entries, add...)
					s.null = false
				default:
					s.entries, s.null, s.nullSource = add, w.values == nil, src
				}
				s.set = true
			}
		}
		want := map[string][]Entry{}
		for name, s := range st {
			want[name] = s.entries
			if s.null {
				want[name] = []Entry{{Value: "", Source: s.nullSource}}
			}
		}
		if arg != "" {
			want[KeyNodeTaint] = append(want[KeyNodeTaint], Entry{Value: strings.TrimSpace(arg), Source: ArgsSource})
		}
		if !slices.Equal(eff.NodeLabels, want[KeyNodeLabel]) {
			t.Errorf("node-label = %v, want %v\nconfig.yaml:\n%s\ndrop-in:\n%s", eff.NodeLabels, want[KeyNodeLabel], data[0], data[1])
		}
		if !slices.Equal(eff.NodeTaints, want[KeyNodeTaint]) {
			t.Errorf("node-taint = %v, want %v\nconfig.yaml:\n%s\ndrop-in:\n%s", eff.NodeTaints, want[KeyNodeTaint], data[0], data[1])
		}
	})
}
