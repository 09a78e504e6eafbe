package selftest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/child"
	"github.com/nodeprep/nodeprep/nodeprep/cudaprobe"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// Defaults of the options.
const (
	DefaultVulkanLoader = "libvulkan.so.1"         // the loader's soname, found by the dynamic linker
	DefaultEGLLibrary   = "libEGL.so.1"            // glvnd's libEGL soname
	DefaultCUDALibrary  = cudaprobe.DefaultLibrary // libcuda.so.1, the CUDA driver library (WithCUDA)
	DefaultTimeout      = 30 * time.Second         // how long each probe may run (WithTimeout)
)

// Errors.
var (
	// ErrNoCommand: Run was not told how to start the probe child.
	ErrNoCommand = errors.New("selftest: no probe command (WithCommand)")
	// ErrFailed wraps every failed verdict (Report.Err).
	ErrFailed = errors.New("adapter self-test failed")
	// ErrLibraryNotFound is also wrapped by Report.Err when a required
	// library (the Vulkan loader, or libEGL when EGL is required) could not
	// be opened: exit 69 (docs/exit-codes.md; docs/commands.md, "nodeprep
	// selftest").
	ErrLibraryNotFound = errors.New("a required graphics library is unavailable")
)

type options struct {
	command    []string
	env        []string
	loader     string
	eglLib     string
	timeout    time.Duration
	requireEGL bool
	allowCPU   bool
	require    Requirements
	cacheDir   string
	// prepareCache, when set, makes the cache directory (or, with
	// noCacheCreation, finds it) when the probes start and sets cacheDir.
	prepareCache    func(create bool) string
	noCacheCreation bool
	log             *slog.Logger
	// cudaLib is the CUDA driver library the CUDA probe opens ("": the
	// probe does not run); requireCUDA is WithCUDA's require.
	cudaLib     string
	requireCUDA *bool
}

// Option configures Run.
type Option func(*options)

// WithCommand sets how to start a probe child: path and args are the
// command line that ServeProbeOnPipe answers, without the requests (the
// cmd layer passes nodeprep-probe beside its executable, else the
// executable itself, and "__probe --report-pipe"; Run appends the
// ProbeRequests as the last arguments). Required.
func WithCommand(path string, args ...string) Option {
	return func(o *options) { o.command = append([]string{path}, args...) }
}

// WithEnv sets the children's environment, "KEY=value" entries (the cmd
// layer passes os.Environ() so that VK_DRIVER_FILES, VK_ICD_FILENAMES,
// __EGL_VENDOR_LIBRARY_FILENAMES, LD_LIBRARY_PATH... reach the drivers).
// The same entries are read to name the driver search paths in reasons.
// nil (the default) lets the children inherit the process's environment;
// the reasons then say only that the default search applied.
func WithEnv(env []string) Option { return func(o *options) { o.env = env } }

// WithVulkanLoader sets the Vulkan loader to dlopen: a path or a bare
// name for the dynamic linker's search (default libvulkan.so.1; "" keeps it).
func WithVulkanLoader(path string) Option {
	return func(o *options) {
		if path != "" {
			o.loader = path
		}
	}
}

// WithEGLLibrary sets the EGL library to dlopen (default libEGL.so.1; ""
// keeps it).
func WithEGLLibrary(path string) Option {
	return func(o *options) {
		if path != "" {
			o.eglLib = path
		}
	}
}

