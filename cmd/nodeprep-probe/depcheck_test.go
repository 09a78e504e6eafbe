package main_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestLean keeps nodeprep-probe lean: it links the children's packages
// (nodeprep/child/serve and below) and nothing of the command layer, so a
// child does not pay for cobra, the config, YAML, TOML, the CDI library or
// the Kubernetes types at every start. A dependency outside std and the
// modules below is a regression (or, if a child really needs it, an entry
// to add here with the reason).
func TestLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json", "github.com/nodeprep/nodeprep/cmd/nodeprep-probe").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/nodeprep/nodeprep/"
	allowed := []string{
		mod + "nodeprep/child/serve", mod + "nodeprep/child", mod + "nodeprep/fault",
		mod + "nodeprep/gpu", mod + "nodeprep/selftest", mod + "nodeprep/manifest",
		mod + "nodeprep/bounded",   // std only: the self-test reads loader manifests through it
		mod + "nodeprep/cudaprobe", // the CUDA probe child (std, child, gpu)
		mod + "cmd/nodeprep-probe",
		"github.com/NVIDIA/go-nvml/", // the NVML child
		"github.com/google/uuid",     // go-nvml's simulated servers
		"golang.org/x/sys/unix",      // nodeprep/child: prctl, the sweep
	}
	banned := []string{"github.com/spf13/cobra", "github.com/spf13/pflag", "k8s.io/", "sigs.k8s.io/", "tags.cncf.io/", "go.yaml.in/", "github.com/BurntSushi/toml", "github.com/prometheus/", mod + "cmd/nodeprep/"}
	var linked []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		linked = append(linked, p.ImportPath)
		for _, b := range banned {
			if strings.HasPrefix(p.ImportPath, b) {
				t.Errorf("nodeprep-probe links %s: the lean child must not link %s", p.ImportPath, b)
			}
		}
		ok := false
		for _, a := range allowed {
			ok = ok || p.ImportPath == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(p.ImportPath, a))
		}
		if !ok {
			t.Errorf("nodeprep-probe links %s, which is not among the children's dependencies", p.ImportPath)
		}
	}
	for _, want := range []string{mod + "nodeprep/child/serve", mod + "nodeprep/selftest", mod + "nodeprep/gpu"} {
		if !strings.Contains(strings.Join(linked, "\n")+"\n", want+"\n") {
			t.Errorf("nodeprep-probe does not link %s (linked: %v)", want, linked)
		}
	}
}
