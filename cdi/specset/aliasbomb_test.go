package specset_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// specBomb is a YAML CDI spec of a 400 KB variable aliased 400 times
// (160 MB once expanded).
var specBomb = "cdiVersion: \"0.6.0\"\nkind: example.com/bomb\nannotations: {x: &a \"X=" + strings.Repeat("x", 400_000) + "\"}\n" +
	"devices:\n- name: \"0\"\n  containerEdits:\n    env: [" + strings.Repeat("*a, ", 399) + "*a]\n    deviceNodes: [{path: /dev/null}]\n"

// TestAliasBombInSpecDir: a spec in /etc/cdi whose aliases expand past
// yamlbound.MaxCDISpec is skipped with a warning that says so (never
// handed to the CDI library's parser instead), and NewCache, which hands
// every spec to the library, refuses it as malformed naming it.
func TestAliasBombInSpecDir(t *testing.T) {
	t.Parallel()
	root := testkit.HostTree(t, "nixos-h200")
	if err := os.MkdirAll(filepath.Join(root.Dir(), "etc/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFile("/etc/cdi/bomb.yaml", []byte(specBomb), hostfs.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err := specset.Load(root, nil, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(findingsText(v.Findings))
	if !strings.Contains(text, "/etc/cdi/bomb.yaml") || !strings.Contains(text, "expands to") {
		t.Errorf("findings %s; want a warning that /etc/cdi/bomb.yaml expands past its limit", text)
	}
	_, _, err = specset.NewCache(root, []string{"/etc/cdi"})
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "bomb.yaml") {
		t.Errorf("NewCache: %v; want malformed, ErrExpands, naming bomb.yaml", err)
	}
}
