package nodeprep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
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
		DeviceNames: []string{nodepolicy.DeviceNameUUID},
		Join:        k3s.Options{Taints: nodepolicy.NodeTaints(true, nil)},
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
			data, err := host.ReadFile("/run/nodeprep/status.json", bounded.MaxStatus)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &status); err != nil || status.Ready || status.Verdict != rep.Verdict {
				t.Errorf("status file: %v %+v", err, status.Verdict)
			}
			prom, _ := host.ReadFile("/run/nodeprep/nodeprep.prom", bounded.MaxStatus)
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
		ctr     *container.Options
		kind    error
	}{
		{name: "container rootfs missing", metrics: "/run/nodeprep/nodeprep.prom", ctr: &container.Options{Rootfs: "/nonexistent/rootfs"}, kind: fault.ErrUnavailable},
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
			before, _ := host.ReadFile(cdi.DefaultSpecPath, bounded.MaxCDISpec)
			opts := upOptions(simulated("dgx-h200"), nil)
			opts.MetricsFile = tt.metrics
			opts.Join.DropIn = tt.dropIn
			opts.Container = tt.ctr
			_, err := Up(context.Background(), host, opts)
			if !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want %v", err, tt.kind)
			}
			if tt.ctr != nil && host.Exists("/etc/rancher/k3s/config.yaml.d") {
				t.Error("a preflight that refused the container's inputs made the drop-in directory")
			}
			if after, _ := host.ReadFile(cdi.DefaultSpecPath, bounded.MaxCDISpec); string(after) != string(before) {
				t.Error("the spec was written before the outputs were checked")
			}
		})
	}
}

