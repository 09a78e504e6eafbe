package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// statusReport is a report as up writes it: ready, or not ready with two
// failed stages.
func statusReport(ready bool) *nodeprep.Report {
	r := &nodeprep.Report{
		Version: "1.2.3", Ready: true, Verdict: "ready",
		StartedAt: time.Date(2026, time.November, 1, 10, 12, 3, 0, time.UTC), DurationMS: 56.4,
		ExpectedGPUs: []string{"GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9"},
		Stages: []nodeprep.StageResult{
			{Name: nodeprep.StageInventory, Status: nodeprep.StatusOK, Summary: "1 GPU"},
			{Name: nodeprep.StageCDI, Status: nodeprep.StatusOK, Summary: "patched"},
			{Name: nodeprep.StageSelftest, Status: nodeprep.StatusOK, Summary: "1/1 GPUs matched"},
			{Name: nodeprep.StageJoin, Status: nodeprep.StatusOK, Summary: "1 taint"},
		},
		FilesChanged: []string{}, StatusFile: "/run/nodeprep/status.json",
	}
	if !ready {
		r.Ready = false
		r.Verdict = "not ready: cdi: missing-device: nvidia.com/gpu=GPU-228c is not in the spec"
		r.Stages[1] = nodeprep.StageResult{Name: nodeprep.StageCDI, Status: nodeprep.StatusFailed, Summary: "not patched",
			Reasons: []string{"missing-device: nvidia.com/gpu=GPU-228c is not in the spec", "second reason"}}
		r.Stages[2] = nodeprep.StageResult{Name: nodeprep.StageSelftest, Status: nodeprep.StatusFailed, Reasons: []string{"missing-adapter: no Vulkan adapter"}}
		r.Stages[3] = nodeprep.StageResult{Name: nodeprep.StageJoin, Status: nodeprep.StatusSkipped}
	}
	return r
}

