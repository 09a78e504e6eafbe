package gpu

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/child"
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
