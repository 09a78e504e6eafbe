package specset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestViewAliasBudget: specs each within yamlbound.MaxCDISpec whose
// aliases take the view past maxViewExpansion together (ten YAML specs of
// 200 KB, each 120 MB expanded, took 1 GiB in `cdi check`): Load refuses
// the one that goes over with a warning naming it, and NewCache refuses it
// as malformed. The named spec draws nothing: the others cannot take its
// share. The budget is lowered to 1 MiB here, three specs of 400 KB each.
func TestViewAliasBudget(t *testing.T) {
	// Not parallel: it lowers maxViewExpansion.
	defer func(m int64) { maxViewExpansion = m }(maxViewExpansion)
	maxViewExpansion = 1 << 20
	root := testkit.HostTree(t, "nixos-h200")
	if err := os.MkdirAll(filepath.Join(root.Dir(), "etc/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		spec := fmt.Sprintf("cdiVersion: \"0.6.0\"\nkind: example.com/b%d\ndevices:\n- name: \"0\"\n  containerEdits:\n    env: [&a \"X=%s\", %s*a]\n    deviceNodes: [{path: /dev/null}]\n",
			i, strings.Repeat("x", 4000), strings.Repeat("*a, ", 99))
		if err := root.WriteFile(fmt.Sprintf("/etc/cdi/b%d.yaml", i), []byte(spec), hostfs.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Load(root, nil, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, f := range v.Findings {
		if f.Code == cdi.CodeInvalidSpec {
			refused = append(refused, f.Message)
		}
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "/etc/cdi/b2.yaml") || !strings.Contains(refused[0], "all of them may expand to") {
		t.Errorf("invalid-spec findings %q; want one, that /etc/cdi/b2.yaml takes the view past its budget", refused)
	}
	_, _, err = NewCache(root, []string{"/etc/cdi"})
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "b2.yaml") {
		t.Errorf("NewCache: %v; want malformed, ErrExpands, naming b2.yaml", err)
	}
}
