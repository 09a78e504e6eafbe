package container

import (
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// probeArg makes the test binary a probe child, as `nodeprep __probe` is:
// the tests bind-mount their own binary into the container, so they drive
// the real probe without building nodeprep. The container's environment is
// the spec's, so the marker is an argument, not a variable.
const probeArg = "__ctrtest_probe"

// hangArg makes the probe hang (a driver that never returns); crashArg
// makes it crash with SIGSEGV, as a faulting driver does.
const (
	hangArg  = "__ctrtest_hang"
	crashArg = "__ctrtest_crash"
)

// saysArg makes the probe print driverSays on stderr first, as the NVIDIA
// driver does when it cannot open a companion library, then probe.
const saysArg = "__ctrtest_says"

const driverSays = "NVIDIA: unable to open libnvidia-glvkspirv.so.550.54.15"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 {
		switch os.Args[1] {
		case hangArg:
			time.Sleep(10 * time.Minute)
			os.Exit(0)
		case crashArg:
			var p *int
			*p = 1
		}
	}
	if len(os.Args) == 3 && os.Args[1] == saysArg {
		fmt.Fprintln(os.Stderr, driverSays)
		os.Args[1] = probeArg
	}
	if len(os.Args) == 3 && os.Args[1] == probeArg {
		serve := selftest.ServeProbe
		if cudaprobe.IsRequest(os.Args[2]) {
			serve = func(req string, w io.Writer) error { return cudaprobe.Serve(req, w, selftest.ReportPrefix) }
		}
		if err := serve(os.Args[2], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
