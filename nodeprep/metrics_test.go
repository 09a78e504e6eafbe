package nodeprep

import (
	"bytes"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// TestMetricLabels keeps MetricLabels (what cluster check judges KEDA
// triggers against) equal to the families and labels Metrics writes.
func TestMetricLabels(t *testing.T) {
	t.Parallel()
	inv, err := gpu.Simulate("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Ready: true, Inventory: inv, Stages: []StageResult{{Name: StageInventory, Status: StatusOK}}}
	data, err := Metrics(r, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for name, mf := range families {
		var labels []string
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		sort.Strings(labels)
		got[name] = labels
	}
	if len(got) != len(MetricLabels) {
		t.Errorf("Metrics writes %d families, MetricLabels lists %d", len(got), len(MetricLabels))
	}
	for name, want := range MetricLabels {
		if g, ok := got[name]; !ok || !slices.Equal(g, want) {
			t.Errorf("family %s: Metrics labels %v (present %t), MetricLabels says %v", name, g, ok, want)
		}
	}
}
