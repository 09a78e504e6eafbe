package app

import (
	"os"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/child/serve"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestMain lets this test binary stand in for nodeprep as its own child:
// the commands re-execute os.Executable() with a hidden child command
// (__inventory, __probe), which here is the test binary. testkit.Main
// removes the nodeprep that testkit.Binary builds once the tests end.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == serve.Inventory || os.Args[1] == serve.Probe) {
		os.Exit(Main())
	}
	os.Exit(testkit.Main(m))
}
