package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/child/serve"
	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// selftestFlags are the self-test flags `selftest` and `up` share.
type selftestFlags struct {
	vulkanLoader    string
	eglLib          string
	timeout         time.Duration
	allowCPUAdapter bool
	requireEGL      bool
	cudaLib         string
	requireCUDA     bool
}

type selftestOptions struct {
	selftestFlags
	inv inventoryFlags
	ctr containerFlags
}

func (o *selftestFlags) add(f *pflag.FlagSet) {
	f.StringVar(&o.vulkanLoader, "vulkan-loader", selftest.DefaultVulkanLoader, "Vulkan loader to dlopen (a path, or a name for the dynamic linker's search)")
	f.StringVar(&o.eglLib, "egl-lib", selftest.DefaultEGLLibrary, "EGL library to dlopen (libglvnd's libEGL.so.1)")
	f.DurationVar(&o.timeout, "timeout", selftest.DefaultTimeout, "how long each probe may run before its child is killed")
	f.BoolVar(&o.allowCPUAdapter, "allow-cpu-adapter", false, "let a CPU adapter (lavapipe) and Mesa's EGL device stand in for simulated GPUs (needs --simulate)")
	f.BoolVar(&o.requireEGL, "require-egl", true, "fail when EGL fails (false: report EGL only)")
	f.StringVar(&o.cudaLib, "cuda-lib", selftest.DefaultCUDALibrary, "CUDA driver library to dlopen for the CUDA probe (a path, or a name for the dynamic linker's search)")
	// The default is no value (cudaRequirement: nil, the policy the usage
	// text gives), so the flag's own default is false and pflag prints none.
	f.BoolVar(&o.requireCUDA, "require-cuda", false, "fail when the CUDA probe fails (unset: yes, except that with --simulate a libcuda that cannot be opened is a warning; --require-cuda: that fails too; =false: report CUDA only)")
}

// cudaRequirement is --require-cuda over selftest.requireCUDA: nil when
// neither is set (selftest.WithCUDA's default policy).
func (o *selftestFlags) cudaRequirement(g *globals, f *pflag.FlagSet) *bool {
	if f.Changed("require-cuda") {
		v := o.requireCUDA
		return &v
	}
	return g.cfg.Selftest.RequireCUDA
}

// options resolves the flags over the config file into the self-test's
// options, with childExecutable as the probe child.
func (o *selftestFlags) options(g *globals, f *pflag.FlagSet, simulated bool) ([]selftest.Option, error) {
	cfg := g.cfg.Selftest
	requireEGL := true
	if cfg.RequireEGL != nil {
		requireEGL = *cfg.RequireEGL
	}
	requireEGL = flagOr(f, "require-egl", o.requireEGL, requireEGL)
	allowCPU := flagOr(f, "allow-cpu-adapter", o.allowCPUAdapter, cfg.AllowCPUAdapter)
	cfgTimeout := cfg.Timeout
	if cfgTimeout <= 0 { // zero in the config file means the default
		cfgTimeout = selftest.DefaultTimeout
	}
	timeout := flagOr(f, "timeout", o.timeout, cfgTimeout)
	if timeout <= 0 {
		return nil, fault.Usage(fmt.Errorf("--timeout %s: want a positive duration", timeout))
	}
	if allowCPU && !simulated {
		return nil, fault.Usage(errors.New("--allow-cpu-adapter needs --simulate: a CPU adapter never stands in for a real GPU"))
	}
	exe, lean, err := childExecutable()
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("finding nodeprep's own executable for the probe child: %w", err))
	}
	g.log.Debug("probe child", "executable", exe, "lean", lean)
	return []selftest.Option{
		selftest.WithCommand(exe, serve.Probe, "--"+serve.ReportPipeFlag),
		selftest.WithEnv(os.Environ()),
		selftest.WithVulkanLoader(flagOr(f, "vulkan-loader", o.vulkanLoader, cfg.VulkanLoader)),
		selftest.WithEGLLibrary(flagOr(f, "egl-lib", o.eglLib, cfg.EGLLib)),
		selftest.WithTimeout(timeout),
		selftest.WithRequireEGL(requireEGL),
		selftest.WithAllowCPUAdapter(allowCPU),
		selftest.WithRequirements(cfg.Requirements()),
		selftest.WithCUDA(flagOr(f, "cuda-lib", o.cudaLib, cfg.CUDALib), o.cudaRequirement(g, f)),
		selftest.WithLogger(g.log),
		selftest.WithShaderCache(func(create bool) string { return shaderCacheDir(g, create) }),
	}, nil
}

