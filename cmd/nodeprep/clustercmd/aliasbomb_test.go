package clustercmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterCheckBoundedInputs: what `cluster check` reads is bounded by
// what it expands to and by its size, each refused with exit 65 naming
// the file: a 200 KB manifest of one string aliased (1.6 GiB before), a
// kubeconfig likewise (about 820 MiB before), a 200 MB file of NULs (read
// up to 64 MiB before; one under the limit read as no manifest, exit 1).
func TestClusterCheckBoundedInputs(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bomb := "x: &a \"" + strings.Repeat("x", 200_000) + "\"\ny: [" + strings.Repeat("*a, ", 999) + "*a]\n"
	manifest := write("bomb.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata:\n  "+strings.ReplaceAll(bomb, "\ny:", "\n  y:"))
	kubeconfig := write("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: c\n"+bomb)
	nuls := write("nul.yaml", strings.Repeat("\x00", 1<<20))
	huge := write("huge.yaml", "")
	if err := os.Truncate(huge, 200<<20); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		file string
		why  string
	}{
		{"manifest", []string{manifest}, manifest, "expands to"},
		{"kubeconfig", []string{"--kubeconfig", kubeconfig}, kubeconfig, "expands to"},
		{"NULs", []string{nuls}, nuls, "a NUL byte at offset 0"},
		{"200 MB", []string{huge}, huge, "209715200 bytes, more than the 64 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := clusterRun(t, "", append([]string{"--config", cfg, "cluster", "check"}, tc.args...)...)
			if code != 65 || !strings.Contains(errOut, filepath.Base(tc.file)) || !strings.Contains(errOut, tc.why) {
				t.Errorf("exit %d, want 65 naming %s and %q\n%s", code, tc.file, tc.why, errOut)
			}
		})
	}
}