// WithTimeout bounds each probe (default 30s; zero or negative keeps it):
// a probe child is killed with its process group when no report has come
// for that long, from its start or from the report before (the Vulkan and
// EGL probes share a child and run in turn, so each has the whole of it).
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithRequireEGL sets whether EGL failures fail the self-test (default
// true).
func WithRequireEGL(require bool) Option { return func(o *options) { o.requireEGL = require } }

// WithAllowCPUAdapter lets a CPU adapter and a Mesa software EGL device
// stand in for simulated GPUs (Policy.AllowCPUAdapter). Default false.
func WithAllowCPUAdapter(allow bool) Option { return func(o *options) { o.allowCPU = allow } }

// WithShaderCacheDir gives the drivers a shader disk cache in dir (on
// this machine; nodeprep passes /run/nodeprep/shader-cache under the host
// root): a rerun in the same boot skips shader compilation, and nothing is
// written under $HOME. Without it the caches are off.
func WithShaderCacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

// WithShaderCache is WithShaderCacheDir with the directory made only when
// the probes start: prepare(true) creates it and returns its path, or ""
// (caches off). So a run that stops before the self-test (bad input, an
// output that cannot be written) leaves no cache directory behind. With
// WithShaderCacheCreation(false) Start calls prepare(false), which returns
// the path only when the directory already exists.
func WithShaderCache(prepare func(create bool) string) Option {
	return func(o *options) { o.prepareCache = prepare }
}

// WithShaderCacheCreation sets whether Start may create the shader cache
// directory (WithShaderCache; default true). nodeprep.Up starts the probes
// before its plan is validated, when nothing may be written yet, and
// passes false: the probes then use a cache an earlier run made (health,
// selftest), else run without one, as the first run of a boot does
// anyway (/run is empty).
func WithShaderCacheCreation(create bool) Option {
	return func(o *options) { o.noCacheCreation = !create }
}

// WithRequirements sets the WebGPU limits and features every adapter that
// satisfies a GPU must meet (Policy.Require; the config's
// selftest.requiredLimits and requiredFeatures). Check them first
// (Requirements.Check): an unknown name is reported as unmet.
func WithRequirements(q Requirements) Option { return func(o *options) { o.require = q } }

// WithCUDA runs the CUDA probe (nodeprep/cudaprobe) too, in a child of
// its own at the same time as the Vulkan and EGL probes, opening lib
// (cudaprobe.DefaultLibrary, or a path); "" (the default) leaves it out.
// require decides what fails: nil (the default policy) makes every CUDA
// failure fail the self-test, except, on a simulated inventory, a library
// that cannot be opened, which is then a warning (a machine without an
// NVIDIA driver can still run `--simulate`); true makes that fail too,
// false makes every CUDA failure a warning (a node that runs no CUDA).
func WithCUDA(lib string, require *bool) Option {
	return func(o *options) { o.cudaLib, o.requireCUDA = lib, require }
}

// WithLogger sets the logger for debug detail (the children's stderr).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Run runs the self-test for the GPUs of inv: it starts the probe
// children (runProbes: the Vulkan and the EGL probe in turn in one, the
// CUDA probe beside it), each probe bounded by the timeout, and evaluates
// their reports (Evaluate). A failed self-test is a Report with
// Passed false (see Report.Err), not an error; the error is for a missing
// WithCommand (ErrNoCommand) or a nil inventory. It is Start, then Wait.
func Run(ctx context.Context, inv *gpu.Inventory, opts ...Option) (*Report, error) {
	if inv == nil {
		return nil, errNilInventory
	}
	p, err := Start(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return p.Wait(inv)
}

var errNilInventory = errors.New("selftest: nil inventory")

// Probes is a self-test whose probe children Start has started (the
// Vulkan and EGL probes in turn in one, the CUDA probe in another); Wait
// evaluates their reports against the inventory. The probes test the
// host's drivers and need nothing of the inventory, so a caller reads
// the inventory (the NVML child) or plans other work while they run.
type Probes struct {
	o      options
	hints  Hints
	start  time.Time
	ended  time.Time          // when every child had ended; set before done closes
	cancel context.CancelFunc // ends the children (Stop)
	done   chan struct{}      // closed when every child has ended
	vk     ProbeResult[VulkanReport]
	egl    ProbeResult[EGLReport]
	cuda   ProbeResult[cudaprobe.Report] // when o.cudaLib is set
}

// Start starts the probe children (the Vulkan and the EGL probe in turn
// in one, see runProbes; the CUDA probe, WithCUDA, in another at the same
// time), each probe bounded by the timeout and every child by ctx
// (cancelling ctx kills them: the reports then say cancelled), and
// returns at once. The only error is a
// missing WithCommand (ErrNoCommand). Every started Probes must end in
// Wait or Stop, so that no child outlives the caller.
func Start(ctx context.Context, opts ...Option) (*Probes, error) {
	o := options{
		loader:     DefaultVulkanLoader,
		eglLib:     DefaultEGLLibrary,
		timeout:    DefaultTimeout,
		requireEGL: true,
		log:        slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.command) == 0 || o.command[0] == "" {
		return nil, ErrNoCommand
	}
	p := &Probes{o: o, start: time.Now(), done: make(chan struct{})}
	ctx, p.cancel = context.WithCancel(ctx)
	if o.env != nil {
		p.hints.ICDVar, p.hints.ICDPaths = ICDSearch(o.env)
		p.hints.EGLVar, p.hints.EGLPaths = EGLVendorSearch(o.env)
	}
	vkReq := ProbeRequest{API: APIVulkan, Library: o.loader, FenceTimeoutMS: (o.timeout * 3 / 4).Milliseconds(), ICDPaths: p.hints.ICDPaths, ICDDefaultSearch: o.env != nil && p.hints.ICDVar == ""}
	eglReq := ProbeRequest{API: APIEGL, Library: o.eglLib}
	if o.prepareCache != nil {
		p.o.cacheDir = o.prepareCache(!o.noCacheCreation)
	}
	go func() {
		defer close(p.done)
		// CUDA in a child of its own beside the Vulkan and EGL one:
		// cuInit alone can take seconds on an 8-GPU server.
		var cudaDone chan struct{}
		if p.o.cudaLib != "" {
			cudaDone = make(chan struct{})
			go func() {
				defer close(cudaDone)
				p.cuda = probeChild(ctx, &p.o, ProbeRequest{API: API(cudaprobe.API), Library: p.o.cudaLib}, cudaprobe.Decode)
			}()
		}
		p.vk, p.egl = runProbes(ctx, &p.o, vkReq, eglReq)
		if cudaDone != nil {
			<-cudaDone
		}
		p.ended = time.Now()
	}()
	return p, nil
}

// Stop kills the children, if they still run, and waits until they have
// ended: for a caller that gives up on the self-test (a failed plan).
// Calling it again, or after Wait, does nothing more.
func (p *Probes) Stop() {
	p.cancel()
	<-p.done
}

// Wait waits for the children and evaluates their reports against inv
// (Evaluate). DurationMS is the children's time, from Start until every
// one had ended, plus the evaluation: what the caller did between the
// children's end and Wait (planning, writing a spec) is not the
// self-test's. The error is for a nil inventory (after the children
// have ended).
func (p *Probes) Wait(inv *gpu.Inventory) (*Report, error) {
	<-p.done
	p.cancel() // releases the context; the children have ended
	if inv == nil {
		return nil, errNilInventory
	}
	evaluated := time.Now()
	o := &p.o
	r := Evaluate(inv, p.vk, p.egl, Policy{RequireEGL: o.requireEGL, AllowCPUAdapter: o.allowCPU, Hints: p.hints, Require: o.require})
	if o.cudaLib != "" {
		ApplyCUDA(r, inv, p.cuda, o.requireCUDA)
	}
	// A child that printed no report still had a library to open.
	if r.Vulkan.Loader == "" {
		r.Vulkan.Loader = o.loader
	}
	if r.EGL.Library == "" {
		r.EGL.Library = o.eglLib
	}
	r.DurationMS = ms(p.ended.Sub(p.start) + time.Since(evaluated))
	r.ProbeChild = o.command[0]
	// Lists are [] when empty, never absent or null: scripts iterate them.
	if r.Reasons == nil {
		r.Reasons = []Reason{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	return r, nil
}

// runProbes runs the Vulkan probe and then the EGL probe in one child,
// on one thread, as a wgpu program with its default backends loads both
// drivers in one process. On Mesa the two drivers share LLVM, which one
// process loads and relocates once: measured on a 2-core machine, one
// child running both in turn takes about 0.75 of the time of two
// children running at the same time (docs/faults.md, "Self-test speed").
// Two drivers initialising on two threads of one process can deadlock
// (lavapipe's compute fence then never signals: seen about once in 40
// runs with Mesa 22.3), so they are never run at the same time in one
// process.
//
// A verdict against a driver still comes from a process of its own, as
// when each probe had its own child: every probe that did not end clean
// in the shared child (no report, a probe that stopped, a device with an
// error or a dispatch that was not verified: see clean) is run again,
// alone, in a fresh child, and that child's result is the one reported.
// So a crash, an exit or a failure is told to the API whose driver made
// it, with that child's output, and a failure the Vulkan driver left
// behind in the process cannot pass for the EGL driver's. The one
// exception is a probe that hung in the shared child (each probe there
// has the whole timeout, from the report before it): it is not run
// again, which would double the wait; its verdict says it did not finish.
// A cancelled context runs nothing again.
func runProbes(ctx context.Context, o *options, vkReq, eglReq ProbeRequest) (ProbeResult[VulkanReport], ProbeResult[EGLReport]) {
	lines, res, failure := runChild(ctx, o, vkReq, eglReq)
	vk := decodeResult(APIVulkan, lines, res, failure, DecodeVulkanReport)
	egl := decodeResult(APIEGL, lines, res, failure, DecodeEGLReport)
	egl.Escaped = 0 // the shared child's count is on the Vulkan result
	if ctx.Err() != nil {
		return vk, egl
	}
	var hung API
	if failure != nil && failure.Kind == ReasonTimeout {
		hung = APIEGL
		if _, ok := lines[APIVulkan]; !ok {
			hung = APIVulkan
		}
	}
	again := func(api API, ok bool) bool { return !ok && hung != api }
	redoVK, redoEGL := again(APIVulkan, vk.Report.clean()), again(APIEGL, egl.Report.clean())
	var wg sync.WaitGroup
	if redoVK {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shared := vk.Escaped
			vk = probeChild(ctx, o, vkReq, DecodeVulkanReport)
			vk.Escaped += shared
		}()
	}
	if redoEGL {
		wg.Add(1)
		go func() { defer wg.Done(); egl = probeChild(ctx, o, eglReq, DecodeEGLReport) }()
	}
	wg.Wait()
	return vk, egl
}

// clean says whether the Vulkan probe ended as a working driver's does:
// through all its stages, and no dispatch that failed. Anything else
// (which Evaluate may still accept: an unused adapter that failed) is run
// again in a child of its own (runProbes). What wgpu's rules or the
// inventory make of a clean report does not depend on the process it
// came from. A nil report is not clean.
func (r *VulkanReport) clean() bool {
	if r == nil || r.Stage != "" || r.Error != "" {
		return false
	}
	for _, a := range r.Adapters {
		if a.Dispatch != nil && !a.Dispatch.Verified {
			return false
		}
	}
	return true
}

// clean says whether the EGL probe ended as a working driver's does:
// through all its stages, and no device with an error (see
// VulkanReport.clean).
func (r *EGLReport) clean() bool {
	if r == nil || r.Stage != "" || r.Error != "" {
		return false
	}
	for _, d := range r.Devices {
		if d.Error != "" {
			return false
		}
	}
	return true
}

// probeChild runs one probe alone in a child and decodes its report.
func probeChild[T any](ctx context.Context, o *options, req ProbeRequest, decode func([]byte) (*T, error)) ProbeResult[T] {
	lines, res, failure := runChild(ctx, o, req)
	return decodeResult(req.API, lines, res, failure, decode)
}

// decodeResult makes api's ProbeResult from a child's report lines
// ("<api> <JSON>"), or from its failure when api's line is missing.
func decodeResult[T any](api API, lines map[API][]byte, res *child.Result, failure *Reason, decode func([]byte) (*T, error)) ProbeResult[T] {
	what := fmt.Sprintf("%s probe", api)
	out := ProbeResult[T]{}
	if res != nil {
		out.Output = child.OneLine(res.Output.String(), 2048)
		out.Escaped = res.Escaped
	}
	line, ok := lines[api]
	if !ok {
		if failure == nil {
			failure = &Reason{Kind: ReasonBadOutput, Message: "exited without printing a report" + res.Note()}
		}
		f := *failure
		f.Message = what + ": " + f.Message
		out.Failure = &f
		return out
	}
	rep, err := decode(line)
	if err != nil {
		out.Failure = &Reason{Kind: ReasonBadOutput, Message: fmt.Sprintf("%s printed a bad report: %v; report: %s", what, err, snippet(line))}
		return out
	}
	out.Report = rep
	return out
}

// ReadReport reads r until a line that starts with prefix, and returns that
// line without the prefix (found true), or EOF. It keeps at most 64 KiB of
// the other output (for messages) and reads a line into memory only up to
// 8 MiB, so a child that prints without newlines cannot exhaust memory.
// The in-container self-test reads its containers' output with it (the
// local probes report on a private pipe instead, see nodeprep/child).
func ReadReport(r io.Reader, prefix string) (report, other []byte, found bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			// A long line: the report can be long; gather it whole (to 8 MiB).
			var more []byte
			more, err = br.ReadSlice('\n')
			if len(line) < 8<<20 {
				line = append(append([]byte{}, line...), more...)
			}
		}
		if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok && (err == nil || len(rest) > 0) {
			return bytes.TrimSpace(bytes.Clone(rest)), other, true
		}
		if len(other) < 64<<10 {
			other = append(other, line[:min(len(line), 64<<10-len(other))]...)
		}
		if err != nil {
			return nil, other, false
		}
	}
}

// runChild runs a probe child for reqs (nodeprep/child: own process
// group, reports on a private pipe, bounded output, escaped descendants
// killed; the child is stopped as soon as every report is in, since its
// drivers' teardown is of no use) and returns its report lines by API,
// and, when it ended without all of them, the reason: timeout,
// cancelled (ctx ended: SIGTERM), crashed (a fatal signal, with the
// library the crash handler named), or bad output (an exit status). The
// child's output is in the result for every reason.
func runChild(ctx context.Context, o *options, reqs ...ProbeRequest) (map[API][]byte, *child.Result, *Reason) {
	args := append([]string{}, o.command[1:]...)
	for _, req := range reqs {
		reqJSON, err := json.Marshal(req)
		if err != nil {
			return nil, nil, &Reason{Kind: ReasonBadOutput, Message: err.Error()}
		}
		args = append(args, string(reqJSON))
	}
	res := child.Run(ctx, child.Spec{Path: o.command[0], Args: args, Env: probeEnv(o.env, o.cacheDir), Timeout: o.timeout, Reports: len(reqs), Grace: -1})
	o.log.Debug("probe child ended", "probes", len(reqs), "ms", ms(res.Duration), "ending", res.Ending, "escaped", res.Escaped, "output", res.Output.String())
	lines := map[API][]byte{}
	for _, r := range res.Reports {
		api, data, _ := bytes.Cut(r, []byte(" "))
		if _, dup := lines[API(api)]; !dup {
			lines[API(api)] = data
		}
	}
	if res.ReportTooLarge && res.Crash == nil {
		return nil, res, &Reason{Kind: ReasonBadOutput, Message: fmt.Sprintf("report too large: a probe report was longer than the %d MiB nodeprep reads (child.MaxReport); the child did not crash", child.MaxReport>>20)}
	}
	if len(lines) >= len(reqs) && res.Crash == nil {
		return lines, res, nil
	}
	msg := res.Describe(o.timeout) + res.Note()
	switch res.Ending {
	case child.EndTimeout, child.EndStuck:
		return lines, res, &Reason{Kind: ReasonTimeout, Message: msg + " (a hung driver, or a --timeout too short for it?)"}
	case child.EndCancelled:
		return lines, res, &Reason{Kind: ReasonCancelled, Message: msg}
	case child.EndSignaled:
		return lines, res, &Reason{Kind: ReasonCrashed, Message: res.Describe(o.timeout) + sigbusCause(res, o.cacheDir) + res.Note()}
	case child.EndExited:
		if res.ExitCode == 0 {
			msg = "exited without printing a report" + res.Note()
		}
	}
	return lines, res, &Reason{Kind: ReasonBadOutput, Message: msg}
}

// minCacheFree is the free space under the shader cache below which a
// SIGBUS is put down to a full file system.
const minCacheFree = 1 << 20

// sigbusCause names the likely cause of a probe's SIGBUS when the shader
// cache's file system is (nearly) full: the drivers grow their cache
// files and write them through shared mappings (Mesa's disk cache), and a
// page that cannot be allocated on a full file system (a tmpfs /run) is a
// SIGBUS, not an error return. It returns "" otherwise.
func sigbusCause(res *child.Result, cacheDir string) string {
	bus := res.Signal == syscall.SIGBUS || res.Crash != nil && res.Crash.Signal == "SIGBUS"
	if !bus || cacheDir == "" {
		return ""
	}
	var st syscall.Statfs_t
	if syscall.Statfs(cacheDir, &st) != nil {
		return ""
	}
	free := st.Bavail * uint64(st.Bsize)
	if free >= minCacheFree {
		return ""
	}
	return fmt.Sprintf(" (the shader cache's file system is full: %d KiB free under %s; a driver writing its cache through a mapping is killed by SIGBUS there: free space under /run or remove the cache)", free>>10, cacheDir)
}

// SignalName names a signal as the kernel headers do ("SIGSEGV"); unknown
// numbers give "signal N".
func SignalName(s syscall.Signal) string { return child.SignalName(s) }

// DecodeVulkanReport decodes a Vulkan probe child's report line (the
// JSON after ReportPrefix): one VulkanReport, no unknown fields, nothing
// after it, and a loader named.
func DecodeVulkanReport(line []byte) (*VulkanReport, error) {
	return decodeReport(line, "loader", func(r *VulkanReport) string { return r.Loader })
}

// DecodeEGLReport decodes an EGL probe child's report line like
// DecodeVulkanReport.
func DecodeEGLReport(line []byte) (*EGLReport, error) {
	return decodeReport(line, "library", func(r *EGLReport) string { return r.Library })
}

// decodeReport decodes a probe child's report line with decodeStrict and
// refuses a report whose field what (read by field) is empty.
func decodeReport[R any](line []byte, what string, field func(*R) string) (*R, error) {
	var r R
	if err := decodeStrict(line, &r); err != nil {
		return nil, err
	}
	if field(&r) == "" {
		return nil, errors.New("report has no " + what)
	}
	return &r, nil
}

func decodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding report: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decoding report: trailing data after the JSON value")
	}
	return nil
}

