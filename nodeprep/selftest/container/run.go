package container

import (
	"github.com/nodeprep/nodeprep/cdi/specset"

	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// DefaultKind is the CDI kind of the devices under test, the one
// nvidia-ctk generates and the NVIDIA device plugin asks for.
const DefaultKind = "nvidia.com/gpu"

// Options configure Run. Binary and Rootfs are required; every other zero
// field takes the default its comment names (resolved in one place, Run).
type Options struct {
	// Binary is the executable that serves the probe on this machine (the
	// command layer passes nodeprep-probe beside its executable, else its
	// executable); it is bind-mounted read-only at BinaryPath.
	Binary string
	// ProbeArgs are the arguments that make Binary serve one probe, before
	// the request (default "__probe", selftest.ServeProbe's command).
	ProbeArgs []string
	// Rootfs is the container's image: a directory on this machine (not
	// under the host root: it is no part of the host being prepared) with
	// an FHS userland, a Vulkan loader and libglvnd, and no driver
	// (scripts/make-test-rootfs.sh builds one). It is never written.
	Rootfs string
	// Runtime is the OCI runtime: a path, or a name looked up in PATH
	// (default: runc, else crun, else K3sRunc; see FindRuntime).
	Runtime string
	// Spec is the host path of the CDI spec; the CDI library loads every
	// spec in its directory, resolved under the host root, as a runtime
	// configured with that directory would (default cdi.DefaultSpecPath).
	Spec string
	// SpecDirs are the runtime's CDI spec directories (host paths, lowest
	// priority first): the container's devices are resolved against every
	// spec in them, as containerd does with cdi_spec_dirs. Empty means
	// specset.DefaultDirs; the spec's own directory is added (last, highest
	// priority) when it is not among them.
	SpecDirs []string
	// Kind is the CDI kind of the devices (default DefaultKind); each GPU's
	// device is <Kind>=<its NVML UUID>.
	Kind string
	// PerGPU runs one container set per GPU, each with that GPU's device
	// only; by default one set gets every GPU's device.
	PerGPU bool
	// VulkanLoader and EGLLibrary are dlopen'ed inside the container, from
	// the image (defaults selftest.DefaultVulkanLoader, DefaultEGLLibrary).
	VulkanLoader, EGLLibrary string
	// CUDALibrary, when set, runs the CUDA probe (nodeprep/cudaprobe) in a
	// third container beside the other two, dlopening it there: the
	// command layer passes selftest.DefaultCUDALibrary, the soname the
	// spec's mounts and linker cache must make resolvable. RequireCUDA is
	// selftest.WithCUDA's require. Empty leaves CUDA out.
	CUDALibrary string
	RequireCUDA *bool
	// Timeout bounds each probe container, from the runtime's start to its
	// exit (default selftest.DefaultTimeout).
	Timeout time.Duration
	// EGLOptional makes EGL failures warnings (selftest's RequireEGL
	// false); by default they fail, as on the host.
	EGLOptional bool
	// AllowCPUAdapter lets lavapipe and Mesa's EGL device stand in for
	// simulated GPUs (selftest.Policy.AllowCPUAdapter).
	AllowCPUAdapter bool
	// Handler is the program the runtime handler pods use names (its
	// BinaryName: nvidia-container-runtime.cdi for k3s's nvidia-cdi).
	// When set on the real root ("/"), the probe asks for its GPUs as the
	// device plugin's envvar strategy does (NVIDIA_VISIBLE_DEVICES=<uuids>)
	// and the container is created through Handler, so the NVIDIA runtime's
	// mode, spec-dirs and the spec's hooks decide what it gets, as for a
	// pod; nodeprep injects nothing. Under another host root Handler is not
	// used (it resolves real host paths) and a note says so.
	Handler string
	// HandlerEnv is Handler's environment (nil: nodeprep's own).
	HandlerEnv []string
	// WorkDir is where bundles and the runtime's state go, each in a
	// directory of its own removed at the end (default os.TempDir()).
	WorkDir string
	// Log receives debug detail and notes (default: discarded).
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if len(o.ProbeArgs) == 0 {
		o.ProbeArgs = []string{"__probe"}
	}
	if o.Spec == "" {
		o.Spec = cdi.DefaultSpecPath
	}
	if o.Kind == "" {
		o.Kind = DefaultKind
	}
	if o.VulkanLoader == "" {
		o.VulkanLoader = selftest.DefaultVulkanLoader
	}
	if o.EGLLibrary == "" {
		o.EGLLibrary = selftest.DefaultEGLLibrary
	}
	if o.Timeout <= 0 {
		o.Timeout = selftest.DefaultTimeout
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Preflight checks, before anything is written, what Run needs from this
// machine: the rootfs is a directory and the OCI runtime can be found. The
// error is marked fault.ErrUnavailable (fault.ErrUsage for a relative
// rootfs), as Run would report it.
func Preflight(opts Options) error {
	if !filepath.IsAbs(opts.Rootfs) {
		return fault.Usage(fmt.Errorf("in-container self-test: rootfs %q: want an absolute path", opts.Rootfs))
	}
	if err := checkRootfs(opts.Rootfs); err != nil {
		return fault.Unavailable(fmt.Errorf("in-container self-test: %w", err))
	}
	_, err := FindRuntime(opts.Runtime)
	return err
}

func checkRootfs(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("rootfs %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("rootfs %s is not a directory", dir)
	}
	return nil
}

// Run runs the in-container self-test for the GPUs of inv on host: for each
// device set (all GPUs, or one per GPU with PerGPU) it builds the OCI spec,
// injects the GPUs' CDI devices from the spec's directory, and runs the
// Vulkan and the EGL probe (and, with CUDALibrary, the CUDA probe) in
// containers of their own at the same time; each set's reports are
// evaluated with selftest.Evaluate (and selftest.ApplyCUDA) over that
// set's GPUs.
//
// A failed self-test, including a missing runtime or rootfs, an
// unresolvable device or a missing mount source, is a Report with Passed
// false (Report.Err marks it for the exit code), not an error. The error is
// for a call that cannot be made: a nil host or inventory, no Binary or
// Rootfs (fault.ErrUsage), a Binary that is not an executable file, or a
// work directory that cannot be created (fault.ErrUnavailable).
func Run(ctx context.Context, host *hostfs.Root, inv *gpu.Inventory, opts Options) (*Report, error) {
	o := opts.withDefaults()
	switch {
	case host == nil || inv == nil:
		return nil, errors.New("container self-test: nil host root or inventory")
	case o.Binary == "":
		return nil, fault.Usage(errors.New("in-container self-test: no nodeprep binary to run in the container"))
	case o.Rootfs == "":
		return nil, fault.Usage(errors.New("in-container self-test: no rootfs (--rootfs, selftest.rootfs): the container needs an image with a Vulkan loader and libglvnd"))
	}
	binary, err := absExecutable(o.Binary)
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("in-container self-test: the nodeprep binary: %w", err))
	}
	start := time.Now()
	rep := &Report{Rootfs: o.Rootfs, Spec: o.Spec, Containers: []Container{}}
	defer func() {
		rep.Passed = len(rep.Reasons) == 0
		rep.DurationMS = msSince(start)
	}()

	if err := checkRootfs(o.Rootfs); err != nil {
		rep.fail(ReasonRootfsUnavailable, "%v (build one with scripts/make-test-rootfs.sh)", err)
		return rep, nil
	}
	image, err := hostfs.New(o.Rootfs)
	if err != nil {
		rep.fail(ReasonRootfsUnavailable, "rootfs %s: %v", o.Rootfs, err)
		return rep, nil
	}
	rep.Rootfs = image.Dir()
	rt, err := FindRuntime(o.Runtime)
	if err != nil {
		rep.fail(ReasonRuntimeMissing, "%v", err)
		return rep, nil
	}
	rep.Runtime = rt
	if len(inv.GPUs) == 0 {
		rep.fail(selftest.ReasonNoGPUs, "the inventory has no GPU: nothing to test")
		return rep, nil
	}
	specDirs := o.SpecDirs
	if len(specDirs) == 0 {
		specDirs = specset.DefaultDirs
	}
	if !slices.Contains(specDirs, path.Dir(o.Spec)) {
		specDirs = append(slices.Clone(specDirs), path.Dir(o.Spec))
	}

	work, err := os.MkdirTemp(o.WorkDir, "nodeprep-container-")
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("in-container self-test: creating a work directory in %s: %w", o.WorkDir, err))
	}
	defer func() {
		if err := os.RemoveAll(work); err != nil {
			o.Log.Warn("removing the in-container self-test's work directory", "dir", work, "err", err)
		}
	}()
	r := &runner{
		o: o, host: host, image: image, binary: binary, specDirs: specDirs, work: work,
		rt: &Runtime{Path: rt, StateDir: path.Join(work, "state"), Log: o.Log},
	}
	switch {
	case o.Handler != "" && host.Dir() == "/":
		r.rt.Via, r.rt.ViaEnv = o.Handler, o.HandlerEnv
		rep.Handler = o.Handler
	case o.Handler != "":
		r.handlerNote = fmt.Sprintf("the runtime handler's %s is not used under the host root %s (it reads the host's real paths): devices injected with the CDI library", o.Handler, host.Dir())
	}
	if v, err := r.rt.Version(ctx); err == nil {
		rep.RuntimeVersion = v
	} else {
		rep.fail(ReasonRuntimeMissing, "OCI runtime %s does not run: %v", rt, err)
		return rep, nil
	}
	r.argv, r.argvNote = probeArgv(binary, image)
	if _, err := host.Stat(o.Spec); err != nil {
		r.specMissing = fmt.Sprintf(" (the spec %s itself is unusable: %v)", o.Spec, unwrapPath(err))
	}

	sets := [][]gpu.GPU{inv.GPUs}
	if o.PerGPU {
		sets = nil
		for _, g := range inv.GPUs {
			sets = append(sets, []gpu.GPU{g})
		}
	}
	for _, gpus := range sets {
		sub := *inv
		sub.GPUs = gpus
		c := r.runSet(ctx, &sub)
		rep.Containers = append(rep.Containers, c)
		var reasons []selftest.Reason
		reasons = append(reasons, c.Reasons...)
		if c.Selftest != nil {
			reasons = append(reasons, c.Selftest.Reasons...)
		}
		for _, x := range reasons {
			if len(sets) > 1 {
				x.Message = strings.Join(c.Devices, ",") + ": " + x.Message
			}
			rep.Reasons = append(rep.Reasons, x)
		}
	}
	return rep, nil
}

