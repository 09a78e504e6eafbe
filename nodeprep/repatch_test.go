package nodeprep

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specwatch"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

const pluginSpecPath = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"

// bootStatus writes the status report of an `up` that found the
// simulated DGX H200 and reached ready (or not): what a re-patch after
// boot judges against.
func bootStatus(t testing.TB, host *hostfs.Root, ready bool) {
	t.Helper()
	inv, err := simulated("dgx-h200")()
	if err != nil {
		t.Fatal(err)
	}
	r := Report{Version: "test", Ready: ready, Verdict: "ready", Inventory: inv, StatusFile: "/run/nodeprep/status.json",
		Stages: []StageResult{{Name: StageInventory, Status: StatusOK}, {Name: StageCDI, Status: StatusOK}, {Name: StageSelftest, Status: StatusOK}, {Name: StageJoin, Status: StatusOK}}}
	if !ready {
		r.Verdict = "not ready: selftest: no adapter"
		r.Stages[2].Status = StatusFailed
	}
	for _, g := range inv.GPUs {
		r.ExpectedGPUs = append(r.ExpectedGPUs, g.UUID)
	}
	data, _ := json.Marshal(r)
	if err := host.WriteFile(r.StatusFile, data, hostfs.WriteOptions{MkdirAll: true}); err != nil {
		t.Fatal(err)
	}
}