// ICDSearch returns where the Vulkan loader looks for driver manifests on
// Linux given an environment ("KEY=value" entries; the last entry of a key
// wins), following the loader's documentation (LoaderDriverInterface.md,
// "Driver Discovery on Linux"): VK_DRIVER_FILES, else the older
// VK_ICD_FILENAMES, replaces the search (name says which); otherwise
// $XDG_CONFIG_HOME, $XDG_CONFIG_DIRS, /etc, $XDG_DATA_HOME and
// $XDG_DATA_DIRS, each with vulkan/icd.d, plus VK_ADD_DRIVER_FILES first.
// A variable that is set but empty replaces the search too, with nothing:
// the loader then loads no driver (Debian 12's loader 1.3.239:
// vkCreateInstance returns VK_ERROR_INCOMPATIBLE_DRIVER with
// VK_DRIVER_FILES= and lavapipe installed), so paths is empty and name set.
func ICDSearch(env []string) (name string, paths []string) {
	get := envLookup(env)
	for _, v := range []string{"VK_DRIVER_FILES", "VK_ICD_FILENAMES"} {
		if envSet(env, v) {
			return v, splitList(get(v))
		}
	}
	paths = splitList(get("VK_ADD_DRIVER_FILES"))
	home := get("HOME")
	configHome := get("XDG_CONFIG_HOME")
	if configHome == "" && home != "" {
		configHome = filepath.Join(home, ".config")
	}
	dataHome := get("XDG_DATA_HOME")
	if dataHome == "" && home != "" {
		dataHome = filepath.Join(home, ".local/share")
	}
	configDirs := get("XDG_CONFIG_DIRS")
	if configDirs == "" {
		configDirs = "/etc/xdg"
	}
	dataDirs := get("XDG_DATA_DIRS")
	if dataDirs == "" {
		dataDirs = "/usr/local/share:/usr/share"
	}
	var dirs []string
	if configHome != "" {
		dirs = append(dirs, configHome)
	}
	dirs = append(dirs, splitList(configDirs)...)
	dirs = append(dirs, "/etc")
	if dataHome != "" {
		dirs = append(dirs, dataHome)
	}
	dirs = append(dirs, splitList(dataDirs)...)
	for _, d := range dirs {
		paths = append(paths, filepath.Join(d, "vulkan/icd.d"))
	}
	return "", paths
}

