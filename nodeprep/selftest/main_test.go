package selftest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/child"
	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// childEnv marks a re-executed test binary as a probe child: TestMain then
// serves the requests (its arguments) instead of running tests, so the
// tests drive the real child process without building nodeprep.
const childEnv = "NODEPREP_SELFTEST_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		serve := ServeProbeOnPipe
		if len(os.Args) == 2 && cudaprobe.IsRequest(os.Args[1]) {
			serve = func(reqs []string, f *os.File) error { return cudaprobe.ServeOnPipe(reqs[0], f) }
		}
		if err := serve(os.Args[1:], child.ChildReport()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Real components on this kind of host: Mesa's lavapipe and Mesa EGL,
// from VK_DRIVER_FILES / __EGL_VENDOR_LIBRARY_FILENAMES or this
// architecture's Debian paths (fakedriver.Mesa).
var lavapipeICD, mesaEGL, _ = fakedriver.Mesa(os.Getenv)

// driverEnv is the test process's environment without any driver
// override, plus the child marker and the given "KEY=value" entries: the
// tests set what they need and never depend on the caller's environment.
func driverEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "__EGL_VENDOR_LIBRARY_FILENAMES", "__EGL_VENDOR_LIBRARY_DIRS", childEnv:
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, childEnv+"=1"), extra...)
}

// requireMesa skips a test when lavapipe or Mesa EGL is not installed
// (`make deps` / .ci/run install them), and fails it when the environment
// named them (`make unit`, a Nix sandbox) and one is missing.
func requireMesa(t *testing.T) {
	t.Helper()
	testkit.Mesa(t)
}
