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

// TestBootBaseline: health's baseline is the last up report's
// expectedGPUs (else its inventory's UUIDs) and verdict, or what a health
// report carried forward; no status file, a torn one, one that records no
// GPU, or a health report without the boot verdict are errors.
func TestBootBaseline(t *testing.T) {
	t.Parallel()
	host := upHost(t, "nixos-h200")
	const file = "/run/nodeprep/status.json"
	if _, err := bootBaseline(host, file); err == nil {
		t.Fatal("no status file: no error")
	}
	inv, err := gpu.Simulate("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	no, yes := false, true
	for _, tt := range []struct {
		name    string
		report  any
		gpus    int
		ready   bool
		wantErr bool
	}{
		{"up, inventory only", Report{Ready: true, Verdict: "ready", Inventory: inv}, len(inv.GPUs), true, false},
		{"up, expectedGPUs", Report{Ready: true, Verdict: "ready", Inventory: inv, ExpectedGPUs: []string{"GPU-1"}}, 1, true, false},
		{"up not ready", Report{Ready: false, Verdict: "not ready: cdi failed", ExpectedGPUs: []string{"GPU-1"}}, 1, false, false},
		{"health carries the boot verdict", Report{Command: "health", Ready: true, Verdict: "ready", BootReady: &no, ExpectedGPUs: []string{"GPU-1"}}, 1, false, false},
		{"health, ready boot", Report{Command: "health", Ready: false, Verdict: "not ready: selftest: x", BootReady: &yes, ExpectedGPUs: []string{"GPU-1"}}, 1, true, false},
		{"health without boot verdict", Report{Command: "health", Ready: true, Verdict: "ready", ExpectedGPUs: []string{"GPU-1"}}, 0, false, true},
		{"empty object", map[string]any{}, 0, false, true},
		{"no verdict: not a report nodeprep wrote", Report{Ready: true, ExpectedGPUs: []string{"GPU-1"}}, 0, false, true},
		{"no GPU recorded", Report{Ready: true, Verdict: "ready", ExpectedGPUs: []string{}}, 0, false, true},
		{"wrong type", map[string]any{"expectedGPUs": 10}, 0, false, true},
	} {
		data, _ := json.Marshal(tt.report)
		if err := host.WriteFile(file, data, hostfs.WriteOptions{Mode: 0o644, MkdirAll: true}); err != nil {
			t.Fatal(err)
		}
		b, err := bootBaseline(host, file)
		switch {
		case tt.wantErr && err == nil:
			t.Errorf("%s: no error", tt.name)
		case !tt.wantErr && (err != nil || len(b.gpus) != tt.gpus || b.ready != tt.ready):
			t.Errorf("%s: %+v, %v; want %d GPUs, ready %v", tt.name, b, err, tt.gpus, tt.ready)
		}
	}
	host.WriteFile(file, []byte("{"), hostfs.WriteOptions{Mode: 0o644})
	if _, err := bootBaseline(host, file); err == nil {
		t.Error("a torn status file gave no error")
	}
}