// TestUpPlansBeforeWriting: up reads and validates every stage's inputs
// before its first write. On a host whose spec needs patching, bad join
// input (k3s files, labels, taints) stops the run with the input's exit
// code and leaves every file byte-identical but up's own report (the
// status and metrics files).
func TestUpPlansBeforeWriting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string // host path → content ("FIFO" makes a FIFO)
		taints  []string          // extra taints
		labels  []string          // extra labels
		kind    error
		failed  string
		message string
	}{
		{name: "malformed k3s YAML", files: map[string]string{"/etc/rancher/k3s/config.yaml": "node-label: [site=a\n"}, kind: fault.ErrMalformed, failed: StageJoin, message: "config.yaml"},
		{name: "misspelt key", files: map[string]string{"/etc/rancher/k3s/config.yaml": "node-labels: [site=a]\n"}, kind: fault.ErrMalformed, failed: StageJoin, message: "node-labels"},
		{name: "bad taint in config.yaml", files: map[string]string{"/etc/rancher/k3s/config.yaml": "node-taint: [gpu=x:NoScheduled]\n"}, kind: fault.ErrMalformed, failed: StageJoin, message: "NoScheduled"},
		{name: "FIFO drop-in", files: map[string]string{"/etc/rancher/k3s/config.yaml.d/10-site.yaml": "FIFO"}, kind: fault.ErrMalformed, failed: StageJoin, message: "FIFO"},
		{name: "FIFO config.yaml", files: map[string]string{"/etc/rancher/k3s/config.yaml": "FIFO"}, kind: fault.ErrMalformed, failed: StageJoin, message: "FIFO"},
		{name: "duplicate taint keys", taints: []string{"dedicated=a:NoSchedule", "dedicated=b:NoSchedule"}, kind: fault.ErrMalformed, failed: StageJoin, message: "unique by key and effect"},
		{name: "duplicate label keys", labels: []string{"site=a", "site=b"}, kind: fault.ErrMalformed, failed: StageJoin, message: `"site" given twice`},
		{name: "a later drop-in undoes ours", files: map[string]string{"/etc/rancher/k3s/config.yaml.d/90-site.yaml": "node-taint: [dedicated=infra:NoExecute]\n"}, kind: fault.ErrCheckFailed, failed: StageJoin, message: "90-site.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := upHost(t, "nixos-h200")
			for p, content := range tt.files {
				local, _ := host.Path(p)
				if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
					t.Fatal(err)
				}
				var err error
				if content == "FIFO" {
					err = syscall.Mkfifo(local, 0o644)
				} else {
					err = os.WriteFile(local, []byte(content), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			opts := upOptions(simulated("dgx-h200"), nil)
			taints, err := k3s.ParseTaints(tt.taints)
			if err != nil {
				t.Fatal(err)
			}
			opts.Join.Taints = nodepolicy.NodeTaints(true, taints)
			if opts.ExtraLabels, err = k3s.ParseLabels(tt.labels); err != nil {
				t.Fatal(err)
			}
			before := testkit.Snapshot(t, host.Dir(), "/run/nodeprep")
			rep, err := Up(context.Background(), host, opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := testkit.Changes(before, testkit.Snapshot(t, host.Dir(), "/run/nodeprep")); len(diff) > 0 {
				t.Errorf("bad input changed the host: %v", diff)
			}
			if rep.Ready || !errors.Is(rep.Err(), tt.kind) {
				t.Fatalf("ready=%v err=%v, want %v", rep.Ready, rep.Err(), tt.kind)
			}
			want := map[string]string{StageInventory: StatusOK, StageCDI: StatusSkipped, StageSelftest: StatusSkipped, StageJoin: StatusFailed}
			for _, s := range rep.Stages {
				if s.Status != want[s.Name] {
					t.Errorf("stage %s is %s, want %s (%v)", s.Name, s.Status, want[s.Name], s.Reasons)
				}
			}
			if !strings.Contains(rep.Verdict, tt.message) {
				t.Errorf("verdict %q does not name %q", rep.Verdict, tt.message)
			}
			if rep.CDI == nil || !rep.CDI.Changed || rep.CDI.Written {
				t.Errorf("the spec should have been planned (changed) and not written: %+v", rep.CDI)
			}
		})
	}
}

// TestUpUsageErrorWritesNothing: an inventory that is a usage error (an
// unknown simulated server) writes nothing, not even the status file or
// its directory.
func TestUpUsageErrorWritesNothing(t *testing.T) {
	t.Parallel()
	host := upHost(t, "nixos-h200")
	before := testkit.Snapshot(t, host.Dir())
	rep, err := Up(context.Background(), host, upOptions(simulated("dgx-h999"), nil))
	if !errors.Is(err, fault.ErrUsage) || rep != nil {
		t.Fatalf("Up = %v, %v; want a usage error and no report", rep, err)
	}
	if diff := testkit.Changes(before, testkit.Snapshot(t, host.Dir())); len(diff) > 0 {
		t.Errorf("a usage error changed the host: %v", diff)
	}
}

// breakingNotifier replaces the status file with a directory when the
// self-test starts: after the spec was written, before the status file is.
type breakingNotifier struct {
	host   *hostfs.Root
	states []string
}

func (n *breakingNotifier) Notify(s string) error {
	n.states = append(n.states, s)
	if strings.Contains(s, "self-test") {
		p, _ := n.host.Path("/run/nodeprep/status.json")
		return os.MkdirAll(p, 0o755)
	}
	return nil
}

// TestUpVerdictIsTheVerdictReached: when the status file cannot be written
// after the spec and the drop-in were (a full disk), the report says not
// ready, the error is ErrCantWrite, and READY=1 is not sent.
func TestUpVerdictIsTheVerdictReached(t *testing.T) {
	t.Parallel()
	host := upHost(t, "nixos-h200")
	n := &breakingNotifier{host: host}
	opts := upOptions(simulated("dgx-h200"), n)
	// A probe that fails at once, joined tainted: the run reaches "ready,
	// tainted" and writes the spec and the drop-in without a driver.
	opts.Selftest = []selftest.Option{selftest.WithCommand("/bin/false")}
	opts.OnSelftestFailure = nodepolicy.PolicyTaint
	rep, err := Up(context.Background(), host, opts)
	if !errors.Is(err, fault.ErrCantWrite) {
		t.Fatalf("err = %v, want ErrCantWrite", err)
	}
	if rep.Ready || !strings.HasPrefix(rep.Verdict, "not ready: ") || !strings.Contains(rep.Verdict, "status.json") {
		t.Errorf("ready=%v verdict %q: want not ready naming the status file", rep.Ready, rep.Verdict)
	}
	if !errors.Is(rep.Err(), fault.ErrCantWrite) {
		t.Errorf("Err() = %v", rep.Err())
	}
	if strings.Contains(strings.Join(n.states, "\n"), "READY=1") {
		t.Errorf("READY=1 sent: %q", n.states)
	}
	if len(rep.FilesChanged) != 2 {
		t.Errorf("files changed %v: want the spec and the drop-in (the fault must come after them)", rep.FilesChanged)
	}
}

// TestUpCancelsEarlyProbes: up starts the self-test's probe children as
// soon as the inventory is in, while the other stages plan. When the plan
// then fails (any stage's bad input) or the preflight does, the probes are
// cancelled and waited for: up returns without waiting for their timeout,
// nothing of theirs survives it (a daemon a driver forked included), the
// self-test is reported skipped, and nothing but up's own report is
// written (nothing at all for a preflight failure). The probes are the
// real child (nodeprep __probe) loading fake drivers that hang or fork a
// daemon.
func TestUpCancelsEarlyProbes(t *testing.T) {
	t.Parallel()
	bin := testkit.Binary(t)
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	icd, egl := fakeICD.Manifest, fakeEGL.Manifest
	tests := []struct {
		name     string
		scenario string
		files    map[string]string // host path → content ("FIFO" makes a FIFO)
		taints   []string
		metrics  string // the metrics file ("" = upOptions')
		kind     error  // the verdict's (plan) or the returned error's (preflight)
		flight   bool   // the preflight fails: no report, nothing written
	}{
		{name: "malformed k3s YAML", files: map[string]string{"/etc/rancher/k3s/config.yaml": "node-label: [site=a\n"}, kind: fault.ErrMalformed},
		{name: "misspelt key", files: map[string]string{"/etc/rancher/k3s/config.yaml": "node-labels: [site=a]\n"}, kind: fault.ErrMalformed},
		{name: "FIFO drop-in", files: map[string]string{"/etc/rancher/k3s/config.yaml.d/10-site.yaml": "FIFO"}, kind: fault.ErrMalformed},
		{name: "duplicate taint keys", taints: []string{"dedicated=a:NoSchedule", "dedicated=b:NoSchedule"}, kind: fault.ErrMalformed},
		{name: "unpatchable spec", scenario: "plugin-kind-store", kind: fault.ErrCheckFailed},
		{name: "device names missing", scenario: "broken-index-names", kind: fault.ErrCheckFailed},
		{name: "malformed spec", scenario: "broken-malformed-spec", kind: fault.ErrMalformed},
		{name: "preflight: metrics directory missing", metrics: "/var/lib/node_exporter/textfile/nodeprep.prom", kind: fault.ErrCantWrite, flight: true},
	}
	for _, tt := range tests {
		for _, fake := range []string{"hang", "daemon"} {
			t.Run(tt.name+"/"+fake, func(t *testing.T) {
				t.Parallel()
				mark := make([]byte, 8)
				_, _ = rand.Read(mark)
				marker := "NODEPREP_TEST_MARK=" + hex.EncodeToString(mark)
				scenario := tt.scenario
				if scenario == "" {
					scenario = "nixos-h200"
				}
				host := upHost(t, scenario)
				for p, content := range tt.files {
					local, _ := host.Path(p)
					if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
						t.Fatal(err)
					}
					write := func() error { return os.WriteFile(local, []byte(content), 0o644) }
					if content == "FIFO" {
						write = func() error { return syscall.Mkfifo(local, 0o644) }
					}
					if err := write(); err != nil {
						t.Fatal(err)
					}
				}
				before := testkit.Snapshot(t, host.Dir())
				opts := upOptions(simulated("dgx-h200"), nil)
				if tt.metrics != "" {
					opts.MetricsFile = tt.metrics
				}
				for _, s := range tt.taints {
					taint, err := k3s.ParseTaint(s)
					if err != nil {
						t.Fatal(err)
					}
					opts.Join.Taints = append(opts.Join.Taints, taint)
				}
				opts.Selftest = []selftest.Option{
					selftest.WithCommand(bin, "__probe", "--report-pipe"),
					selftest.WithEnv(append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl, "FAKE_FAULT="+fake, marker)),
					selftest.WithTimeout(10 * time.Minute),
					selftest.WithAllowCPUAdapter(true),
				}
				type result struct {
					rep *Report
					err error
				}
				done := make(chan result, 1)
				go func() {
					rep, err := Up(context.Background(), host, opts)
					done <- result{rep, err}
				}()
				var res result
				select {
				case res = <-done:
				case <-time.After(2 * time.Minute):
					t.Fatal("up waited for the hung probes after its plan failed") // a hang guard, not a timing target
				}
				if left := testkit.ProcessesWith(marker); len(left) > 0 {
					t.Errorf("probe processes %v outlived up", left)
				}
				// The status file's directory is made by the preflight (the
				// CLI's lock makes it before).
				var changed []string
				for _, c := range testkit.Changes(before, testkit.Snapshot(t, host.Dir())) {
					if c != "created /run/nodeprep" {
						changed = append(changed, c)
					}
				}
				if tt.flight {
					if res.rep != nil || !errors.Is(res.err, tt.kind) {
						t.Fatalf("Up = %v, %v; want no report and %v", res.rep, res.err, tt.kind)
					}
					if len(changed) > 0 {
						t.Errorf("a failed preflight changed the host: %v", changed)
					}
					return
				}
				if res.err != nil {
					t.Fatal(res.err)
				}
				if res.rep.Ready || !errors.Is(res.rep.Err(), tt.kind) {
					t.Fatalf("ready=%v err=%v, want the plan's %v", res.rep.Ready, res.rep.Err(), tt.kind)
				}
				for _, s := range res.rep.Stages {
					if s.Name == StageSelftest && s.Status != StatusSkipped {
						t.Errorf("self-test stage %s, want skipped: %v", s.Status, s.Reasons)
					}
				}
				if res.rep.Selftest != nil {
					t.Errorf("a cancelled self-test was reported: %+v", res.rep.Selftest)
				}
				for _, c := range changed {
					if c != "created "+opts.StatusFile && c != "created "+opts.MetricsFile {
						t.Errorf("a failed plan changed %s (want only up's own report)", c)
					}
				}
			})
		}
	}
}

