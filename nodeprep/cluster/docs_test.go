package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

// TestNixOSPageWorkload: the GPU pod docs/nixos.md shows (section 4) is
// judged by cluster check against a node of the pool that page's
// configuration makes (its pool label, nodeprep's default taint, and the
// labels up registers a DGX H200 with: GFD's, the self-test's) and passes:
// a page that tells people to run a pod nodeprep would refuse is a defect.
func TestNixOSPageWorkload(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "nixos.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(data), "\n## 4.")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	manifest, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/nixos.md has no section 4 with a YAML example")
	}
	label, err := k3s.ParseLabel("node.example.com/pool=gpu-h200")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	adapters := len(inv.GPUs)
	labels, err := nodepolicy.NodeLabels(inv, nodepolicy.NodeLabelOptions{GFD: true, Selftest: nodepolicy.SelftestPassed, VulkanAdapters: &adapters, Extra: []k3s.Label{label}})
	if err != nil {
		t.Fatal(err)
	}
	pool := cluster.Pool{Label: label, Labels: labels, Taints: nodepolicy.NodeTaints(true, nil),
		Arch: "amd64", DeviceNames: []string{nodepolicy.DeviceNameUUID}, DriverRoot: "/run/opengl-driver"}
	// The NixOS module deploys the RuntimeClass on a server
	// (services.nodeprep.k3s.runtimeClass), as the page says.
	class, err := yaml.Marshal(cluster.PatchedRuntimeClassObject())
	if err != nil {
		t.Fatal(err)
	}
	objs, skipped, err := cluster.Read("docs/nixos.md", strings.NewReader(manifest+"\n---\n"+string(class)))
	if err != nil {
		t.Fatal(err)
	}
	rep := cluster.Check(objs, skipped, cluster.CheckOptions{Pool: pool, Metrics: nodeprep.MetricLabels})
	if !rep.OK || len(rep.Rows) != 2 {
		t.Errorf("cluster check of docs/nixos.md's pod: %d rows, ok %v: %+v", len(rep.Rows), rep.OK, rep)
	}
}

// TestOwnLabels: the labels the pool's model node carries are the ones
// nodeprep writes.
func TestOwnLabels(t *testing.T) {
	if cluster.LabelSelftest != nodepolicy.LabelSelftest {
		t.Errorf("cluster.LabelSelftest = %q, nodeprep writes %q", cluster.LabelSelftest, nodepolicy.LabelSelftest)
	}
}
