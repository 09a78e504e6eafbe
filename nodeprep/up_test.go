package nodeprep

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/testkit"
)

func upHost(t *testing.T, scenario string) *hostfs.Root {
	t.Helper()
	return testkit.HostTree(t, scenario)
}

type recordingNotifier struct{ states []string }

func (n *recordingNotifier) Notify(s string) error { n.states = append(n.states, s); return nil }

func upOptions(inv func() (*gpu.Inventory, error), n Notifier) UpOptions {
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return UpOptions{
		Inventory:   inv,
		CDI:         cdi.FileOptions{Spec: cdi.DefaultSpecPath, Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"}},
		DeviceNames: []string{DeviceNameUUID},
		Join:        k3s.Options{Taints: NodeTaints(true, nil)},
		GFDLabels:   true,
		StatusFile:  "/run/nodeprep/status.json",
		MetricsFile: "/run/nodeprep/nodeprep.prom",
		Notifier:    n,
		Now:         func() time.Time { clock = clock.Add(time.Millisecond); return clock },
	}
}

func simulated(name string) func() (*gpu.Inventory, error) {
	return func() (*gpu.Inventory, error) { return gpu.Simulate(name) }
}

// TestUpStops: the pipeline stops at the first unsafe stage, marks the
// rest skipped, writes no drop-in, and still writes status and metrics.
func TestUpStops(t *testing.T) {
	t.Parallel()
	nvmlMissing := fault.Unavailable(errors.New("cannot load libnvidia-ml.so.1"))
	tests := []struct {
		name     string
		scenario string
		inv      func() (*gpu.Inventory, error)
		failed   string
		reason   string
		kind     error
	}{
		{"nvml-missing", "nixos-h200", func() (*gpu.Inventory, error) { return nil, nvmlMissing }, StageInventory, "libnvidia-ml", fault.ErrUnavailable},
		{"no-healthy-gpu", "nixos-h200", func() (*gpu.Inventory, error) {
			inv, err := gpu.Simulate("dgx-a100")
			for i := range inv.GPUs {
				inv.GPUs[i].Health = gpu.Health{Reasons: []string{gpu.ReasonLost}}
			}
			return inv, err
		}, StageInventory, "no healthy GPU", fault.ErrCheckFailed},
		{"no-icd", "broken-no-icd", simulated("dgx-h200"), StageCDI, "no-icd-on-host", fault.ErrCheckFailed},
		{"index-names", "broken-index-names", simulated("dgx-h200"), StageCDI, "missing-device", fault.ErrCheckFailed},
		{"malformed-spec", "broken-malformed-spec", simulated("dgx-h200"), StageCDI, "reading CDI spec", fault.ErrMalformed},
		{"duplicate-spec", "dup-spec-copy", simulated("dgx-h200"), StageCDI, "conflicting-specs: /var/run/cdi/nvidia-container-toolkit.json and /var/run/cdi/nvidia.yaml declare the same 17 device(s)", fault.ErrCheckFailed},
		{"mixed-driver-version", "mixed-driver-version", simulated("dgx-h200"), StageCDI, "mixed-driver-version: the spec mounts driver libraries of 2 versions: 550.54.14", fault.ErrCheckFailed},
		{"plugin-kind-store", "plugin-kind-store", simulated("dgx-h200"), StageCDI, "unpatchable-spec: pods asking for k8s.device-plugin.nvidia.com/gpu=GPU-", fault.ErrCheckFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := upHost(t, tt.scenario)
			n := &recordingNotifier{}
			rep, err := Up(context.Background(), host, upOptions(tt.inv, n))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Ready || !errors.Is(rep.Err(), tt.kind) {
				t.Fatalf("ready=%v err=%v, want not ready with %v", rep.Ready, rep.Err(), tt.kind)
			}
			seen := false
			for _, s := range rep.Stages {
				switch {
				case s.Name == tt.failed:
					seen = true
					if s.Status != StatusFailed || !strings.Contains(strings.Join(s.Reasons, "\n"), tt.reason) {
						t.Errorf("stage %s = %+v, want failed naming %q", s.Name, s, tt.reason)
					}
				case seen && s.Status != StatusSkipped:
					t.Errorf("stage %s after the failure is %s, want skipped", s.Name, s.Status)
				}
			}
			if !strings.HasPrefix(rep.Verdict, "not ready: "+tt.failed) {
				t.Errorf("verdict %q", rep.Verdict)
			}
			if host.Exists("/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml") {
				t.Error("drop-in written for an unsafe node")
			}
			var status Report
			data, err := host.ReadFile("/run/nodeprep/status.json")
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &status); err != nil || status.Ready || status.Verdict != rep.Verdict {
				t.Errorf("status file: %v %+v", err, status.Verdict)
			}
			prom, _ := host.ReadFile("/run/nodeprep/nodeprep.prom")
			if !strings.Contains(string(prom), "nodeprep_ready 0") {
				t.Errorf("metrics:\n%s", prom)
			}
			if len(n.states) == 0 || strings.Contains(strings.Join(n.states, "\n"), "READY=1") {
				t.Errorf("notifications %q: want STATUS and no READY=1", n.states)
			}
		})
	}
}

