package nodeprep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// fullFS mounts a 64 KiB tmpfs at dir (made if missing) and returns a
// function that fills it, so that the next write of any data fails with
// ENOSPC (an empty file still fits: its inode is free). It needs root (a
// real file system, not a fake); elsewhere the test is skipped with the
// reason.
func fullFS(t *testing.T, dir string) (fill func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0755"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return func() {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, ".filler"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
}

// readStatus reads and decodes the status file.
func readStatus(t *testing.T, host *hostfs.Root, p string) Report {
	t.Helper()
	data, err := host.ReadFile(p, bounded.MaxStatus)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// upOnFullFS is a host whose directory dir (relative to the host root) is
// on a full file system (fullFS), and up's options for it: a self-test
// that fails under policy taint, which reaches "ready, tainted" without a
// driver.
func upOnFullFS(t *testing.T, dir string) (*hostfs.Root, UpOptions) {
	t.Helper()
	host := upHost(t, "nixos-h200")
	fullFS(t, filepath.Join(host.Dir(), dir))()
	opts := upOptions(simulated("dgx-h200"), nil)
	opts.Selftest = []selftest.Option{selftest.WithCommand("/bin/false")}
	opts.OnSelftestFailure = nodepolicy.PolicyTaint
	return host, opts
}

// TestUpMetricsOnFullFS: a metrics file that cannot be written (its file
// system full: ENOSPC after the preflight's empty probe file fitted) makes
// the run not ready, and status.json, written before it, says so too
// (issue 22: it said "ready": true while up printed not ready and exited
// 73).
func TestUpMetricsOnFullFS(t *testing.T) {
	t.Parallel()
	host, opts := upOnFullFS(t, "var/lib/node_exporter")
	opts.MetricsFile = "/var/lib/node_exporter/nodeprep.prom"
	rep, err := Up(context.Background(), host, opts)
	if !errors.Is(err, fault.ErrCantWrite) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ErrCantWrite with ENOSPC", err)
	}
	if rep.Ready || !strings.Contains(rep.Verdict, "nodeprep.prom") {
		t.Errorf("ready=%v verdict %q: want not ready naming the metrics file", rep.Ready, rep.Verdict)
	}
	st := readStatus(t, host, opts.StatusFile)
	if st.Ready || st.Verdict != rep.Verdict {
		t.Errorf("status.json: ready=%v verdict %q; the run said %q", st.Ready, st.Verdict, rep.Verdict)
	}
}

// TestUpStatusOnFullFS: a status file that cannot be written (full file
// system) leaves the old one, and the metrics file, written after it, says
// not ready.
func TestUpStatusOnFullFS(t *testing.T) {
	t.Parallel()
	host, opts := upOnFullFS(t, "run/nodeprep")
	opts.MetricsFile = "/var/nodeprep.prom"
	rep, err := Up(context.Background(), host, opts)
	if rep == nil || !errors.Is(err, syscall.ENOSPC) || rep.Ready {
		t.Fatalf("err = %v (report %v), want ENOSPC and not ready", err, rep)
	}
	prom, err := host.ReadFile(opts.MetricsFile, bounded.MaxStatus)
	if err != nil || !strings.Contains(string(prom), "\nnodeprep_ready 0\n") {
		t.Errorf("metrics: %v\n%s", err, prom)
	}
}

// TestHealthOnFullFS: health whose status write fails (full file system)
// is not ready (issue 22: it printed ready, with JSON ready: true, and
// exited 73); the old status file stays as it was.
func TestHealthOnFullFS(t *testing.T) {
	t.Parallel()
	icd, egl := testkit.Mesa(t)
	bin := testkit.Binary(t)
	host := upHost(t, "nixos-h200")
	fill := fullFS(t, filepath.Join(host.Dir(), "run/nodeprep"))
	probe := []selftest.Option{
		selftest.WithCommand(bin, "__probe", "--report-pipe"),
		selftest.WithEnv(append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)),
		selftest.WithAllowCPUAdapter(true),
	}
	opts := upOptions(simulated("dgx-h200"), nil)
	opts.Selftest = probe
	opts.MetricsFile = ""
	if rep, err := Up(context.Background(), host, opts); err != nil || !rep.Ready {
		t.Fatalf("up: %v %v", err, rep.Verdict)
	}
	before, _ := host.ReadFile(opts.StatusFile, bounded.MaxStatus)
	fill()
	rep, err := Health(context.Background(), host, HealthOptions{Inventory: simulated("dgx-h200"), Selftest: probe, StatusFile: opts.StatusFile})
	if !errors.Is(err, fault.ErrCantWrite) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ErrCantWrite with ENOSPC", err)
	}
	if rep.Ready || !strings.HasPrefix(rep.Verdict, "not ready: ") || !strings.Contains(rep.Verdict, "status.json") {
		t.Errorf("ready=%v verdict %q: want not ready naming the status file", rep.Ready, rep.Verdict)
	}
	if after, _ := host.ReadFile(opts.StatusFile, bounded.MaxStatus); string(after) != string(before) {
		t.Error("the old status file changed")
	}
}

