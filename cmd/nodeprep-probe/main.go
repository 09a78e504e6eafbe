// Command nodeprep-probe is nodeprep's lean child: it serves the
// driver-calling children (`__probe`, `__inventory`) exactly as nodeprep's
// hidden commands do (nodeprep/child/serve), but links only what they need,
// none of the command layer (cobra, the config, YAML, TOML, the CDI
// library, the Kubernetes types), so each child skips the package
// initialisation and page faults of the whole nodeprep binary. nodeprep
// runs it when it sits beside nodeprep's own executable, else re-executes
// itself. It is not meant to be run by hand.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/nodeprep/nodeprep/nodeprep/child/serve"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run serves the child command line args and returns the exit code.
func run(args []string) int {
	a, err := serve.Parse(args)
	if err == nil {
		err = serve.Serve(a, os.Stdout)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "nodeprep-probe: error: %v\n", err)
	return exitCode(err)
}

// exitCode is nodeprep's mapping (cmd/nodeprep/app.ExitCode,
// docs/exit-codes.md) for the only kinds a child returns: a usage error (a bad
// command line or request) is 2; a report that could not be written, or
// the crash report that could not be installed, is 1. The protocol test
// (cmd/nodeprep-probe) checks both entry points exit alike.
func exitCode(err error) int {
	if errors.Is(err, fault.ErrUsage) {
		return 2
	}
	return 1
}