// runner is one Run's shared state.
type runner struct {
	o        Options
	host     *hostfs.Root
	image    *hostfs.Root
	binary   string
	specDirs []string // host paths of the runtime's CDI spec directories
	work     string
	rt       *Runtime
	argv     []string // the probe's command line in the container, without the request
	argvNote string
	// handlerNote says why Options.Handler is not used ("" when it is, or
	// none was given).
	handlerNote string
	// specMissing explains an unresolvable device when the spec file
	// itself is missing ("" when it exists).
	specMissing string
	seq         atomic.Int64
}

// runSet runs the two probe containers for one device set.
func (r *runner) runSet(ctx context.Context, inv *gpu.Inventory) (c Container) {
	start := time.Now()
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	c.Devices = DeviceNames(r.o.Kind, uuids...)
	defer func() { c.DurationMS = msSince(start) }()
	if r.argvNote != "" {
		c.Notes = append(c.Notes, r.argvNote)
	}
	if r.handlerNote != "" {
		c.Notes = append(c.Notes, r.handlerNote)
	}
	if r.rt.Via != "" {
		// The device plugin's envvar strategy: the handler resolves the ids.
		spec := BaseSpec("rootfs", nil)
		spec.Process.Env = append(spec.Process.Env, "NVIDIA_VISIBLE_DEVICES="+strings.Join(uuids, ","))
		c.Devices = []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}
		return r.probeSet(ctx, inv, spec, c, start)
	}

	// A cache per set: RerootDeviceNodes edits what it loaded.
	cache, _, err := specset.NewCache(r.host, r.specDirs)
	if err != nil {
		c.fail(ReasonCDIUnresolvable, "%v", err)
		return c
	}
	c.Notes = append(c.Notes, RerootDeviceNodes(cache, c.Devices, r.host)...)
	spec := BaseSpec("rootfs", nil)
	if err := Inject(cache, spec, c.Devices); err != nil {
		c.fail(ReasonCDIUnresolvable, "injecting %s from %s with the CDI library: %v%s", strings.Join(c.Devices, ", "), r.o.Spec, err, r.specMissing)
		return c
	}
	missing, notes := Reroot(spec, r.host)
	c.Notes = append(c.Notes, notes...)
	for _, m := range missing {
		where := m.HostPath
		if m.Source != m.HostPath {
			where += " (" + m.Source + " on this machine)"
		}
		c.fail(ReasonMountSourceMissing, "the spec mounts host path %s at %s in the container, but it is unusable: %v", where, m.Destination, unwrapPath(m.Err))
	}
	if len(c.Reasons) > 0 {
		return c
	}
	return r.probeSet(ctx, inv, spec, c, start)
}