// cancellingNotifier cancels the run's context when up sends the state
// that contains at: SIGTERM at a known point of the pipeline.
type cancellingNotifier struct {
	at     string
	cancel context.CancelFunc
}

func (n *cancellingNotifier) Notify(s string) error {
	if strings.Contains(s, n.at) {
		n.cancel()
	}
	return nil
}

// TestUpCancelledSelftestNotTainted: SIGTERM while up waits for the
// probes (the spec written, the drop-in not) ends the run with the
// self-test's "cancelled", under --on-selftest-failure=taint too: a
// self-test cut short says nothing of the GPUs, the report does not say
// the node joins tainted, and no drop-in is written. The probes are the
// real child loading fake drivers that hang.
func TestUpCancelledSelftestNotTainted(t *testing.T) {
	t.Parallel()
	bin := testkit.Binary(t)
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	icd, egl := fakeICD.Manifest, fakeEGL.Manifest
	for _, policy := range []string{nodepolicy.PolicyBlock, nodepolicy.PolicyTaint} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			mark := make([]byte, 8)
			_, _ = rand.Read(mark)
			marker := "NODEPREP_TEST_MARK=" + hex.EncodeToString(mark)
			host := upHost(t, "nixos-h200")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opts := upOptions(simulated("dgx-h200"), &cancellingNotifier{at: "running the adapter self-test", cancel: cancel})
			opts.OnSelftestFailure = policy
			opts.Selftest = []selftest.Option{
				selftest.WithCommand(bin, "__probe", "--report-pipe"),
				selftest.WithEnv(append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl, "FAKE_FAULT=hang", marker)),
				selftest.WithTimeout(10 * time.Minute),
				selftest.WithAllowCPUAdapter(true),
			}
			done := make(chan *Report, 1)
			go func() {
				rep, err := Up(ctx, host, opts)
				if err != nil {
					t.Error(err)
				}
				done <- rep
			}()
			var rep *Report
			select {
			case rep = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("up waited for the hung probes after SIGTERM") // a hang guard
			}
			if rep == nil {
				return
			}
			if rep.Ready || rep.Tainted {
				t.Errorf("ready=%v tainted=%v, want neither", rep.Ready, rep.Tainted)
			}
			if !strings.Contains(rep.Verdict, "selftest: cancelled") {
				t.Errorf("verdict %q, want the self-test's cancelled", rep.Verdict)
			}
			for _, s := range rep.Stages {
				if s.Name == StageSelftest && s.Status != StatusFailed {
					t.Errorf("self-test stage %s, want failed: %v", s.Status, s.Reasons)
				}
			}
			if host.Exists("/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml") {
				t.Error("a drop-in was written after SIGTERM")
			}
			if left := testkit.ProcessesWith(marker); len(left) > 0 {
				t.Errorf("probe processes %v outlived up", left)
			}
		})
	}
}