// EGLVendorSearch returns where libglvnd looks for EGL vendor manifests
// given an environment (libglvnd's EGL ICD loading docs):
// __EGL_VENDOR_LIBRARY_FILENAMES (files), else __EGL_VENDOR_LIBRARY_DIRS,
// else /etc/glvnd/egl_vendor.d and /usr/share/glvnd/egl_vendor.d.
func EGLVendorSearch(env []string) (name string, paths []string) {
	get := envLookup(env)
	for _, v := range []string{"__EGL_VENDOR_LIBRARY_FILENAMES", "__EGL_VENDOR_LIBRARY_DIRS"} {
		if s := get(v); s != "" {
			return v, splitList(s)
		}
	}
	return "", []string{"/etc/glvnd/egl_vendor.d", "/usr/share/glvnd/egl_vendor.d"}
}

func envLookup(env []string) func(string) string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

// envSet reports whether env ("KEY=value" entries) sets key, to any
// value, the empty one included.
func envSet(env []string, key string) bool {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == key {
			return true
		}
	}
	return false
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ":") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Err returns nil when the self-test passed; otherwise an error wrapping
// ErrFailed whose message lists the reasons, marked fault.ErrCheckFailed,
// or, when the Vulkan loader (or a required libEGL or libcuda) could not be opened,
// wrapping ErrLibraryNotFound and marked fault.ErrUnavailable.
func (r *Report) Err() error {
	if r.Passed {
		return nil
	}
	var msgs []string
	missing := false
	for _, x := range r.Reasons {
		msgs = append(msgs, x.Message)
		if x.Kind == ReasonLoaderNotFound || x.Kind == ReasonEGLNotFound || x.Kind == ReasonCUDANotFound {
			missing = true
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "no reason recorded")
	}
	if missing {
		// A required library that is unavailable is exit 69
		// (docs/exit-codes.md), not a failed check.
		return fault.Unavailable(fmt.Errorf("%w: %w: %s", ErrFailed, ErrLibraryNotFound, strings.Join(msgs, "; ")))
	}
	return fault.CheckFailed(fmt.Errorf("%w: %s", ErrFailed, strings.Join(msgs, "; ")))
}