// writeStatus writes data as the status file rel under root.
func writeStatus(t *testing.T, root, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func reportJSON(t *testing.T, r *nodeprep.Report) []byte {
	t.Helper()
	data, err := json.MarshalIndent(r, "", "  ") // as up writes it
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

// treeState is every path under root with its size and modification
// time: what a read-only command must leave as it was.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[p] = fmt.Sprint(fi.Mode(), fi.ModTime(), fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStatus: `nodeprep status` prints the status file's verdict (text:
// the verdict line, when and by what it was written, each failed stage's
// first reason; -o json|yaml: the whole report) and exits 0 ready, 1 not
// ready, 65 for a file that is not a report, 69 for none (no up has written
// one: it has not run, or it refused before writing) or a dangling link.
// It reads the file the config's up.statusFile or --status-file names,
// writes nothing and takes no lock.
func TestStatus(t *testing.T) {
	t.Parallel()
	const def = "run/nodeprep/status.json"
	tests := []struct {
		name    string
		files   map[string][]byte // under the root
		links   map[string]string // symlinks under the root: path → target
		args    []string
		code    int
		stdout  string // the whole stdout, unless json
		json    bool   // stdout is the file's report, byte for byte
		stderr  string // substring
		noLines []string
	}{
		{name: "ready", files: map[string][]byte{def: reportJSON(t, statusReport(true))}, code: ExitOK,
			stdout: "ready\nwritten 2026-11-01T10:12:03Z (", stderr: ""},
		{name: "not ready", files: map[string][]byte{def: reportJSON(t, statusReport(false))}, code: ExitCheckFailed,
			stdout: "not ready: cdi failed\nwritten 2026-11-01T10:12:03Z ("},
		{name: "json", files: map[string][]byte{def: reportJSON(t, statusReport(true))}, args: []string{"-o", "json"}, code: ExitOK, json: true},
		{name: "json, not ready", files: map[string][]byte{def: reportJSON(t, statusReport(false))}, args: []string{"-o", "json"}, code: ExitCheckFailed, json: true,
			stderr: "not ready: cdi: missing-device"},
		{name: "yaml", files: map[string][]byte{def: reportJSON(t, statusReport(true))}, args: []string{"-o", "yaml"}, code: ExitOK,
			stdout: "version: 1.2.3\n"},
		// An up that refused before its checks wrote nothing either: the
		// message does not say up has not run, and says where to look.
		{name: "no status file", code: ExitUnavailable, stderr: "/run/nodeprep/status.json does not exist: no nodeprep up has written a status since boot: " +
			"nodeprep up has not run, or it refused before writing anything (bad flags or config, an output it cannot write, a missing --rootfs, a held lock); " +
			"to see why, run nodeprep up, or systemctl status nodeprep and journalctl -u nodeprep\n"},
		{name: "no status file outside /run", args: []string{"--status-file", "/var/lib/np/status.json"}, code: ExitUnavailable,
			stderr: "/var/lib/np/status.json does not exist: no nodeprep up has written a status: nodeprep up has not run, or it refused"},
		{name: "dangling symlink", links: map[string]string{def: "/var/lib/np/gone.json"}, code: ExitUnavailable,
			stderr:  "/run/nodeprep/status.json is a dangling symlink (to /var/lib/np/gone.json, which does not exist): nodeprep up writes no status through a symlink (it exits 73): remove the link, then run nodeprep up\n",
			noLines: []string{"no nodeprep up has written"}},
		{name: "torn", files: map[string][]byte{def: []byte(`{"version": "1.2.3", "rea`)}, code: ExitMalformed, stderr: "reading status"},
		{name: "not JSON", files: map[string][]byte{def: []byte("garbage\n")}, code: ExitMalformed,
			stderr: `reading status "/run/nodeprep/status.json": invalid character 'g' looking for beginning of value: it is not a report nodeprep wrote, and only nodeprep reads it: run nodeprep up to write a new one`},
		{name: "empty", files: map[string][]byte{def: {}}, code: ExitMalformed,
			stderr: "unexpected end of JSON input: it is not a report nodeprep wrote, and only nodeprep reads it: run nodeprep up to write a new one"},
		{name: "not a report", files: map[string][]byte{def: []byte("{}\n")}, code: ExitMalformed, stderr: "it has no verdict: it is not a report nodeprep wrote"},
		{name: "a field of the wrong type", files: map[string][]byte{def: []byte(`{"verdict": "ready", "ready": "yes"}`)}, code: ExitMalformed, stderr: "reading status"},
		{name: "a directory", files: map[string][]byte{def + "/x": {}}, code: ExitMalformed,
			stderr: "is a directory: not a regular file: nodeprep up cannot replace it either (it exits 73): remove it, then run nodeprep up"},
		{name: "config up.statusFile", files: map[string][]byte{
			"etc/nodeprep/config.yaml": []byte("up:\n  statusFile: /var/lib/np/status.json\n"),
			"var/lib/np/status.json":   reportJSON(t, statusReport(false)),
			def:                        reportJSON(t, statusReport(true)),
		}, code: ExitCheckFailed, stdout: "not ready: cdi failed\n"},
		{name: "--status-file over the config", files: map[string][]byte{
			"etc/nodeprep/config.yaml": []byte("up:\n  statusFile: /var/lib/np/status.json\n"),
			"srv/status.json":          reportJSON(t, statusReport(true)),
		}, args: []string{"--status-file", "/srv/status.json"}, code: ExitOK, stdout: "ready\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for rel, data := range tt.files {
				writeStatus(t, root, rel, data)
			}
			for rel, target := range tt.links {
				p := filepath.Join(root, rel)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, p); err != nil {
					t.Fatal(err)
				}
			}
			before := treeState(t, root)
			stdout, stderr, code := runCLI(t, append([]string{"--root", root, "status"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			switch {
			case tt.json:
				if want := string(tt.files[def]); stdout != want {
					t.Errorf("stdout is not the status file's report:\n%s\nwant\n%s", stdout, want)
				}
			case !strings.HasPrefix(stdout, tt.stdout):
				t.Errorf("stdout\n%s\nwant it to start\n%s", stdout, tt.stdout)
			}
			if tt.stderr == "" && code == ExitCheckFailed && !tt.json && stderr != "" {
				t.Errorf("text output of a not-ready verdict: stderr %q, want none (the verdict is on stdout)", stderr)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr %q lacks %q", stderr, tt.stderr)
			}
			for _, l := range tt.noLines {
				if strings.Contains(stderr, l) {
					t.Errorf("stderr %q has %q", stderr, l)
				}
			}
			if after := treeState(t, root); len(after) != len(before) {
				t.Errorf("status changed the tree: %d paths before, %d after", len(before), len(after))
			} else {
				for p, s := range before {
					if after[p] != s {
						t.Errorf("status changed %s", p)
					}
				}
			}
		})
	}
}

// TestStatusText pins the text form: the verdict line (a failed stage
// named, as up's last line names it), the time and age, the command and
// version, each failed stage's first reason with how many more it has,
// and the line that a refused later run is not in it; a verdict that is
// not a stage's reason is printed as it is.
func TestStatusText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, time.November, 1, 10, 16, 15, 0, time.UTC)
	health := statusReport(false)
	health.Command = "health"
	health.Verdict = "not ready: inventory: the last nodeprep up left the node not ready (not ready: join: x)"
	repatch := statusReport(false)
	repatch.Command = nodeprep.CommandRepatch
	repatch.Verdict = "not ready: the last nodeprep up left the node not ready (not ready: join: x)"
	repatch.Stages = repatch.Stages[:1]
	health.Stages = []nodeprep.StageResult{{Name: nodeprep.StageInventory, Status: nodeprep.StatusFailed, Reasons: []string{"the last nodeprep up left the node not ready (not ready: join: x)"}}}
	threeReasons := statusReport(false)
	threeReasons.Stages[1].Reasons = append(threeReasons.Stages[1].Reasons, "third reason")
	// A report is the last one written: an up that refused before its
	// checks wrote none, so every text output says so.
	const refused = "a later run that refused before its checks is not shown (journalctl -u nodeprep)\n"
	tests := []struct {
		name string
		r    *nodeprep.Report
		want string
	}{
		{"ready", statusReport(true), "ready\nwritten 2026-11-01T10:12:03Z (4m12s ago) by nodeprep up, version 1.2.3\n" + refused},
		{"not ready", statusReport(false), "not ready: cdi failed\nwritten 2026-11-01T10:12:03Z (4m12s ago) by nodeprep up, version 1.2.3\n" +
			"✗ cdi       missing-device: nvidia.com/gpu=GPU-228c is not in the spec (and 1 more: nodeprep status -o json lists them)\n" +
			"✗ selftest  missing-adapter: no Vulkan adapter\n" + refused},
		{"health", health, "not ready: inventory failed\nwritten 2026-11-01T10:12:03Z (4m12s ago) by nodeprep health, version 1.2.3\n" +
			"✗ inventory the last nodeprep up left the node not ready (not ready: join: x)\n" + refused},
		{"re-patch", repatch, "not ready: the last nodeprep up left the node not ready (not ready: join: x)\n" +
			"written 2026-11-01T10:12:03Z (4m12s ago) by nodeprep cdi patch, version 1.2.3\n" + refused},
		{"three reasons", threeReasons, "not ready: cdi failed\nwritten 2026-11-01T10:12:03Z (4m12s ago) by nodeprep up, version 1.2.3\n" +
			"✗ cdi       missing-device: nvidia.com/gpu=GPU-228c is not in the spec (and 2 more: nodeprep status -o json lists them)\n" +
			"✗ selftest  missing-adapter: no Vulkan adapter\n" + refused},
	}
	for _, tt := range tests {
		var b strings.Builder
		if err := writeStatusText(&b, tt.r, now); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, b.String(), tt.want)
		}
	}
}