// probeSet runs the Vulkan and the EGL probe of one set in spec (its
// devices already in it, or requested for the handler to inject).
func (r *runner) probeSet(ctx context.Context, inv *gpu.Inventory, spec *rspec.Spec, c Container, start time.Time) Container {
	spec.Mounts = append(spec.Mounts, BinaryMount(r.binary))
	if len(c.Notes) > 0 {
		// Debug: the report carries the notes (one summary line in text
		// form); a line per run on stderr would repeat them at length.
		r.o.Log.Debug("in-container self-test", "devices", len(c.Devices), "notes", strings.Join(c.Notes, "; "))
	}

	hints := selftest.Hints{}
	hints.ICDVar, hints.ICDPaths = selftest.ICDSearch(spec.Process.Env)
	hints.EGLVar, hints.EGLPaths = selftest.EGLVendorSearch(spec.Process.Env)
	vkReq := selftest.ProbeRequest{API: selftest.APIVulkan, Library: r.o.VulkanLoader, FenceTimeoutMS: (r.o.Timeout * 3 / 4).Milliseconds(), ICDPaths: hints.ICDPaths}
	eglReq := selftest.ProbeRequest{API: selftest.APIEGL, Library: r.o.EGLLibrary}
	vkSpec, err := r.probeSpec(spec, vkReq)
	if err != nil {
		c.fail(selftest.ReasonBadOutput, "%v", err)
		return c
	}
	eglSpec, err := r.probeSpec(spec, eglReq)
	if err != nil {
		c.fail(selftest.ReasonBadOutput, "%v", err)
		return c
	}
	var cudaSpec *rspec.Spec
	if r.o.CUDALibrary != "" {
		if cudaSpec, err = r.probeSpec(spec, selftest.ProbeRequest{API: selftest.API(cudaprobe.API), Library: r.o.CUDALibrary}); err != nil {
			c.fail(selftest.ReasonBadOutput, "%v", err)
			return c
		}
	}
	var (
		wg              sync.WaitGroup
		vk              selftest.ProbeResult[selftest.VulkanReport]
		egl             selftest.ProbeResult[selftest.EGLReport]
		cuda            selftest.ProbeResult[cudaprobe.Report]
		vkSaid, eglSaid string
		cudaSaid        string
	)
	if cudaSpec != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cuda, cudaSaid = probe(ctx, r, cudaSpec, selftest.API(cudaprobe.API), cudaprobe.Decode)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		vk, vkSaid = probe(ctx, r, vkSpec, selftest.APIVulkan, selftest.DecodeVulkanReport)
	}()
	go func() {
		defer wg.Done()
		egl, eglSaid = probe(ctx, r, eglSpec, selftest.APIEGL, selftest.DecodeEGLReport)
	}()
	wg.Wait()
	c.Selftest = selftest.Evaluate(inv, vk, egl, selftest.Policy{RequireEGL: !r.o.EGLOptional, AllowCPUAdapter: r.o.AllowCPUAdapter, Hints: hints})
	if cudaSpec != nil {
		selftest.ApplyCUDA(c.Selftest, inv, cuda, r.o.RequireCUDA)
	}
	c.Selftest.DurationMS = msSince(start)
	// A failing GPU's reason carries what the loader and the driver printed
	// in the container ("unable to open libnvidia-glvkspirv.so…"): the
	// report says what failed, they say why.
	var said []string
	if vkSaid != "" {
		said = append(said, "the Vulkan loader and driver said: "+vkSaid)
	}
	if eglSaid != "" {
		said = append(said, "libEGL and the driver said: "+eglSaid)
	}
	if cudaSaid != "" {
		said = append(said, "libcuda said: "+cudaSaid)
	}
	if !c.Selftest.Passed && len(said) > 0 {
		for i := range c.Selftest.Reasons {
			c.Selftest.Reasons[i].Message += " (" + strings.Join(said, "; ") + ")"
		}
	}
	return c
}

