package nodeprep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// sizedReport is a ready up report whose status file encoding
// (encodeStatus) is exactly size bytes, padded in FilesChanged.
func sizedReport(t *testing.T, size int) *Report {
	t.Helper()
	ready := true
	r := &Report{
		Version: "test", Ready: true, Verdict: "ready", ExpectedGPUs: []string{"GPU-1", "GPU-2"}, BootReady: &ready,
		Stages:       []StageResult{{Name: StageInventory, Status: StatusOK}, {Name: StageCDI, Status: StatusWarning, Reasons: []string{"invalid-spec: junk"}}},
		FilesChanged: []string{""},
		StatusFile:   "/run/nodeprep/status.json",
	}
	data, err := encodeStatus(r)
	if err != nil {
		t.Fatal(err)
	}
	r.FilesChanged[0] = strings.Repeat("x", size-len(data))
	return r
}

// TestStatusAtTheReadersLimit: the writer's cap is the readers' limit. A
// report that encodes to exactly bounded.MaxStatus bytes is written as it
// is and ReadStatus reads it back; one byte more and the status file is
// written trimmed (Trimmed says so), within the limit, with the verdict
// and what health reads back (Ready, the boot verdict, ExpectedGPUs)
// intact. Before, the writer wrote any size and health, reading at most
// bounded.MaxStatus, exited 65 on a node the status file called ready.
func TestStatusAtTheReadersLimit(t *testing.T) {
	t.Parallel()
	host, err := hostfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const status = "/run/nodeprep/status.json"
	files := statusFiles{host: host, status: status, now: time.Now}

	at := sizedReport(t, bounded.MaxStatus)
	if err := files.write(at); err != nil || !at.Ready {
		t.Fatalf("write at the limit: %v (ready %v)", err, at.Ready)
	}
	if fi, err := host.Stat(status); err != nil || fi.Size() != bounded.MaxStatus {
		t.Fatalf("status file: %v, %d bytes, want exactly %d", err, fi.Size(), bounded.MaxStatus)
	}
	back, err := ReadStatus(host, status)
	if err != nil {
		t.Fatalf("ReadStatus of a status at the writer's cap: %v", err)
	}
	if back.Trimmed != "" || back.FilesChanged[0] != at.FilesChanged[0] || !back.Ready {
		t.Errorf("a status at the limit came back trimmed or changed: trimmed %q, ready %v", back.Trimmed, back.Ready)
	}

	over := sizedReport(t, bounded.MaxStatus+1)
	over.Stages[1].Reasons = append(over.Stages[1].Reasons, strings.Split(strings.Repeat("r\n", 50), "\n")...)
	over.Stages[1].Summary = strings.Repeat("é", trimText) // cut at a character boundary
	if err := files.write(over); err != nil || !over.Ready {
		t.Fatalf("write over the limit: %v (ready %v)", err, over.Ready)
	}
	fi, err := host.Stat(status)
	if err != nil || fi.Size() > bounded.MaxStatus {
		t.Fatalf("status file: %v, %d bytes: want it within %d", err, fi.Size(), bounded.MaxStatus)
	}
	back, err = ReadStatus(host, status)
	if err != nil {
		t.Fatalf("ReadStatus of a trimmed status: %v", err)
	}
	if !back.Ready || back.Verdict != "ready" || back.BootReady == nil || !*back.BootReady || len(back.ExpectedGPUs) != 2 {
		t.Errorf("trimmed status lost what health reads: %+v", back)
	}
	if !strings.Contains(back.Trimmed, fmt.Sprintf("bytes, over the %d the status file's readers read: left out the cdi, selftest, container and join results, 32 stage reasons", bounded.MaxStatus)) {
		t.Errorf("Trimmed = %q, want it to say what was left out", back.Trimmed)
	}
	reasons := back.Stages[1].Reasons
	if len(reasons) != trimReasons+1 || reasons[trimReasons] != "and 32 more reasons, not kept in the status file" {
		t.Errorf("trimmed reasons: %d, last %q", len(reasons), reasons[len(reasons)-1])
	}
	if s := back.Stages[1].Summary; !strings.HasSuffix(s, "…") || len(s) > trimText+len("…") || !json.Valid([]byte(`"`+s+`"`)) {
		t.Errorf("trimmed summary: %d bytes, ends %q", len(s), s[len(s)-4:])
	}
	if over.Trimmed != "" || len(over.FilesChanged[0]) < 1<<20 {
		t.Error("trimming the status file changed the report itself")
	}
}

