package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/child/serve"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
)

// containerFlags are the in-container self-test's flags (`selftest
// --container`); the config file's selftest.container, ociRuntime and
// rootfs are their defaults.
type containerFlags struct {
	enabled bool
	runtime string
	rootfs  string
	perGPU  bool
	spec    string
}

// add registers the flags; withSpec adds --spec too, for commands that do
// not have it already (`up` has the cdi commands' --spec).
func (c *containerFlags) add(f *pflag.FlagSet, withSpec bool) {
	f.BoolVar(&c.enabled, "container", false, "also run the probe inside an OCI container started with the CDI spec's devices (needs --rootfs)")
	f.StringVar(&c.runtime, "oci-runtime", "", "OCI runtime for --container: a path or a name in PATH (default: runc, else crun, else "+container.K3sRunc+")")
	f.StringVar(&c.rootfs, "rootfs", "", "root file system of the --container image, a directory on this machine (a relative one from the working directory): a Vulkan loader and libglvnd, no driver (scripts/make-test-rootfs.sh)")
	f.BoolVar(&c.perGPU, "per-gpu", false, "with --container, one container per GPU with only its device (default: one with every GPU's)")
	if withSpec {
		f.StringVar(&c.spec, "spec", cdi.DefaultSpecPath, "host path of the CDI spec whose directory --container loads devices from")
	}
}

// options resolves the flags over the config file. It returns ok false
// when the in-container self-test is not wanted. spec is the spec's host
// path when the command has its own --spec ("" reads this struct's flag).
// The self-test's timeout, EGL and CPU-adapter settings are the host
// self-test's, resolved the same way.
func (c *containerFlags) options(g *globals, f *pflag.FlagSet, st *selftestFlags, simulated bool, spec string) (container.Options, bool, error) {
	cfg := g.cfg.Selftest
	if !flagOr(f, "container", c.enabled, cfg.Container) {
		return container.Options{}, false, nil
	}
	rootfs := flagOr(f, "rootfs", c.rootfs, cfg.Rootfs)
	if rootfs == "" {
		return container.Options{}, false, fault.Usage(errors.New("--container needs --rootfs (or selftest.rootfs in the config file): the image the probe runs in"))
	}
	if f.Changed("rootfs") && !filepath.IsAbs(rootfs) {
		// A directory on this machine, typed in a shell: relative to the
		// working directory, as cp and ls take it (an OCI runtime would
		// take a relative root.path from the bundle's directory).
		abs, err := filepath.Abs(rootfs)
		if err != nil {
			return container.Options{}, false, fault.Usage(fmt.Errorf("--rootfs %q: %w", rootfs, err))
		}
		rootfs = abs
	}
	if spec == "" {
		spec = flagOr(f, "spec", c.spec, g.cfg.CDI.Spec)
	}
	exe, lean, err := childExecutable()
	if err != nil {
		return container.Options{}, false, fault.Unavailable(fmt.Errorf("finding nodeprep's own executable for the probe container: %w", err))
	}
	g.log.Debug("in-container probe", "executable", exe, "lean", lean)
	requireEGL := true
	if cfg.RequireEGL != nil {
		requireEGL = *cfg.RequireEGL
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = selftest.DefaultTimeout
	}
	// On a real node the probe goes the way a GPU pod goes: through the
	// nvidia-cdi handler with the device plugin's envvar request.
	handler := ""
	if !simulated {
		handler = podHandler(g)
	}
	return container.Options{
		Handler:         handler,
		Binary:          exe,
		ProbeArgs:       []string{serve.Probe},
		Rootfs:          rootfs,
		Runtime:         flagOr(f, "oci-runtime", c.runtime, cfg.OCIRuntime),
		Spec:            spec,
		SpecDirs:        g.cfg.CDI.SpecDirs,
		PerGPU:          c.perGPU,
		Timeout:         flagOr(f, "timeout", st.timeout, timeout),
		EGLOptional:     !flagOr(f, "require-egl", st.requireEGL, requireEGL),
		AllowCPUAdapter: simulated && flagOr(f, "allow-cpu-adapter", st.allowCPUAdapter, cfg.AllowCPUAdapter),
		// The container's libcuda is the spec's, found by its soname
		// (the spec's linker cache), whatever path the host's is at.
		CUDALibrary: selftest.DefaultCUDALibrary,
		RequireCUDA: st.cudaRequirement(g, f),
		Log:         g.log,
	}, true, nil
}

