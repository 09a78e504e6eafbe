package yamlbound

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	yaml2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
)

// scalarBomb is one scalar of size bytes aliased n times: the k3s
// config.yaml of the report (200 KB aliased 4,000 times).
func scalarBomb(size, n int) []byte {
	return []byte("node-name: &a \"" + strings.Repeat("x", size) + "\"\nnode-label: [" + strings.Repeat("*a, ", n-1) + "*a]\n")
}

// fanOut is the billion laughs: levels of lists of ten aliases of the level
// before.
func fanOut(levels int) []byte {
	var b strings.Builder
	b.WriteString("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", i-1), 10), ","))
	}
	return []byte(b.String())
}

// deepAliases nests a list 9,000 deep and places an alias of it at the
// bottom of another such list: each is within the parsers' 10,000 levels,
// the expansion is not.
func deepAliases() []byte {
	return []byte("a: &d " + strings.Repeat("[", 9000) + "x" + strings.Repeat("]", 9000) + "\n" +
		"b: " + strings.Repeat("[", 9000) + "*d" + strings.Repeat("]", 9000) + "\n")
}

func TestCheck(t *testing.T) {
	t.Parallel()
	manyDocs := bytes.Repeat([]byte("a: b\n---\n"), 1000)
	bombLast := append(bytes.Clone(manyDocs), scalarBomb(10000, 1000)...)
	tests := []struct {
		name      string
		data      []byte
		limit     int64
		wantErr   string // "" accepted
		firstOnly bool
	}{
		{name: "k3s config", data: []byte("node-label:\n  - gpu=true\nnode-taint: [\"nvidia.com/gpu=true:NoSchedule\"]\n"), limit: MaxK3sConfig},
		{name: "aliases well within", data: []byte("a: &a [x, y]\nb: *a\nc: *a\n"), limit: 100},
		{name: "empty", data: nil, limit: 1},
		{name: "one big scalar aliased 4,000 times", data: scalarBomb(200_000, 4000), limit: MaxK3sConfig,
			wantErr: "YAML document 1 expands to 763.1 MiB with its aliases, more than the 8.0 MiB it may expand to (216030 bytes of text)"},
		{name: "650 KB: 600 KB aliased 12,000 times", data: scalarBomb(600_000, 12000), limit: MaxK3sConfig, wantErr: "expands to 6.7 GiB"},
		{name: "fan-out of 9 levels", data: fanOut(9), limit: MaxK3sConfig, wantErr: "YAML document 1 expands to"},
		{name: "fan-out of 80 levels saturates", data: fanOut(80), limit: MaxK3sConfig, wantErr: "YAML document 1 expands to"},
		{name: "fan-out of 3 levels is 11,000 nodes", data: fanOut(3), limit: MaxK3sConfig},
		{name: "many documents, the last a bomb", data: bombLast, limit: MaxClusterDocument / 64, wantErr: "YAML document 1001 expands to"},
		{name: "many documents, the last a bomb, first only", data: bombLast, limit: MaxClusterDocument / 64, firstOnly: true},
		{name: "deep through aliases", data: deepAliases(), limit: MaxK3sConfig, wantErr: "nests 18003 levels deep"},
		{name: "alias in its own anchor is the decoder's to refuse", data: []byte("a: &a [b, *a]\n"), limit: 100},
		{name: "merge key", data: []byte("a: &a {x: " + strings.Repeat("y", 100) + "}\nb: {<<: *a}\nc: {<<: *a}\n"), limit: 300, wantErr: "expands to 3"},
		{name: "not YAML 1.2, no alias", data: []byte("a: [b\n"), limit: 100},
		{name: "not YAML 1.2, a '*' that cannot be an alias", data: []byte("a: [b*c\n" + strings.Repeat("- x\n", 100)), limit: 100},
		{name: "not YAML 1.2, few aliases", data: []byte("a: &x [b, *x\n"), limit: 1000},
		{name: "not YAML 1.2, many aliases", data: []byte("a: &x b\nc: [" + strings.Repeat("*x, ", 30) + "\n"), limit: MaxK3sConfig,
			wantErr: "does not parse as YAML 1.2"},
		{name: "no alias: the file's size limit bounds it", data: []byte(strings.Repeat("- x\n", 100)), limit: 100},
		{name: "a '*' in a string: parsed and measured", data: []byte("- '*'\n" + strings.Repeat("- x\n", 100)), limit: 100, wantErr: "expands to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check := Check
			if tt.firstOnly {
				check = CheckFirst
			}
			err := check(tt.data, tt.limit)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrExpands) {
				t.Fatalf("got %v, want an ErrExpands containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestExpandedSizeIsWhatV2Decodes: the size Check measures is the size of
// the document yaml.v2 decodes, written out as JSON: within NodeCost per
// node of it.
func TestExpandedSizeIsWhatV2Decodes(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"a: &a [x, y, {z: " + strings.Repeat("w", 1000) + "}]\nb: [*a, *a, *a]\n",
		string(fanOut(2)),
		"- &s " + strings.Repeat("q", 5000) + "\n" + strings.Repeat("- *s\n", 50),
	} {
		size, _, err := ExpandedSize([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := yaml2.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		js := len(fmt.Sprint(v))
		if int64(js) > size || size > int64(js)*3 {
			t.Errorf("measured %d bytes, yaml.v2 decodes %d bytes (as fmt prints them)", size, js)
		}
	}
}

// FuzzCheck: Check never panics; a document with a '*' that it accepts
// expands to no more than the limit; and a document with no alias
// expands to at most aliasFree times its size, the ratio Estimate and the
// limits rely on.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"a: b\n", "[?,?,?]", "{a,b,c}", "- \n- \n", "? \n", "a: &a [b]\nc: [*a, *a]\n", "---\n---\n", "a: \"\\x41\"\n", "a: |+\n\n\n", string(fanOut(2))} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 16
		err := Check(data, limit)
		size, depth, perr := ExpandedSize(data)
		if perr != nil {
			return
		}
		if err == nil && bytes.IndexByte(data, '*') >= 0 && (size > limit || depth > MaxDepth) {
			t.Fatalf("accepted %q, which expands to %d bytes, %d deep", data, size, depth)
		}
		if bytes.IndexByte(data, '*') < 0 && size > aliasFree*int64(len(data))+aliasFree {
			t.Fatalf("%q has no alias and expands to %d bytes, more than %d times its %d", data, size, aliasFree, len(data))
		}
		if err == nil {
			var v any
			_ = yaml.Unmarshal(data, &v) // within the limit: decodes quickly
		}
	})
}

// BenchmarkCheck measures what the check costs on what it guards: the
// bombs, refused, and a 1 MiB flood of one-letter items with one alias,
// the most nodes a file within bounded.MaxK3sConfig can hold.
func BenchmarkCheck(b *testing.B) {
	flood := []byte("a: &a x\nb: [" + strings.Repeat("a,", 500_000) + "*a]\n")
	for _, bc := range []struct {
		name string
		data []byte
	}{{"scalar-bomb-212KB", scalarBomb(200_000, 4000)}, {"scalar-bomb-650KB", scalarBomb(600_000, 12000)}, {"fan-out-9", fanOut(9)}, {"flood-1MiB", flood}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Check(bc.data, MaxK3sConfig)
			}
		})
	}
}