// TestUpHint: UpOptions.Hint's advice follows a failed stage's error in
// its reason and in the verdict (the command layer names the flag that
// helps); a stage that succeeds, or an error it gives no advice for, is
// left as it was.
func TestUpHint(t *testing.T) {
	t.Parallel()
	root, err := hostfs.New(t.TempDir()) // no spec: the cdi stage fails
	if err != nil {
		t.Fatal(err)
	}
	opts := upOptions(simulated("dgx-h200"), nil)
	var asked []string
	opts.Hint = func(err error) string {
		asked = append(asked, err.Error())
		if errors.Is(err, fs.ErrNotExist) {
			return "try --root"
		}
		return ""
	}
	rep, err := Up(context.Background(), root, opts)
	if err != nil {
		t.Fatal(err)
	}
	cdiStage := rep.Stages[1]
	if cdiStage.Name != StageCDI || cdiStage.Status != StatusFailed || len(cdiStage.Reasons) == 0 || !strings.HasSuffix(cdiStage.Reasons[0], "no such file or directory (the generator has not run yet: nvidia-container-toolkit-cdi-generator.service on NixOS, nvidia-ctk cdi generate elsewhere) (try --root)") {
		t.Errorf("cdi stage %+v: want its reason to end with the hint", cdiStage)
	}
	if !strings.HasSuffix(rep.Verdict, "(try --root)") || len(asked) != 1 {
		t.Errorf("verdict %q, Hint asked %d times (%q): want the hint once, in the verdict", rep.Verdict, len(asked), asked)
	}
}
