package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestSIGTERMEndsHungNVML: an NVML whose nvmlInit_v2 never returns (a
// fake built from C) no longer holds nodeprep: `inspect` is bounded by
// --nvml-timeout, and SIGTERM ends it at once, saying it was cancelled.
// (How fast is measured by scripts/faults.sh, not asserted here.)
func TestSIGTERMEndsHungNVML(t *testing.T) {
	t.Parallel()
	lib, _, err := fakedriver.Build(t.TempDir(), fakedriver.NVML)
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "FAKE_FAULT=hang", "FAKE_NVML_AT=init")
	inspect := func(signal bool, args ...string) (int, string) {
		cmd := exec.Command(testkit.Binary(t), append([]string{"--root", t.TempDir(), "inspect", "--nvml-lib", lib}, args...)...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if signal {
			time.Sleep(300 * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("inspect with a hung NVML: %v, want an exit status", err)
		}
		return ee.ExitCode(), stderr.String()
	}
	code, stderr := inspect(false, "--nvml-timeout", "500ms")
	if code != 69 || !strings.Contains(stderr, "NVML did not answer in time") || !strings.Contains(stderr, "did not finish within 500ms") {
		t.Errorf("timeout: exit %d, stderr %q; want 69 and the hung-NVML reason", code, stderr)
	}
	code, stderr = inspect(true, "--nvml-timeout", "1m")
	if code != 69 || !strings.Contains(stderr, "cancelled") {
		t.Errorf("SIGTERM: exit %d, stderr %q; want 69 and cancelled", code, stderr)
	}
}