// TestStatusRefusedOverLimit: a report that is over the limit even
// trimmed is not written: the write fails (fault.ErrCantWrite), the
// run is not ready, the old status file (which said ready) is gone and
// the metrics say not ready, so no reader takes the old verdict.
func TestStatusRefusedOverLimit(t *testing.T) {
	t.Parallel()
	host, err := hostfs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const status, metrics = "/run/nodeprep/status.json", "/run/nodeprep/nodeprep.prom"
	files := statusFiles{host: host, status: status, metrics: metrics, now: time.Now}
	if err := files.write(sizedReport(t, 4000)); err != nil {
		t.Fatal(err)
	}
	files.limit = 300 // less than any report takes trimmed
	r := sizedReport(t, 4000)
	err = files.write(r)
	if !errors.Is(err, fault.ErrCantWrite) || !strings.Contains(err.Error(), "over the 300 its readers read") {
		t.Fatalf("err = %v, want ErrCantWrite saying the limit", err)
	}
	if r.Ready || !strings.HasPrefix(r.Verdict, "not ready: writing status") {
		t.Errorf("ready %v, verdict %q: want not ready", r.Ready, r.Verdict)
	}
	if _, err := ReadStatus(host, status); !errors.Is(err, ErrNoStatus) {
		t.Errorf("ReadStatus: %v, want the old status file removed", err)
	}
	if prom, err := host.ReadFile(metrics, bounded.MaxStatus); err != nil || !strings.Contains(string(prom), "\nnodeprep_ready 0\n") {
		t.Errorf("metrics: %v\n%s", err, prom)
	}
}

// junkSpecs writes n spec files the CDI library refuses into the
// runtime's spec directory of host, with long names, as a broken
// generator loop leaves them.
func junkSpecs(tb testing.TB, host *hostfs.Root, n int) {
	tb.Helper()
	dir, err := host.Path("/var/run/cdi")
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("nvidia-container-toolkit-junk-%06d.json", i)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"cdiVersion":"0.5.0","kind":"junk"}`), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestJunkSpecFloodStatus: up and health on a node whose spec directory
// holds thousands of spec files the CDI library refuses: the status file
// stays small (the view lists the first cdi.MaxPerCode and counts the
// rest), says how many were left out, and health reads it back and
// agrees with up: ready, nodeprep_ready 1. Before, each file added about
// 490 bytes, and 36,000 of them made a status file health could not read.
func TestJunkSpecFloodStatus(t *testing.T) {
	t.Parallel()
	const n = 1200
	icd, egl := testkit.Mesa(t)
	bin := testkit.Binary(t)
	host := upHost(t, "nixos-h200")
	junkSpecs(t, host, n)
	probe := []selftest.Option{
		selftest.WithCommand(bin, "__probe", "--report-pipe"),
		selftest.WithEnv(append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)),
		selftest.WithAllowCPUAdapter(true),
	}
	opts := upOptions(simulated("dgx-h200"), nil)
	opts.Selftest = probe
	rep, err := Up(context.Background(), host, opts)
	if err != nil || !rep.Ready {
		t.Fatalf("up: %v, %q", err, rep.Verdict)
	}
	hopts := HealthOptions{Inventory: simulated("dgx-h200"), Selftest: probe, StatusFile: opts.StatusFile, MetricsFile: opts.MetricsFile,
		CDI: &opts.CDI, DeviceNames: opts.DeviceNames}
	hrep, err := Health(context.Background(), host, hopts)
	if err != nil || !hrep.Ready {
		t.Fatalf("health: %v, %q", err, hrep.Verdict)
	}
	fi, err := host.Stat(opts.StatusFile)
	if err != nil || fi.Size() > 96<<10 {
		t.Fatalf("status file after %d junk specs: %v, %d bytes, want under 96 KiB", n, err, fi.Size())
	}
	st, err := ReadStatus(host, opts.StatusFile)
	if err != nil || !st.Ready || st.Trimmed != "" || st.CDI == nil {
		t.Fatalf("ReadStatus: %v: want health's ready report with its cdi result, untrimmed: %+v", err, st)
	}
	var omitted int
	for _, f := range st.CDI.Findings {
		if f.Code == cdi.CodeInvalidSpec {
			omitted += f.Omitted
		}
	}
	left := fmt.Sprintf("and %d,%03d more spec files the CDI library refuses", (n-cdi.MaxPerCode)/1000, (n-cdi.MaxPerCode)%1000)
	if omitted != n-cdi.MaxPerCode || !strings.Contains(strings.Join(stageReasons(st, StageCDI), "\n"), left) {
		t.Errorf("status: %d invalid specs counted as left out, reasons %q: want %d, saying %q", omitted, stageReasons(st, StageCDI), n-cdi.MaxPerCode, left)
	}
	if prom, err := host.ReadFile(opts.MetricsFile, bounded.MaxStatus); err != nil || !strings.Contains(string(prom), "\nnodeprep_ready 1\n") {
		t.Errorf("metrics: %v\n%s", err, prom)
	}
}