// selftestReport is `selftest --container`'s report: the host self-test's
// fields, plus the in-container self-test as its own section.
type selftestReport struct {
	*selftest.Report `yaml:",inline"`
	Container        *container.Report `json:"container,omitempty" yaml:"container,omitempty"`
}

// runContainerSelftest runs the in-container self-test after the host's
// (rep) and prints both, the in-container one as the `container` section.
func runContainerSelftest(ctx context.Context, g *globals, inv *gpu.Inventory, rep *selftest.Report, opts container.Options) error {
	crep, err := container.Run(ctx, g.host, inv, opts)
	if err != nil {
		return err
	}
	both := selftestReport{Report: rep, Container: crep}
	err = g.print(both, func(w io.Writer) error {
		if err := writeSelftestText(w, rep); err != nil {
			return err
		}
		return writeContainerText(w, crep, g.verbose)
	})
	if err != nil {
		return fault.CantWrite(fmt.Errorf("writing the self-test report: %w", err))
	}
	printed := g.output == "text"
	return errors.Join(selftestExit(rep, printed), containerExit(crep, printed))
}

// containerExit maps the in-container report to the command's error like
// selftestExit: nil when it passed, else its Err (fault.ErrUnavailable for
// a missing runtime, rootfs or image library, fault.ErrCheckFailed
// otherwise), silent when the text report already shows the reasons.
func containerExit(rep *container.Report, printed bool) error {
	err := rep.Err()
	if err != nil && printed {
		return silent(err)
	}
	return err
}

// writeContainerText prints the in-container section after the host's: the
// runtime, each container's devices and probes, and the verdict. What was
// adapted for a host tree is one note line per container (noteSummary);
// verbose lists each adaptation.
func writeContainerText(w io.Writer, r *container.Report, verbose bool) error {
	ew := &selftestWriter{w: w}
	runtime := selftestOr(r.Runtime, "none")
	if r.RuntimeVersion != "" {
		runtime += " (" + r.RuntimeVersion + ")"
	}
	ew.printf("\nIn-container self-test (runtime %s, rootfs %s, spec %s)\n", runtime, r.Rootfs, r.Spec)
	for i, c := range r.Containers {
		ew.printf("Container %d: %s (%.0f ms)\n", i, strings.Join(c.Devices, ", "), c.DurationMS)
		if verbose {
			for _, n := range c.Notes {
				ew.printf("  note: %s\n", n)
			}
		} else if len(c.Notes) > 0 {
			ew.printf("  note: %s\n", noteSummary(c.Notes))
		}
		if c.Selftest != nil && ew.err == nil {
			ew.err = writeSelftestText(&indent{w: w}, c.Selftest)
		}
	}
	verdict := "passed"
	if !r.Passed {
		verdict = "FAILED"
	}
	ew.printf("in-container self-test %s (%.0f ms)\n", verdict, r.DurationMS)
	for _, x := range r.Reasons {
		ew.printf("  ✗ %s: %s\n", x.Kind, x.Message)
	}
	return ew.err
}

// indent writes every line with two leading spaces.
type indent struct {
	w   io.Writer
	mid bool // the last write ended inside a line
}

// Write implements io.Writer.
func (i *indent) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, c := range string(p) {
		if !i.mid {
			b.WriteString("  ")
		}
		b.WriteRune(c)
		i.mid = c != '\n'
	}
	if _, err := io.WriteString(i.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// noteSummary says in one line what a container's notes (the container self-test's
// adaptations for a host tree) come to: "24 device nodes not created, 2
// hooks not run, 1 other (a host tree; -v lists them)".
func noteSummary(notes []string) string {
	var nodes, hooks, other int
	for _, n := range notes {
		switch {
		case strings.HasPrefix(n, "device node "):
			nodes++
		case strings.HasPrefix(n, "hook "):
			hooks++
		default:
			other++
		}
	}
	var parts []string
	for _, p := range []struct {
		n           int
		one, plural string
	}{{nodes, "device node not created", "device nodes not created"}, {hooks, "hook not run", "hooks not run"}, {other, "other adaptation", "other adaptations"}} {
		switch {
		case p.n == 1:
			parts = append(parts, "1 "+p.one)
		case p.n > 1:
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.plural))
		}
	}
	return strings.Join(parts, ", ") + " (a host tree; -v lists them)"
}