func newSelftestCommand(g *globals) *cobra.Command {
	var o selftestOptions
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Prove every GPU works as a Vulkan adapter (compute dispatch), an EGL device and a CUDA device",
		Long: `selftest probes the Vulkan adapters and then the EGL devices the way wgpu finds
them, in one child process, runs a compute shader on each adapter and reads
the result back, and matches the adapters to the NVML GPUs by UUID. Each probe
may take --timeout, counted from the probe before it; a probe that does not end
clean there is run again alone in a child of its own, so a self-test whose
drivers hang or fail slowly can take two to three times --timeout.
Each GPU needs exactly one NVIDIA (0x10de) discrete or integrated adapter with
its UUID whose dispatch verifies; CPU adapters such as llvmpipe never count,
except with --simulate and --allow-cpu-adapter, where one stands in.

It also runs the CUDA probe in a child of its own at the same time: it opens
--cuda-lib (libcuda.so.1), calls cuInit, and on every device at once makes a
context, checks a memory round trip and runs a PTX kernel through the
driver's JIT compiler; each GPU needs the CUDA device with its UUID to pass.
Failures are named by their CUDA result with the fix (802: the fabric
manager; 100/999 without /dev/nvidia-uvm: the UVM module and the spec).
With --simulate a libcuda that cannot be opened is a warning unless
--require-cuda; --require-cuda=false makes every CUDA failure a warning.

With --container --rootfs DIR it then runs the same probe inside an OCI
container (runc, else crun) started from DIR with the CDI spec's devices
injected by the CDI library, as containerd does for a pod: proof that the
patched spec gives a container a working adapter. It needs root and runc, and
a rootfs with a Vulkan loader and libglvnd but no driver
(scripts/make-test-rootfs.sh DIR builds one from Debian packages). Without a
GPU, scripts/make-lavapipe-host.sh ROOT UUID... builds a host tree whose
"driver" is Mesa's lavapipe, for --root with --simulate and
--allow-cpu-adapter; it has no EGL vendor library, so add --require-egl=false.
What was adapted to run on a host tree is one note per container; -v lists it.

Exit status: 0 passed, 1 failed, 69 the Vulkan loader (or a required libEGL
or libcuda), or for --container the OCI runtime or rootfs, is unavailable.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSelftest(cmd, g, &o)
		},
	}
	f := cmd.Flags()
	o.inv.add(f)
	o.selftestFlags.add(f)
	o.ctr.add(f, true)
	return cmd
}

func runSelftest(cmd *cobra.Command, g *globals, o *selftestOptions) error {
	f := cmd.Flags()
	opts, err := o.selftestFlags.options(g, f, o.inv.simulate != "")
	if err != nil {
		return err
	}
	ctrOpts, inContainer, err := o.ctr.options(g, f, &o.selftestFlags, o.inv.simulate != "", "")
	if err != nil {
		return err
	}
	if err := o.inv.check(f); err != nil {
		return err
	}
	// The probes test the host's drivers and need nothing of the
	// inventory: they run while NVML is read.
	probes, err := selftest.Start(cmd.Context(), opts...)
	if err != nil {
		return err
	}
	inv, err := o.inv.inventory(g, f)
	if err != nil {
		probes.Stop()
		return err
	}
	rep, err := probes.Wait(inv)
	if err != nil {
		return err
	}
	if inContainer {
		return runContainerSelftest(cmd.Context(), g, inv, rep, ctrOpts)
	}
	if err := g.print(rep, func(w io.Writer) error { return writeSelftestText(w, rep) }); err != nil {
		return fault.CantWrite(fmt.Errorf("writing the self-test report: %w", err))
	}
	return selftestExit(rep, g.output == "text")
}

// selftestExit maps a report to the command's error: nil when it passed;
// fault.Unavailable (69) when a required library could not be opened
// (docs/exit-codes.md, 69: "a required file, service or library is
// unavailable: NVML, the Vulkan loader"; docs/commands.md, "nodeprep
// selftest"); fault.CheckFailed (1) otherwise. In text mode the reasons
// are already printed, so the error is silent.
func selftestExit(rep *selftest.Report, printed bool) error {
	err := rep.Err() // marked: 69 for a missing library, 1 otherwise
	if err == nil {
		return nil
	}
	if printed {
		return silent(err)
	}
	return err
}

// writeSelftestText prints one line per adapter and EGL device with ✓/✗,
// one per GPU, then the verdict and its reasons.
func writeSelftestText(w io.Writer, r *selftest.Report) error {
	ew := &selftestWriter{w: w}
	mark := func(ok bool) string {
		if ok {
			return "✓"
		}
		return "✗"
	}
	vk := &r.Vulkan
	ew.printf("Vulkan (loader %s", vk.Loader)
	if vk.LoaderVersion != "" {
		ew.printf(" %s", vk.LoaderVersion)
	}
	ew.printf(")\n")
	if vk.Stage != "" {
		ew.printf("  ✗ %s: %s\n", vk.Stage, selftestOr(vk.Error, vk.Result))
	}
	for _, a := range vk.Adapters {
		ok := a.Dispatch != nil && a.Dispatch.Verified && !a.Hidden
		ew.printf("  %s #%d %s  %s vendor 0x%04x device 0x%04x  %s %s  %s", mark(ok), a.Index, a.Name, a.DeviceType, a.Vendor, a.Device, a.Driver, a.DriverInfo, selftestOr(a.DeviceUUID, "no UUID"))
		if a.PCIBusID != "" {
			ew.printf(" %s", a.PCIBusID)
		}
		switch d := a.Dispatch; {
		case a.Hidden:
			ew.printf("  hidden: %s", a.HiddenReason)
		case d == nil:
			ew.printf("  no dispatch")
		case d.Verified:
			ew.printf("  dispatch verified %d elements in %.1f ms", d.Elements, d.Timings.TotalMS)
		case d.Step != "":
			ew.printf("  dispatch failed at %s: %s", d.Step, d.Result)
		default:
			ew.printf("  dispatch wrong: %d of %d elements (%s)", d.Wrong, d.Elements, d.FirstWrong)
		}
		ew.printf("\n")
		if w := a.WGPU; w != nil {
			// What wgpu reports for it; -o json has every limit.
			l := &w.Limits
			ew.printf("      wgpu: Vulkan %s, queue family 0 %s, subgroups %d-%d, %d downlevel flags\n", a.APIVersion, a.QueueFamily0, w.SubgroupMinSize, w.SubgroupMaxSize, len(w.DownlevelFlags))
			ew.printf("      limits: maxBufferSize %d, maxStorageBufferBindingSize %d, maxComputeWorkgroupStorageSize %d, maxComputeInvocationsPerWorkgroup %d, maxComputeWorkgroupsPerDimension %d, maxBindGroups %d\n",
				l.MaxBufferSize, l.MaxStorageBufferBindingSize, l.MaxComputeWorkgroupStorageSize, l.MaxComputeInvocationsPerWorkgroup, l.MaxComputeWorkgroupsPerDimension, l.MaxBindGroups)
			ew.printf("      features: %s\n", selftestOr(strings.Join(w.Features, " "), "none"))
		}
	}
	e := &r.EGL
	ew.printf("EGL (%s)\n", e.Library)
	if e.Stage != "" {
		ew.printf("  ✗ %s: %s\n", e.Stage, e.Error)
	}
	for _, d := range e.Devices {
		ew.printf("  %s device %d", mark(d.Error == ""), d.Index)
		if d.Vendor != "" {
			ew.printf(" %s", d.Vendor)
		}
		if d.GLRenderer != "" {
			ew.printf("  %s: %s / %s", d.API, d.GLVendor, d.GLRenderer)
		}
		if d.GLESVersion != "" {
			ew.printf("  GLES %s", d.GLESVersion)
		}
		if d.UUID != "" {
			ew.printf("  %s", d.UUID)
		}
		if d.Error != "" {
			ew.printf("  %s", d.Error)
		}
		ew.printf("\n")
	}
	// CUDA counts for a GPU's mark unless its library could not be opened
	// and is not required (--simulate without a libcuda).
	cudaCounts := false
	if c := r.CUDA; c != nil {
		cudaCounts = r.RequireCUDA || (c.Stage != cudaprobe.StageLoad && c.Stage != cudaprobe.StageSym)
		ew.printf("CUDA (%s", c.Library)
		if c.DriverVersion != "" {
			ew.printf(", CUDA %s", c.DriverVersion)
		}
		if c.Stage == cudaprobe.StageLoad || c.Stage == cudaprobe.StageSym {
			ew.printf(")\n") // cuInit never ran
		} else {
			ew.printf(", cuInit %.1f ms)\n", c.InitMS)
		}
		if c.Stage != "" {
			ew.printf("  ✗ %s: %s\n", c.Stage, selftestOr(strings.TrimSpace(c.Result+" "+c.Error), "failed"))
		}
		for _, d := range c.Devices {
			ew.printf("  %s device %d %s %s", mark(d.OK()), d.Ordinal, d.Name, selftestOr(d.UUID, "no UUID"))
			switch {
			case d.OK():
				ew.printf("  memory and PTX kernel verified in %.1f ms", d.Timings.TotalMS)
			case d.Step != "":
				ew.printf("  %s failed: %s", d.Step, selftestOr(d.Result, d.Error))
			case d.Wrong > 0:
				ew.printf("  kernel wrong: %s", d.FirstWrong)
			}
			ew.printf("\n")
		}
	}
	ew.printf("GPUs\n")
	for _, m := range r.Matches {
		ew.printf("  %s GPU %d %s %s  Vulkan %s", mark(m.Vulkan && (m.EGL || !r.RequireEGL) && (m.CUDA || !cudaCounts)), m.GPU, m.Name, m.UUID, mark(m.Vulkan))
		if m.AdapterName != "" {
			ew.printf(" (%s)", m.AdapterName)
		}
		ew.printf("  EGL %s", mark(m.EGL))
		if r.CUDA != nil {
			ew.printf("  CUDA %s", mark(m.CUDA))
		}
		if m.StandIn {
			ew.printf("  stand-in")
		}
		ew.printf("\n")
	}
	for _, s := range r.Warnings {
		ew.printf("warning: %s\n", s)
	}
	verdict := "passed"
	if !r.Passed {
		verdict = "FAILED"
	}
	var notes string
	if r.Simulated {
		notes += ", simulated"
	}
	if r.StandIn {
		notes += ", CPU stand-in: proves the path, not a GPU"
	}
	ew.printf("self-test %s (%.0f ms%s)\n", verdict, r.DurationMS, notes)
	for _, x := range r.Reasons {
		ew.printf("  ✗ %s: %s\n", x.Kind, x.Message)
	}
	return ew.err
}

func selftestOr(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// selftestWriter keeps the first write error so a long report needs one check.
type selftestWriter struct {
	w   io.Writer
	err error
}

func (e *selftestWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// newProbeCommand is the hidden child of the self-test: `nodeprep __probe
// REQUEST` runs one probe (REQUEST is a selftest.ProbeRequest as JSON) and
// prints its report as one line of JSON (newChildCommand).
func newProbeCommand(g *globals) *cobra.Command {
	return newChildCommand(g, serve.Probe, "REQUEST...", "Run one adapter probe (internal: the self-test's child process)",
		"report on the private pipe (fd 3) of nodeprep/child, with the crash report installed")
}

// newChildCommand is a hidden child command, `nodeprep NAME OPERANDS`
// (serve.Inventory, serve.Probe): it serves its requests with serve.Serve,
// which nodeprep-probe serves too, on the report pipe with --report-pipe
// (pipeUsage is that flag's help). It skips the global setup (config file,
// host root): the child needs neither, and a config problem must not look
// like a driver problem.
func newChildCommand(g *globals, name, operands, short, pipeUsage string) *cobra.Command {
	var onPipe bool
	cmd := &cobra.Command{
		Use:    name + " " + operands,
		Short:  short,
		Hidden: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			g.started = true
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			return serve.Serve(serve.Args{Command: name, ReportPipe: onPipe, Requests: args}, g.streams.Out)
		},
	}
	cmd.Flags().BoolVar(&onPipe, serve.ReportPipeFlag, false, pipeUsage)
	return cmd
}