// Bounds of the stderr lines a reason quotes.
const (
	saidLines = 8   // the last lines
	saidLine  = 200 // bytes of each
)

// stderrTail returns the last saidLines non-empty lines of a probe's
// stderr, each cut to saidLine bytes, joined by " | "; "" for none.
func stderrTail(b []byte) string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > saidLine {
				l = l[:saidLine] + "…"
			}
			lines = append(lines, l)
		}
	}
	if len(lines) > saidLines {
		lines = append([]string{"…"}, lines[len(lines)-saidLines:]...)
	}
	return strings.Join(lines, " | ")
}

// probeSpec returns a copy of spec whose process runs the probe for req.
func (r *runner) probeSpec(spec *rspec.Spec, req selftest.ProbeRequest) (*rspec.Spec, error) {
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding the probe request: %w", err)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding the OCI runtime spec: %w", err)
	}
	var s rspec.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("copying the OCI runtime spec: %w", err)
	}
	s.Process.Args = append(append(append([]string{}, r.argv...), r.o.ProbeArgs...), string(reqJSON))
	return &s, nil
}

// probe runs one probe container and decodes its report. said is the tail
// of what the probe printed on stderr next to a report (the loader's and
// the driver's messages; see stderrTail), "" otherwise: without a report
// the failure quotes stderr itself.
func probe[T any](ctx context.Context, r *runner, spec *rspec.Spec, api selftest.API, decode func([]byte) (*T, error)) (res selftest.ProbeResult[T], said string) {
	what := fmt.Sprintf("%s probe in the container", api)
	failed := func(kind selftest.ReasonKind, format string, args ...any) (selftest.ProbeResult[T], string) {
		return selftest.ProbeResult[T]{Failure: &selftest.Reason{Kind: kind, Message: what + ": " + fmt.Sprintf(format, args...)}}, ""
	}
	b, err := newBundle(r.work, r.image.Dir())
	if err != nil {
		return failed(ReasonRootfsUnavailable, "%v", err)
	}
	defer func() {
		if err := b.remove(); err != nil {
			r.o.Log.Warn("removing a probe container's bundle", "err", err)
		}
	}()
	spec.Root.Path = b.rootfs
	if err := b.writeConfig(spec); err != nil {
		return failed(ReasonRuntimeFailed, "%v", err)
	}
	id := fmt.Sprintf("nodeprep-selftest-%d-%d-%s", os.Getpid(), r.seq.Add(1), api)
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	out := r.rt.Run(ctx, b.dir, id, selftest.ReportPrefix)
	stderr := ""
	if s := strings.TrimSpace(string(out.Stderr)); s != "" {
		stderr = "; stderr: " + oneLine(s)
	}
	switch {
	case out.Err != nil:
		return failed(ReasonRuntimeFailed, "%v", out.Err)
	case out.Report != nil:
		rep, err := decode(out.Report)
		if err != nil {
			return failed(selftest.ReasonBadOutput, "printed a bad report: %v", err)
		}
		return selftest.ProbeResult[T]{Report: rep}, stderrTail(out.Stderr)
	case out.TimedOut:
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return failed(selftest.ReasonTimeout, "cancelled: %v", ctx.Err())
		}
		return failed(selftest.ReasonTimeout, "did not finish within %s; the container was killed and deleted (a hung driver?)%s", r.o.Timeout, stderr)
	case out.ExitCode > 128 && out.ExitCode < 128+65:
		sig := selftest.SignalName(syscall.Signal(out.ExitCode - 128))
		return failed(selftest.ReasonCrashed, "crashed: killed by signal %s%s", sig, stderr)
	case goCrash.Match(out.Stderr):
		// The probe is the container's PID 1, which no signal it raises
		// itself can kill: Go's runtime exits 2 after printing the signal.
		sig := string(goCrash.FindSubmatch(out.Stderr)[1])
		return failed(selftest.ReasonCrashed, "crashed: %s (exit status %d)%s", sig, out.ExitCode, stderr)
	case len(strings.TrimSpace(string(out.Other))) == 0 && stderr != "":
		if r.rt.Via != "" {
			return failed(ReasonRuntimeFailed, "the runtime handler's %s could not create the container, as it would fail a pod's (exit status %d)%s", r.rt.Via, out.ExitCode, stderr)
		}
		return failed(ReasonRuntimeFailed, "the OCI runtime %s could not run the probe (exit status %d)%s", r.rt.Path, out.ExitCode, stderr)
	}
	return failed(selftest.ReasonBadOutput, "exited with status %d without printing a report; output: %s%s", out.ExitCode, oneLine(string(out.Other)), stderr)
}

