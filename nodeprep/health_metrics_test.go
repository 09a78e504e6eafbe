package nodeprep

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
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

// TestExpectedGPUs: health's baseline is the last report's expectedGPUs,
// else (a status file from before the field) its inventory's UUIDs; no
// status file means no baseline.
func TestExpectedGPUs(t *testing.T) {
	t.Parallel()
	host := upHost(t, "nixos-h200")
	if got, err := expectedGPUs(host, "/run/nodeprep/status.json"); err != nil || got != nil {
		t.Fatalf("no status file: %v, %v", got, err)
	}
	inv, err := gpu.Simulate("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		report Report
		want   int
	}{
		{Report{Inventory: inv}, len(inv.GPUs)},
		{Report{Inventory: inv, ExpectedGPUs: []string{"GPU-1"}}, 1},
	} {
		data, _ := json.Marshal(tt.report)
		if err := host.WriteFile("/run/nodeprep/status.json", data, hostfs.WriteOptions{Mode: 0o644, MkdirAll: true}); err != nil {
			t.Fatal(err)
		}
		got, err := expectedGPUs(host, "/run/nodeprep/status.json")
		if err != nil || len(got) != tt.want {
			t.Errorf("expectedGPUs = %v, %v; want %d", got, err, tt.want)
		}
	}
	host.WriteFile("/run/nodeprep/status.json", []byte("{"), hostfs.WriteOptions{Mode: 0o644})
	if _, err := expectedGPUs(host, "/run/nodeprep/status.json"); err == nil {
		t.Error("a torn status file gave no error")
	}
}
