package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// aliasBomb is a document of one size-byte string aliased n times.
func aliasBomb(head string, size, n int) string {
	return head + "x: &a \"" + strings.Repeat("x", size) + "\"\ny: [" + strings.Repeat("*a, ", n-1) + "*a]\n"
}

// TestReadRefusesAliasBombs: a document whose aliases expand past
// yamlbound.MaxClusterDocument is refused as malformed, naming it, before
// it is converted to JSON (a 200 KB manifest took 1.6 GiB): a manifest,
// the device plugin's values, a later document; aliases within the bound
// still read.
func TestReadRefusesAliasBombs(t *testing.T) {
	t.Parallel()
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\n"
	for _, tc := range []struct{ name, in, src string }{
		{"configmap", aliasBomb("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n  ", 200_000, 1000), "m.yaml#1"},
		{"values", aliasBomb("", 200_000, 400), "m.yaml#1"},
		{"second document", pod + "---\n" + aliasBomb("", 100_000, 800), "m.yaml#2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := Read("m.yaml", strings.NewReader(tc.in))
			if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), tc.src) {
				t.Errorf("Read: %v; want malformed, ErrExpands, naming %s", err, tc.src)
			}
		})
	}
	objs, _, err := Read("m.yaml", strings.NewReader(strings.Replace(pod, "image: i", "image: &i img", 1)+"---\n"+strings.Replace(pod, "name: p", "name: q", 1)))
	if err != nil || len(objs) != 2 {
		t.Errorf("Read with an anchor = %d objects, %v; want 2", len(objs), err)
	}
}

// TestReadRefusesNULAndHugeFiles: a stream with a NUL byte (which the YAML
// parsers take for the end of the text, so that a file of NULs read as no
// manifest and `check` exited 1) is malformed; a file over
// bounded.MaxClusterManifests is refused by its size, before it is read.
func TestReadRefusesNULAndHugeFiles(t *testing.T) {
	t.Parallel()
	_, _, err := Read("nul.yaml", strings.NewReader(strings.Repeat("\x00", 4096)))
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), `"nul.yaml": a NUL byte at offset 0`) {
		t.Errorf("Read of NULs: %v; want malformed naming the offset", err)
	}
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 200<<20); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"big.yaml", "."} {
		_, _, err = Reader{Dir: dir}.ReadFS(os.DirFS(dir), name)
		if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), big+`": 209715200 bytes`) {
			t.Errorf("ReadFS(%s) of a 200 MB file: %v; want malformed, too large by its size, naming it", name, err)
		}
	}
}

// TestReadAliasBudget: documents each within yamlbound.MaxClusterDocument
// but whose aliases add up past it, in one stream or in the files of a
// directory, are refused at the document that goes over, naming it (60
// such manifests of 1.9 MB took 1.4 GiB through `cluster check`).
func TestReadAliasBudget(t *testing.T) {
	t.Parallel()
	doc := aliasBomb("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n  ", 20_000, 300) // 6 MB each
	_, _, err := Read("m.yaml", strings.NewReader(strings.Repeat(doc+"---\n", 12)))
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "m.yaml#12") {
		t.Errorf("Read of 12 documents of 6 MB: %v; want malformed, ErrExpands, naming m.yaml#12", err)
	}
	dir := t.TempDir()
	for i := range 12 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("m%02d.yaml", i)), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = ReadFS(os.DirFS(dir), ".")
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "m11.yaml#1") {
		t.Errorf("ReadFS of 12 files of 6 MB: %v; want malformed, ErrExpands, naming m11.yaml#1", err)
	}
	if _, _, err := Read("m.yaml", strings.NewReader(strings.Repeat(doc+"---\n", 10))); err != nil {
		t.Errorf("Read of 10 documents of 6 MB: %v; want them read", err)
	}
}