func repatchOptions() RepatchOptions {
	return RepatchOptions{
		CDI:         cdi.FileOptions{Spec: cdi.DefaultSpecPath, Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"}},
		DeviceNames: []string{nodepolicy.DeviceNameUUID},
		StatusFile:  "/run/nodeprep/status.json",
		MetricsFile: "/run/nodeprep/nodeprep.prom",
		Version:     "test",
	}
}

// writePluginSpec writes the device plugin's spec as it does after boot:
// no graphics mounts, renamed into place.
func writePluginSpec(t testing.TB, host *hostfs.Root) {
	t.Helper()
	data, err := os.ReadFile(testkit.Testdata(t, "hosts", "plugin-kind", "run/cdi/k8s.device-plugin.nvidia.com-gpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := host.Path(pluginSpecPath)
	tmp := filepath.Join(filepath.Dir(dst), ".plugin.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// TestRepatch: a re-patch after boot patches what the device plugin wrote,
// keeps a ready node ready and says so in the status file, writes nothing
// when nothing changed, turns the node not ready naming a spec it cannot
// patch, ready again when that spec goes, and never makes a node ready
// that `up` did not.
func TestRepatch(t *testing.T) {
	host := testkit.HostTree(t, "nixos-h200")
	bootStatus(t, host, true)
	ctx := context.Background()
	status := func() Report { return readStatus(t, host, "/run/nodeprep/status.json") }

	// up patched the generator's spec; the plugin writes its own.
	if _, err := Repatch(ctx, host, repatchOptions()); err != nil {
		t.Fatal(err)
	}
	writePluginSpec(t, host)
	res, err := Repatch(ctx, host, repatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Wrote) != 1 || res.Wrote[0] != pluginSpecPath || !res.StatusWritten || !res.Report.Ready {
		t.Fatalf("after the plugin wrote its spec: wrote %v, status written %v, ready %v", res.Wrote, res.StatusWritten, res.Report != nil && res.Report.Ready)
	}
	if s := status(); s.Command != CommandRepatch || !s.Ready || s.BootReady == nil || !*s.BootReady {
		t.Errorf("status = command %q ready %v", s.Command, s.Ready)
	}

	// Nothing to do: nothing written, not even the status.
	st0, _ := host.Stat("/run/nodeprep/status.json")
	res, err = Repatch(ctx, host, repatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := host.Stat("/run/nodeprep/status.json")
	if res.Changed() || !os.SameFile(st0, st1) {
		t.Errorf("a pass with nothing to do wrote %v (status rewritten: %v)", res.Wrote, !os.SameFile(st0, st1))
	}

	// The plugin's spec comes from the read-only store now.
	p, _ := host.Path(pluginSpecPath)
	os.Remove(p)
	storeDir := "nix/store/6e7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c-nvidia-device-plugin-cdi"
	src := testkit.Testdata(t, "hosts", "plugin-kind-store", storeDir, "k8s.device-plugin.nvidia.com-gpu.json")
	data, _ := os.ReadFile(src)
	os.MkdirAll(filepath.Join(host.Dir(), storeDir), 0o755)
	os.WriteFile(filepath.Join(host.Dir(), storeDir, "k8s.device-plugin.nvidia.com-gpu.json"), data, 0o444)
	os.MkdirAll(filepath.Join(host.Dir(), "etc/cdi"), 0o755)
	link := filepath.Join(host.Dir(), "etc/cdi/k8s.device-plugin.nvidia.com-gpu.json")
	if err := os.Symlink("../../"+storeDir+"/k8s.device-plugin.nvidia.com-gpu.json", link); err != nil {
		t.Fatal(err)
	}
	res, err = Repatch(ctx, host, repatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Ready || !strings.Contains(res.Report.Verdict, "/etc/cdi/k8s.device-plugin.nvidia.com-gpu.json") || res.Report.Err() == nil {
		t.Errorf("with an unpatchable plugin spec: ready %v, verdict %q", res.Report.Ready, res.Report.Verdict)
	}
	prom, _ := host.ReadFile("/run/nodeprep/nodeprep.prom", bounded.MaxStatus)
	if !strings.Contains(string(prom), "nodeprep_ready 0") {
		t.Errorf("metrics:\n%s", prom)
	}

	// The link goes: ready again.
	os.Remove(link)
	res, err = Repatch(ctx, host, repatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Ready || !res.StatusWritten {
		t.Errorf("after the link went: ready %v (verdict %q)", res.Report.Ready, res.Report.Verdict)
	}

	// A node up did not make ready stays not ready, whatever the specs.
	bootStatus(t, host, false)
	res, err = Repatch(ctx, host, repatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Ready || !strings.Contains(res.Report.Verdict, "the last nodeprep up left the node not ready") {
		t.Errorf("boot not ready: ready %v, verdict %q", res.Report.Ready, res.Report.Verdict)
	}
}

// TestRepatchSpecGone: the spec up patched is removed after boot: the
// re-patch turns the status and the metric not ready at once, naming the
// spec and why (what health says of it), says it only once, and the node
// is ready again when the generator writes the spec back.
func TestRepatchSpecGone(t *testing.T) {
	host := testkit.HostTree(t, "nixos-h200")
	bootStatus(t, host, true)
	ctx := context.Background()
	if _, err := Repatch(ctx, host, repatchOptions()); err != nil {
		t.Fatal(err)
	}
	spec, _ := host.Path(cdi.DefaultSpecPath)
	saved, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(spec)
	res, err := Repatch(ctx, host, repatchOptions())
	if !errors.Is(err, fs.ErrNotExist) || res == nil || !res.StatusWritten {
		t.Fatalf("with the spec gone: err %v, result %+v", err, res)
	}
	s := readStatus(t, host, "/run/nodeprep/status.json")
	if s.Ready || !strings.Contains(s.Verdict, cdi.DefaultSpecPath) || !strings.Contains(s.Verdict, "no such file") {
		t.Errorf("status with the spec gone: ready %v, verdict %q", s.Ready, s.Verdict)
	}
	prom, _ := host.ReadFile("/run/nodeprep/nodeprep.prom", bounded.MaxStatus)
	if !strings.Contains(string(prom), "nodeprep_ready 0") || !strings.Contains(string(prom), `nodeprep_stage_ok{stage="cdi"} 0`) {
		t.Errorf("metrics with the spec gone:\n%s", prom)
	}
	if res, _ := Repatch(ctx, host, repatchOptions()); res == nil || res.StatusWritten {
		t.Errorf("a second pass with the spec still gone rewrote the status: %+v", res)
	}
	if err := os.WriteFile(spec, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := Repatch(ctx, host, repatchOptions()); err != nil || !res.Report.Ready || !res.StatusWritten {
		t.Errorf("with the spec back: err %v, ready %v", err, res != nil && res.Report != nil && res.Report.Ready)
	}
}

// TestRepatchWithoutStatus: before any `up` (no status file) a re-patch
// patches and writes no status.
func TestRepatchWithoutStatus(t *testing.T) {
	host := testkit.HostTree(t, "plugin-kind")
	res, err := Repatch(context.Background(), host, repatchOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Wrote) != 2 || res.Report != nil || res.StatusWritten || host.Exists("/run/nodeprep/status.json") {
		t.Errorf("wrote %v, report %v, status written %v", res.Wrote, res.Report != nil, res.StatusWritten)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRepatchAfterRename measures the re-patch after boot as `cdi
// watch` runs it: per iteration the device plugin renames its unpatched
// spec into /var/run/cdi, and the iteration ends when the pass that
// patched it returns (spec written, status and metrics rewritten). It
// reports the window a pod could get the unpatched spec in (ms/rename:
// writer's rename → patched spec on disk, the settle time included) and
// the CPU the process spent per event (cpu-ms/event: the pass, and the
// skipped event of its own write).
//
// The containerd sub-benchmark adds what `cdi watch` and the path unit
// judge with the specs on a k3s node (RepatchOptions.Runtime): k3s's
// containerd config, its runtime handlers and the NVIDIA runtime's config
// (the k3s-containerd-ok tree laid over nixos-h200).
func BenchmarkRepatchAfterRename(b *testing.B) {
	b.Run("specs", func(b *testing.B) { benchRepatchAfterRename(b, false) })
	b.Run("specs+containerd", func(b *testing.B) { benchRepatchAfterRename(b, true) })
}

func benchRepatchAfterRename(b *testing.B, withRuntime bool) {
	host := testkit.HostTree(b, "nixos-h200")
	bootStatus(b, host, true)
	opts := repatchOptions()
	if withRuntime {
		if out, err := exec.Command("cp", "-a", testkit.Testdata(b, "hosts", "k3s-containerd-ok")+"/.", host.Dir()).CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		copts := podpath.ContainerdOptions("/var/lib/rancher/k3s", nil, opts.CDI.Spec, opts.CDI.Discover.DriverRoot)
		opts.Runtime = func() cdi.Findings {
			fs, err := podpath.RuntimeFindings(host, copts)
			if err != nil {
				b.Error(err)
			}
			return fs
		}
	}
	if _, err := Repatch(context.Background(), host, opts); err != nil {
		b.Fatal(err)
	}
	type passEnd struct {
		at    time.Time
		wrote int
	}
	ends := make(chan passEnd, 16)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- specwatch.Run(ctx, host, []string{"/etc/cdi", "/var/run/cdi"}, func(ctx context.Context, _ specwatch.Trigger) ([]specwatch.Written, error) {
			unlock, err := host.Lock(ctx, time.Minute)
			if err != nil {
				return nil, err
			}
			defer unlock()
			res, err := Repatch(ctx, host, opts)
			if err != nil {
				return nil, err
			}
			ends <- passEnd{time.Now(), len(res.Wrote)}
			var w []specwatch.Written
			for i, p := range res.Wrote {
				w = append(w, specwatch.Written{Path: p, Info: res.Files[i]})
			}
			return w, nil
		}, specwatch.Options{Ready: func() { close(ready) }})
	}()
	<-ready
	<-ends // the initial pass
	var window time.Duration
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		writePluginSpec(b, host)
		for e := range ends {
			if e.wrote > 0 {
				window += e.at.Sub(t0)
				break
			}
		}
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(window.Microseconds())/1000/float64(b.N), "ms/rename")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/event")
}

// TestUpSaysMIGWithoutDevices: a GPU in MIG mode with no MIG device is
// healthy to NVML, and `up` says so (its inventory stage warns, in the
// summary and a reason), as inspect and cdi check do.
func TestUpSaysMIGWithoutDevices(t *testing.T) {
	inv, err := simulated("dgx-h200")()
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs[1].MIG = &gpu.MIG{Current: true}
	e := &env{opts: UpOptions{Inventory: func() (*gpu.Inventory, error) { return inv, nil }}, report: &Report{}}
	st := StageResult{Status: StatusOK}
	if err := e.inventory(&st); err != nil {
		t.Fatal(err)
	}
	if st.Status != StatusWarning || !strings.Contains(st.Summary, "1 GPU in MIG mode without a MIG device") ||
		len(st.Reasons) != 1 || !strings.Contains(st.Reasons[0], "GPU 1 ("+inv.GPUs[1].UUID+") has MIG mode on but no MIG device") {
		t.Errorf("inventory stage = %+v", st)
	}
}

// TestFoldRuntime: the runtime's findings judged in the cdi stage as up
// judges them in its join stage: an error fails the stage, its reason
// first; a warning makes an ok stage a warning; a config k3s has not
// rendered yet is no finding.
func TestFoldRuntime(t *testing.T) {
	errF := cdi.Finding{Severity: cdi.SeverityError, Code: "containerd-cdi-disabled", Message: "off"}
	warnF := cdi.Finding{Severity: cdi.SeverityWarning, Code: "pod-path-bypass", Message: "nvidia"}
	notWritten := cdi.Finding{Severity: cdi.SeverityWarning, Code: containerd.CodeNotWritten, Message: "not yet"}
	tests := []struct {
		name        string
		start       StageResult
		specErrs    int
		fs          cdi.Findings
		wantStatus  string
		wantFirst   string
		wantReasons []string
	}{
		{"nothing", StageResult{Status: StatusOK}, 0, nil, StatusOK, "", nil},
		{"not written", StageResult{Status: StatusOK}, 0, cdi.Findings{notWritten}, StatusOK, "", nil},
		{"warning", StageResult{Status: StatusOK}, 0, cdi.Findings{warnF}, StatusWarning, "", []string{"pod-path-bypass: nvidia"}},
		{"error before the stage's warnings", StageResult{Status: StatusWarning, Reasons: []string{"missing-all-device: x"}}, 0, cdi.Findings{warnF, errF},
			StatusFailed, "containerd-cdi-disabled: off", []string{"containerd-cdi-disabled: off", "missing-all-device: x", "pod-path-bypass: nvidia"}},
		// up stops on the specs' errors before it judges the runtime: they
		// come first, so every command names the same first reason.
		{"after the specs' errors", StageResult{Status: StatusFailed, Reasons: []string{"unpatchable-spec: s", "missing-all-device: x"}}, 1, cdi.Findings{errF},
			StatusFailed, "containerd-cdi-disabled: off", []string{"unpatchable-spec: s", "containerd-cdi-disabled: off", "missing-all-device: x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.start
			first := foldRuntime(&st, tt.specErrs, tt.fs, slog.New(slog.DiscardHandler))
			if st.Status != tt.wantStatus || first != tt.wantFirst || !slices.Equal(st.Reasons, tt.wantReasons) {
				t.Errorf("got %s %q %q, want %s %q %q", st.Status, first, st.Reasons, tt.wantStatus, tt.wantFirst, tt.wantReasons)
			}
		})
	}
}

// TestRepatchViewMalformed: after boot, a spec directory holds what the
// view cannot be loaded with (a FIFO named *.json): the re-patch turns
// the status and the metric not ready at once, naming it, as health
// would at its next run (before, status.json said ready until then), and
// the node is ready again once it is gone.
func TestRepatchViewMalformed(t *testing.T) {
	host := testkit.HostTree(t, "nixos-h200")
	bootStatus(t, host, true)
	ctx := context.Background()
	if _, err := Repatch(ctx, host, repatchOptions()); err != nil {
		t.Fatal(err)
	}
	dir, _ := host.Path("/etc/cdi")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "evil.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Repatch(ctx, host, repatchOptions())
	if !errors.Is(err, fault.ErrMalformed) || res == nil || !res.StatusWritten {
		t.Fatalf("with a FIFO in /etc/cdi: err %v, result %+v", err, res)
	}
	s := readStatus(t, host, "/run/nodeprep/status.json")
	if s.Ready || !strings.Contains(s.Verdict, "evil.json") {
		t.Errorf("status with a FIFO in /etc/cdi: ready %v, verdict %q", s.Ready, s.Verdict)
	}
	prom, _ := host.ReadFile("/run/nodeprep/nodeprep.prom", bounded.MaxStatus)
	if !strings.Contains(string(prom), "nodeprep_ready 0") {
		t.Errorf("metrics with a FIFO in /etc/cdi:\n%s", prom)
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if res, err := Repatch(ctx, host, repatchOptions()); err != nil || !res.Report.Ready || !res.StatusWritten {
		t.Errorf("with the FIFO gone: err %v, ready %v", err, res != nil && res.Report != nil && res.Report.Ready)
	}
}
