package gpu

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/child"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// childEnv marks a re-executed test binary as the NVML child: TestMain then
// serves the request (its last argument) instead of running tests.
const childEnv = "NODEPREP_GPU_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := ServeInventory(os.Args[len(os.Args)-1], child.ChildReport()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeNVML builds the fake libnvidia-ml.so.1 of kind (fakedriver.NVML,
// fakedriver.NVMLDGXH200) in a temporary directory and returns its path.
func fakeNVML(tb testing.TB, kind string) string {
	tb.Helper()
	lib, _, err := fakedriver.Build(tb.TempDir(), kind)
	if err != nil {
		tb.Fatal(err)
	}
	return lib
}

// testChild is the NVML child as this test binary re-executed with childEnv
// set, and env (FAKE_FAULT=…) added to its environment.
func testChild(tb testing.TB, env ...string) Child {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return Child{Path: exe, Env: append(append(os.Environ(), childEnv+"=1"), env...)}
}