// childExecutable is the executable that serves the driver-calling
// children (child/serve): nodeprep-probe beside this executable when there is
// one (lean true: it skips this binary's package initialisation), else
// this executable itself (tests, `go run`, a lone binary).
func childExecutable() (path string, lean bool, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", false, err
	}
	p := filepath.Join(filepath.Dir(exe), serve.LeanName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return p, true, nil
	}
	return exe, false, nil
}

// shaderCacheHostPath is nodeprep's shader cache for the probe children.
const shaderCacheHostPath = "/run/nodeprep/shader-cache"

// shaderCacheDir is shaderCacheHostPath on this machine, created when
// create is set (the drivers create only its last element); "" (caches
// off) when it cannot be, or, without create, when it does not exist.
func shaderCacheDir(g *globals, create bool) string {
	if g.host == nil {
		return ""
	}
	p, err := shaderCache(g.host, create)
	if err != nil {
		g.log.Debug("shader cache off", "dir", shaderCacheHostPath, "err", err)
		return ""
	}
	return p
}

// shaderCache makes (create) or finds the shader cache and returns its
// path (hostfs.Root.PrivateDir): a directory at its own name, this user's
// and writable by no one else, holding only this user's directories and
// regular files, no link, since the drivers write into it and load the
// shaders it holds. With create (under the lock) a cache holding anything
// else is emptied first; without it such a cache is not used.
func shaderCache(host *hostfs.Root, create bool) (string, error) {
	return host.PrivateDir(shaderCacheHostPath, create)
}