// snippet is the last 300 bytes of b on one line.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	if s == "" {
		return "(none)"
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

// shaderCacheEnv keeps the drivers' shader disk caches out of $HOME: in
// cacheDir (nodeprep's own directory) when one is given, else off.
// Mesa: MESA_SHADER_CACHE_DIR / MESA_SHADER_CACHE_DISABLE; NVIDIA:
// __GL_SHADER_DISK_CACHE_PATH / __GL_SHADER_DISK_CACHE.
func shaderCacheEnv(cacheDir string) []string {
	if cacheDir == "" {
		return []string{"MESA_SHADER_CACHE_DISABLE=true", "__GL_SHADER_DISK_CACHE=0"}
	}
	return []string{"MESA_SHADER_CACHE_DIR=" + cacheDir, "__GL_SHADER_DISK_CACHE_PATH=" + cacheDir}
}

// loaderDebugEnv makes the Vulkan loader print its errors and warnings
// (VK_LOADER_DEBUG, Vulkan-Loader's LoaderDebugging.md) to the child's
// stderr, which nodeprep keeps (bounded) and quotes in a reason: "could
// not get 'vkCreateInstance' via 'vk_icdGetInstanceProcAddr'" says more
// than "no driver accepted the instance". A working loader prints nothing.
const loaderDebugEnv = "VK_LOADER_DEBUG=error,warn"