// TestStatusWhileLocked: status takes no lock, so it answers while up or
// health holds it.
func TestStatusWhileLocked(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeStatus(t, root, "run/nodeprep/status.json", reportJSON(t, statusReport(true)))
	h, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := h.Lock(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock() //nolint:errcheck
	if stdout, stderr, code := runCLI(t, "--root", root, "status"); code != ExitOK || !strings.HasPrefix(stdout, "ready\n") {
		t.Errorf("status while the lock is held: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestStatusAfterRefusedUp: an up that refuses before its checks changes
// no file, so status still prints the verdict written before it; its text
// says that a refused later run is not shown.
func TestStatusAfterRefusedUp(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	old := reportJSON(t, statusReport(true))
	writeStatus(t, root, "run/nodeprep/status.json", old)
	if _, stderr, code := runCLI(t, "--root", root, "up", "--simulate", "dgx-h200", "--label", "site=a", "--label", "site=b"); code != ExitMalformed {
		t.Fatalf("up with a label twice: exit %d, want %d\n%s", code, ExitMalformed, stderr)
	}
	if data, err := os.ReadFile(filepath.Join(root, "run/nodeprep/status.json")); err != nil || string(data) != string(old) {
		t.Fatalf("the refused up changed the status file (err %v)", err)
	}
	stdout, stderr, code := runCLI(t, "--root", root, "status")
	if code != ExitOK || !strings.HasPrefix(stdout, "ready\n") || !strings.HasSuffix(stdout, "\n"+refusedNote+"\n") {
		t.Errorf("status after a refused up: exit %d, stdout %q, stderr %q; want the old ready and %q", code, stdout, stderr, refusedNote)
	}
}
