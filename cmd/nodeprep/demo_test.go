package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testkit"
)

// TestDemoCleansUp runs scripts/demo.sh (what `make demo` runs) with the
// test's binary: it removes its temporary root on exit and says so, and
// keeps it with DEMO_KEEP=1.
func TestDemoCleansUp(t *testing.T) {
	icd, egl := lavapipe(t)
	for _, keep := range []bool{false, true} {
		tmp := t.TempDir()
		cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "demo.sh"))
		cmd.Env = append(os.Environ(), "NODEPREP="+testkit.Binary(t), "TMPDIR="+tmp, "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
		if keep {
			cmd.Env = append(cmd.Env, "DEMO_KEEP=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("demo (keep=%v): %v\n%s", keep, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		last := lines[len(lines)-1]
		left, _ := filepath.Glob(filepath.Join(tmp, "nodeprep-demo.*"))
		switch {
		case !keep && (len(left) != 0 || !strings.HasPrefix(last, "removed the host root ") || !strings.Contains(last, "DEMO_KEEP=1")):
			t.Errorf("demo left %v; last line %q", left, last)
		case keep && (len(left) != 1 || !strings.HasPrefix(last, "kept the host root "+left[0])):
			t.Errorf("DEMO_KEEP=1: left %v; last line %q", left, last)
		}
	}
}
