package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTmpdirCheck: scripts/tmpdir-check.sh, which `make unit` runs the Go
// tests through, fails a run that leaves anything in its private TMPDIR
// and names what was left, passes a clean run, keeps a failing command's
// exit status, and removes its private directory in every case.
func TestTmpdirCheck(t *testing.T) {
	t.Parallel()
	script := filepath.Join("..", "..", "scripts", "tmpdir-check.sh")
	for _, tc := range []struct {
		name, cmd string
		code      int
		says      string
	}{
		{"clean", `d=$(mktemp -d); touch "$d/x"; rm -r "$d"`, 0, ""},
		{"leaves a directory", `d=$(mktemp -d "$TMPDIR/nodeprep-test-XXX"); head -c 5000 /dev/zero > "$d/nodeprep"`, 1, "nodeprep-test-"},
		{"leaves a file", `touch "$TMPDIR/leak"`, 1, "leak"},
		{"fails and leaves", `touch "$TMPDIR/leak"; exit 3`, 3, "leak"},
		{"fails clean", `exit 4`, 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			outer := t.TempDir()
			cmd := exec.Command("bash", script, "sh", "-c", tc.cmd)
			cmd.Env = append(os.Environ(), "TMPDIR="+outer)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, out)
			}
			if tc.says == "" && len(out) != 0 || tc.says != "" && (!strings.Contains(string(out), "tmpdir-check: the run left") || !strings.Contains(string(out), tc.says)) {
				t.Errorf("output %q, want it to name %q", out, tc.says)
			}
			if left, _ := os.ReadDir(outer); len(left) != 0 {
				t.Errorf("the private TMPDIR was not removed: %v", left)
			}
		})
	}
}