// TestMetricsGolden pins the textfile's metric names and format.
func TestMetricsGolden(t *testing.T) {
	t.Parallel()
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Ready: true, Inventory: inv, Stages: []StageResult{
		{Name: StageInventory, Status: StatusOK, DurationMS: 0.5},
		{Name: StageCDI, Status: StatusOK, DurationMS: 5},
		{Name: StageSelftest, Status: StatusWarning, DurationMS: 40},
		{Name: StageJoin, Status: StatusSkipped},
	}}
	got, err := Metrics(r, time.Unix(1795966030, 0))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, "metrics/up.prom", got)
}

// TestUpPreflight: unwritable outputs are found before any stage writes.
func TestUpPreflight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, h *hostfs.Root)
		metrics string
		dropIn  string
		kind    error
	}{
		{name: "status is a directory", prepare: func(t *testing.T, h *hostfs.Root) {
			p, _ := h.Path("/run/nodeprep/status.json")
			os.MkdirAll(p, 0o755)
		}, metrics: "/run/nodeprep/nodeprep.prom", kind: fault.ErrCantWrite},
		{name: "metrics dir missing", metrics: "/var/lib/node_exporter/textfile/nodeprep.prom", kind: fault.ErrCantWrite},
		{name: "metrics relative", metrics: "nodeprep.prom", kind: fault.ErrUsage},
		{name: "metrics name too long", metrics: "/run/nodeprep/" + strings.Repeat("a", 300) + ".prom", kind: fault.ErrCantWrite},
		{name: "drop-in name too long", metrics: "/run/nodeprep/nodeprep.prom", dropIn: strings.Repeat("b", 300) + ".yaml", kind: fault.ErrCantWrite},
		{name: "drop-in is a directory", prepare: func(t *testing.T, h *hostfs.Root) {
			p, _ := h.Path("/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml")
			os.MkdirAll(p, 0o755)
		}, metrics: "/run/nodeprep/nodeprep.prom", kind: fault.ErrCantWrite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := upHost(t, "nixos-h200")
			if tt.prepare != nil {
				tt.prepare(t, host)
			}
			before, _ := host.ReadFile(cdi.DefaultSpecPath)
			opts := upOptions(simulated("dgx-h200"), nil)
			opts.MetricsFile = tt.metrics
			opts.Join.DropIn = tt.dropIn
			_, err := Up(context.Background(), host, opts)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			if after, _ := host.ReadFile(cdi.DefaultSpecPath); string(after) != string(before) {
				t.Error("the spec was written before the outputs were checked")
			}
		})
	}
}