// TestOutputsAtOnePath: two outputs at one file, or an output path that
// names a directory, is a usage error before anything runs or is written
// (issue 22: status.json ended up holding Prometheus text; a status file
// of "/run/nodeprep/" wrote /run/nodeprep/nodeprep). A directory gets the
// output's own default name as the suggestion.
func TestOutputsAtOnePath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, status, metrics, want string
	}{
		{"same file", "/run/nodeprep/status.json", "/run/nodeprep/status.json", "status file and metrics file are both /run/nodeprep/status.json"},
		{"same file, unclean", "/run/nodeprep/status.json", "/run/nodeprep//./status.json", "are both /run/nodeprep/status.json"},
		{"status names a directory", "/run/nodeprep/", "", `status file "/run/nodeprep/" names a directory: want a file path, such as /run/nodeprep/status.json`},
		{"metrics names a directory", "/run/nodeprep/status.json", "/var/lib/node_exporter/.", `metrics file "/var/lib/node_exporter/." names a directory: want a file path, such as /var/lib/node_exporter/nodeprep.prom`},
		// The suggestion is the metrics file's own name: status.json there
		// would be the status file.
		{"metrics names the status file's directory", "/run/nodeprep/status.json", "/run/nodeprep/", `metrics file "/run/nodeprep/" names a directory: want a file path, such as /run/nodeprep/nodeprep.prom`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := upHost(t, "nixos-h200")
			before := testkit.Snapshot(t, host.Dir())
			opts := upOptions(simulated("dgx-h200"), nil)
			opts.StatusFile, opts.MetricsFile = tt.status, tt.metrics
			opts.Selftest = []selftest.Option{selftest.WithCommand("/bin/false")}
			_, err := Up(context.Background(), host, opts)
			if !errors.Is(err, fault.ErrUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("up: %v, want a usage error with %q", err, tt.want)
			}
			_, err = Health(context.Background(), host, HealthOptions{Inventory: simulated("dgx-h200"), StatusFile: tt.status, MetricsFile: tt.metrics})
			if !errors.Is(err, fault.ErrUsage) {
				t.Errorf("health: %v, want a usage error", err)
			}
			if ch := testkit.Changes(before, testkit.Snapshot(t, host.Dir())); len(ch) > 0 {
				t.Errorf("changed on disk: %v", ch)
			}
		})
	}
}

// TestCheckOutputsSuggestion: an output path that names a directory is
// answered with that directory and the output's own default name, and
// following the suggestion for every output gives paths CheckOutputs
// accepts together (the metrics file was once told status.json, which is
// the status file's).
func TestCheckOutputsSuggestion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		out  Output
		want string // the suggested path; "" for none
	}{
		{Output{"status file", "/run/nodeprep/", StatusFileName}, "/run/nodeprep/status.json"},
		{Output{"metrics file", "/run/nodeprep/", MetricsFileName}, "/run/nodeprep/nodeprep.prom"},
		{Output{"metrics file", "/var/lib/node_exporter/textfile/..", MetricsFileName}, "/var/lib/node_exporter/nodeprep.prom"},
		{Output{"k3s drop-in", "/etc/rancher/k3s/config.yaml.d/", "50-nodeprep.yaml"}, "/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml"},
		{Output{"other", "/srv/", ""}, ""},
	}
	var followed []Output
	for _, tt := range tests {
		err := CheckOutputs(tt.out)
		if !errors.Is(err, fault.ErrUsage) {
			t.Fatalf("%s %q: %v, want a usage error", tt.out.What, tt.out.Path, err)
		}
		msg := fmt.Sprintf("%s %q names a directory: want a file path", tt.out.What, tt.out.Path)
		if tt.want != "" {
			msg += ", such as " + tt.want
			followed = append(followed, Output{tt.out.What, tt.want, tt.out.Name})
		}
		if err.Error() != msg {
			t.Errorf("%v\nwant %s", err, msg)
		}
	}
	if err := CheckOutputs(followed[:2]...); err != nil {
		t.Errorf("the suggestions for the status and metrics files in one directory: %v", err)
	}
}