// goCrash finds the signal in the Go runtime's report of a fatal signal
// ("[signal SIGSEGV: segmentation violation ...]", or "SIGSEGV: ..." for a
// signal during a cgo call).
var goCrash = regexp.MustCompile(`(?m)(?:^\[signal |^)(SIG[A-Z]+): `)

// probeArgv returns the command line that starts the binary in the
// container: the binary itself when its ELF interpreter is in the image;
// otherwise the image's own dynamic linker of the same name, with the binary
// as its argument, and a note saying so. A binary built by Nix names
// /nix/store/…/ld-linux-x86-64.so.2, which a workload image lacks; the
// image's glibc then serves it (the probe needs only libc: it dlopens the
// rest).
func probeArgv(binary string, image *hostfs.Root) (argv []string, note string) {
	f, err := elf.Open(binary)
	if err != nil {
		return []string{BinaryPath}, ""
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data := make([]byte, p.Filesz)
			if _, err := p.ReadAt(data, 0); err == nil {
				interp = strings.TrimRight(string(data), "\x00")
			}
		}
	}
	if interp == "" || existsIn(image, interp) {
		return []string{BinaryPath}, ""
	}
	base := path.Base(interp)
	tuple := cdi.MultiarchTuple(runtime.GOARCH)
	for _, dir := range []string{"/lib64", "/lib/" + tuple, "/usr/lib/" + tuple, "/lib", "/usr/lib64", "/usr/lib"} {
		cand := path.Join(dir, base)
		if existsIn(image, cand) {
			return []string{cand, BinaryPath}, fmt.Sprintf("the binary's interpreter %s is not in the image: it runs through the image's %s", interp, cand)
		}
	}
	return []string{BinaryPath}, fmt.Sprintf("the binary's interpreter %s is not in the image, nor is any %s: the probe cannot start", interp, base)
}

func existsIn(image *hostfs.Root, p string) bool {
	_, err := image.Stat(p)
	return err == nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// unwrapPath drops the *fs.PathError wrapper whose path the message names
// already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
