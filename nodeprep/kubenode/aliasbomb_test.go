package kubenode

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// TestLoadAliasBomb: a kubeconfig under bounded.MaxKubeconfig whose
// aliases expand past yamlbound.MaxKubeconfig (one 200 KB string aliased
// 4,000 times: about 820 MiB once sigs.k8s.io/yaml had made JSON of it) is
// refused as malformed input naming the file, before it is decoded;
// aliases within the bound still parse.
func TestLoadAliasBomb(t *testing.T) {
	t.Parallel()
	bomb := k3sKubelet + "preferences: {colors: &a \"" + strings.Repeat("x", 200_000) + "\"}\nextensions: [" + strings.Repeat("*a, ", 3999) + "*a]\n"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(file, []byte(bomb), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadAPI(bounded.ReadFile, file)
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "763.1 MiB") {
		t.Errorf("LoadAPI of the bomb: %v; want malformed, ErrExpands, naming %s and the expanded size", err, file)
	}
	within := strings.Replace(k3sKubelet, "cluster: local", "cluster: &c local", 1) + "x-cluster: *c\n"
	if sel, err := ParseKubeconfig([]byte(within)); err != nil || sel.Cluster.Server != "https://127.0.0.1:6444" {
		t.Errorf("ParseKubeconfig with an alias within the bound = %+v, %v", sel, err)
	}
}