// TestBudget: documents each within their own limit are refused once
// what their aliases expand them to adds up past the budget of their
// input (60 documents of a 20 KB string aliased 3,000 times, each 60 MB,
// took 1.4 GiB through `cluster check`), naming the document, what the
// input's documents expand to so far and the budget; documents without
// an alias draw nothing from it, however many.
func TestBudget(t *testing.T) {
	t.Parallel()
	doc := scalarBomb(20_000, 300) // 6 MB
	b := NewBudget(20 << 20)
	for i := 1; i <= 3; i++ {
		if err := b.CheckFirst(doc, MaxClusterDocument); err != nil {
			t.Fatalf("document %d, within the budget: %v", i, err)
		}
	}
	err := b.CheckFirst(doc, MaxClusterDocument)
	if !errors.Is(err, ErrExpands) || !strings.Contains(err.Error(), "the documents before it and this one expand to 23.0 MiB with their aliases, more than the 20.0 MiB") {
		t.Fatalf("the fourth document: %v; want it past the budget", err)
	}
	free := NewBudget(1)
	for i := range 1000 {
		text := []string{"node-label: [a=b, c=d]\n", "args: [\"*.log\", '*'] # * * *\n"}[i%2]
		if err := free.CheckFirst([]byte(text), MaxK3sConfig); err != nil {
			t.Fatalf("a document without an alias (%q): %v", text, err)
		}
	}
	if err := NewBudget(1<<30).CheckFirst(scalarBomb(200_000, 4000), MaxK3sConfig); !errors.Is(err, ErrExpands) {
		t.Errorf("a document over its own limit within the budget: %v", err)
	}
}
