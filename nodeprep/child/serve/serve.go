// Package serve is the body of nodeprep's driver-calling children, the
// self-test's probe (Probe, "__probe") and the NVML inventory (Inventory,
// "__inventory"), shared by the two entry points that serve them: the
// hidden commands of cmd/nodeprep (cobra parses their flags) and the lean
// cmd/nodeprep-probe (Parse), which links only this package's
// dependencies so that a child skips nodeprep's package initialisation
// (docs/faults.md, "A lean child").
package serve

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/child"
	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// The child commands: the first argument of a child's command line.
const (
	// Probe runs adapter probes (selftest.ServeProbeOnPipe, or
	// selftest.ServeProbe for one request on stdout), or the CUDA probe
	// for a request whose api is cudaprobe.API (one request a child).
	Probe = "__probe"
	// Inventory reads NVML (gpu.ServeInventory), on the report pipe only.
	Inventory = "__inventory"
)

// ReportPipeFlag makes a child report on child.ReportFD (with the crash
// report installed) instead of stdout; the in-container probe, read
// through the OCI runtime, reports on stdout.
const ReportPipeFlag = "report-pipe"

// LeanName is the lean child executable's file name (cmd/nodeprep-probe):
// nodeprep runs it when it sits beside nodeprep's own executable.
const LeanName = "nodeprep-probe"

// Args is a parsed child command line.
type Args struct {
	Command    string   // Probe or Inventory
	ReportPipe bool     // --report-pipe
	Requests   []string // the requests (JSON), in order
}

// Parse parses a child command line (without the program name) as
// cmd/nodeprep's hidden commands do with pflag: the command, then
// --report-pipe[=true|false] anywhere before "--", and the requests.
// Errors are marked fault.ErrUsage.
func Parse(argv []string) (Args, error) {
	if len(argv) == 0 {
		return Args{}, fault.Usage(fmt.Errorf("want a child command (%s or %s)", Probe, Inventory))
	}
	a := Args{Command: argv[0]}
	if a.Command == "-h" || a.Command == "--help" || a.Command == "help" {
		return Args{}, fault.Usage(fmt.Errorf("this is nodeprep's child for driver calls (%s, %s), started by nodeprep itself; it is not for manual use: run nodeprep selftest or nodeprep inspect", Probe, Inventory))
	}
	if a.Command != Probe && a.Command != Inventory {
		return Args{}, fault.Usage(fmt.Errorf("unknown child command %q: want %s or %s", a.Command, Probe, Inventory))
	}
	rest := argv[1:]
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		switch {
		case arg == "--":
			a.Requests = append(a.Requests, rest[i+1:]...)
			return a, nil
		case arg == "--"+ReportPipeFlag:
			a.ReportPipe = true
		case strings.HasPrefix(arg, "--"+ReportPipeFlag+"="):
			switch v := strings.TrimPrefix(arg, "--"+ReportPipeFlag+"="); v {
			case "true", "1", "t", "T", "TRUE", "True":
				a.ReportPipe = true
			case "false", "0", "f", "F", "FALSE", "False":
				a.ReportPipe = false
			default:
				return Args{}, fault.Usage(fmt.Errorf("invalid argument %q for --%s: want true or false", v, ReportPipeFlag))
			}
		case strings.HasPrefix(arg, "-") && arg != "-":
			return Args{}, fault.Usage(fmt.Errorf("unknown flag: %s", arg))
		default:
			a.Requests = append(a.Requests, arg)
		}
	}
	return a, nil
}

// Serve runs the child a describes in this process: the probes of its
// requests, or the NVML inventory. With ReportPipe the reports go to the
// report pipe (child.ChildReport, so call it only in a child started by
// child.Run), else (Probe only, one request) to stdout as one line
// (selftest.ServeProbe). Failures of the driver are in the reports; the
// error is for a bad command line or request (marked fault.ErrUsage) or a
// report that could not be written.
func Serve(a Args, stdout io.Writer) error {
	switch a.Command {
	case Probe:
		if len(a.Requests) == 0 {
			return fault.Usage(errors.New("requires at least 1 request"))
		}
		if cudaprobe.IsRequest(a.Requests[0]) {
			return serveCUDA(a, stdout)
		}
		var err error
		if a.ReportPipe {
			err = selftest.ServeProbeOnPipe(a.Requests, child.ChildReport())
		} else if len(a.Requests) != 1 {
			return fault.Usage(errors.New("one request on stdout; several only with --" + ReportPipeFlag))
		} else {
			err = selftest.ServeProbe(a.Requests[0], stdout)
		}
		if errors.Is(err, selftest.ErrBadRequest) {
			return fault.Usage(err)
		}
		return err
	case Inventory:
		if len(a.Requests) != 1 {
			return fault.Usage(fmt.Errorf("accepts 1 request, received %d", len(a.Requests)))
		}
		if !a.ReportPipe {
			return fault.Usage(errors.New(Inventory + " reports only on the report pipe (--" + ReportPipeFlag + ")"))
		}
		return gpu.ServeInventory(a.Requests[0], child.ChildReport())
	}
	return fault.Usage(fmt.Errorf("unknown child command %q: want %s or %s", a.Command, Probe, Inventory))
}

// serveCUDA serves a CUDA probe request (cudaprobe): alone in its child,
// as selftest runs it (cuInit can take seconds; the Vulkan and EGL probes
// do not wait for it).
func serveCUDA(a Args, stdout io.Writer) error {
	if len(a.Requests) != 1 {
		return fault.Usage(errors.New("a CUDA probe request comes alone"))
	}
	var err error
	if a.ReportPipe {
		err = cudaprobe.ServeOnPipe(a.Requests[0], child.ChildReport())
	} else {
		err = cudaprobe.Serve(a.Requests[0], stdout, selftest.ReportPrefix)
	}
	if errors.Is(err, cudaprobe.ErrBadRequest) {
		return fault.Usage(err)
	}
	return err
}