// mallocTunables are glibc's malloc settings for the probe children
// (glibc manual, "Memory Allocation Tunables"): the heap grows 16 MiB at
// a time (top_pad), allocations below 32 MiB come from it rather than from
// a mapping each (mmap_threshold), and the heap is madvised for
// transparent huge pages (hugetlb=1; used where THP is "madvise" or
// "always"). Drivers allocate tens of MiB at start-up (Mesa's lavapipe
// about 30 MiB in some 300 large callocs, the Vulkan loader 10 MiB more),
// and a 4 KiB page fault each is much of a probe's system time, more so in
// a virtual machine. On the 2-core development machine they take a third
// of the page faults and about a sixth of the time off a probe child
// (docs/faults.md, "Self-test speed"). They change how memory is laid out,
// not what any call returns; glibc ignores names it does not know.
const mallocTunables = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.top_pad=16777216"

// probeEnv is env plus shaderCacheEnv and loaderDebugEnv for the variables
// env does not set (the operator's own settings win), and mallocTunables
// before the operator's GLIBC_TUNABLES (glibc reads them in order, so the
// operator's own win too). A nil env stays nil (the child inherits
// nodeprep's environment).
func probeEnv(env []string, cacheDir string) []string {
	if env == nil {
		return nil
	}
	out := slices.Clone(env)
	for _, kv := range append(shaderCacheEnv(cacheDir), loaderDebugEnv) {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
			out = append(out, kv)
		}
	}
	const tunables = "GLIBC_TUNABLES="
	if i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, tunables) }); i >= 0 {
		if own := strings.TrimPrefix(out[i], tunables); own != "" {
			out[i] = tunables + mallocTunables + ":" + own
		} else {
			out[i] = tunables + mallocTunables
		}
	} else {
		out = append(out, tunables+mallocTunables)
	}
	return out
}
