package nodeprep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// ErrNoStatus is wrapped by ReadStatus's error when the status file does
// not exist: no `nodeprep up` has written it (since boot, for a file under
// /run, a tmpfs). That is not the same as "up has not run": an up that
// refuses before its first stage (a usage error, an output it could not
// write, a missing --rootfs, a held lock) changes no file, by design.
var ErrNoStatus = errors.New("no nodeprep up has written a status")

// ReadStatus reads the report in the status file statusFile (a host path):
// the last verdict of `up`, `health` or a re-patch, as they wrote it. It
// writes nothing and takes no lock: the writers replace the file by an
// atomic rename, so a reader sees one whole report. Errors: no such file
// (ErrNoStatus, marked fault.ErrUnavailable); a symlink whose target does
// not exist, named as such and not ErrNoStatus (up writes nothing through
// a link, so it refuses that path; marked fault.ErrUnavailable); a file
// over bounded.MaxStatus (16 MiB) or that is not a regular file (wrapping
// bounded.ErrTooLarge or bounded.ErrNotRegular), one that does not parse
// as a report (torn, or a field of the wrong type) or that carries no
// verdict, all marked fault.ErrMalformed; any other read error, marked
// fault.ErrUnavailable.
func ReadStatus(host *hostfs.Root, statusFile string) (*Report, error) {
	if statusFile == "" {
		return nil, fault.Usage(errors.New("no status file is configured"))
	}
	data, err := host.ReadFile(statusFile, bounded.MaxStatus)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if fi, lerr := host.Lstat(statusFile); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := host.Resolve(statusFile)
			return nil, fault.Unavailable(fmt.Errorf("%s is a dangling symlink (to %s, which does not exist): nodeprep up writes no status through a symlink (it exits 73): remove the link, then run nodeprep up", statusFile, target))
		}
		since := ""
		if strings.HasPrefix(statusFile, "/run/") {
			since = " since boot"
		}
		return nil, fault.Unavailable(fmt.Errorf("%s does not exist: %w%s", statusFile, ErrNoStatus, since))
	case errors.Is(err, bounded.ErrTooLarge), errors.Is(err, bounded.ErrNotRegular):
		return nil, fault.Malformed(err)
	case err != nil:
		return nil, fault.Unavailable(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil { // a torn file, or "expectedGPUs": 10
		return nil, fault.Malformed(fmt.Errorf("reading status %q: %w", statusFile, err))
	}
	if r.Verdict == "" {
		return nil, fault.Malformed(fmt.Errorf("reading status %q: it has no verdict", statusFile))
	}
	return &r, nil
}

// statusFiles are where a run's report goes: the status file and the
// Prometheus textfile, host paths under host ("" = none), and the clock
// that stamps the metrics.
type statusFiles struct {
	host    *hostfs.Root
	status  string
	metrics string
	now     func() time.Time
	// limit is the largest status file written, in bytes; 0 is
	// bounded.MaxStatus, what ReadStatus reads (tests set less).
	limit int64
}

// write writes the status file, then the metrics file when set, each
// atomically, so that what they say is the verdict reached: a write that
// fails makes a ready report not ready ("not ready: writing …"), and a
// file already written with "ready" is written again with that verdict.
// When the status file said ready and cannot be rewritten, it is removed
// (health then finds no baseline, so no one reads "ready" from it). Write
// errors are marked fault.ErrCantWrite; an encoding error (a bug) is
// returned as is.
func (f statusFiles) write(r *Report) error {
	serr := f.writeStatus(r)
	if serr != nil {
		notReady(r, serr)
	}
	merr := f.writeMetrics(r)
	if merr != nil && serr == nil && notReady(r, merr) {
		if err := f.writeStatus(r); err != nil {
			if rerr := f.host.RemoveFile(f.status); rerr != nil {
				merr = errors.Join(merr, fmt.Errorf("the status file still says ready: %w", rerr))
			}
		}
	}
	return errors.Join(serr, merr)
}

// notReady makes r not ready for err, an output that could not be
// written, when it was ready; it reports whether it was.
func notReady(r *Report, err error) bool {
	if r.stageErr == nil {
		r.stageErr = err
	}
	if !r.Ready {
		return false
	}
	// k3s.service requires nodeprep.service, which now fails: the node
	// does not join, whatever the stages said.
	r.Ready = false
	r.Verdict = "not ready: " + err.Error()
	return true
}

// writeStatus writes r to the status file, never more than its readers
// read (ReadStatus: bounded.MaxStatus), so that what `up` writes `health`
// can read: a report over that is written trimmed (trimmedStatus), and
// one still over it is refused (fault.ErrCantWrite) and the old status
// file removed, so that no reader takes an older verdict for this one.
func (f statusFiles) writeStatus(r *Report) error {
	if f.status == "" {
		return nil
	}
	limit := f.limit
	if limit == 0 {
		limit = bounded.MaxStatus
	}
	data, err := encodeStatus(r)
	if err != nil {
		return fmt.Errorf("encoding status %q: %w", f.status, err)
	}
	if size := int64(len(data)); size > limit {
		data, err = encodeStatus(trimmedStatus(r, size, limit))
		if err != nil {
			return fmt.Errorf("encoding status %q: %w", f.status, err)
		}
		if int64(len(data)) > limit {
			err := fmt.Errorf("writing status %q: the report takes %d bytes, %d trimmed, over the %d its readers read (bounded.MaxStatus)", f.status, size, len(data), limit)
			if rerr := f.host.RemoveFile(f.status); rerr != nil {
				err = errors.Join(err, fmt.Errorf("the old status file is left: %w", rerr))
			}
			return fault.CantWrite(err)
		}
	}
	return f.host.WriteFile(f.status, data, hostfs.WriteOptions{Mode: 0o644, MkdirAll: true})
}

// encodeStatus is the status file's bytes for r: indented JSON and a
// newline.
func encodeStatus(r *Report) ([]byte, error) {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// What trimmedStatus keeps of a report too large for the status file.
const (
	trimReasons   = 20      // reasons per stage
	trimText      = 4 << 10 // bytes of any one verdict, summary or reason
	trimFilePaths = 100     // entries of FilesChanged
)

// trimmedStatus is r as the status file keeps it when r encodes to size
// bytes, over limit: the verdict and everything health and a re-patch
// read back (ExpectedGPUs, the boot verdict, Ready, the inventory, each
// stage's name and status), each stage's summary and first trimReasons
// reasons (and one more saying how many were left out) and the first
// trimFilePaths files changed, each cut to trimText bytes; the stages'
// detailed results (CDI, Selftest, Container, Join) are left out.
// Trimmed says what was left out. r is not changed.
func trimmedStatus(r *Report, size, limit int64) *Report {
	t := *r
	t.CDI, t.Selftest, t.Container, t.Join = nil, nil, nil, nil
	t.Verdict = cut(t.Verdict)
	t.BootVerdict = cut(t.BootVerdict)
	left := []string{"the cdi, selftest, container and join results"}
	t.Stages = make([]StageResult, len(r.Stages))
	reasons := 0
	for i, s := range r.Stages {
		s.Summary = cut(s.Summary)
		n := len(s.Reasons)
		s.Reasons = slices.Clone(s.Reasons[:min(n, trimReasons)])
		for j := range s.Reasons {
			s.Reasons[j] = cut(s.Reasons[j])
		}
		if n > trimReasons {
			s.Reasons = append(s.Reasons, fmt.Sprintf("and %d more reasons, not kept in the status file", n-trimReasons))
			reasons += n - trimReasons
		}
		t.Stages[i] = s
	}
	if reasons > 0 {
		left = append(left, fmt.Sprintf("%d stage reasons past the first %d of a stage", reasons, trimReasons))
	}
	n := len(r.FilesChanged)
	t.FilesChanged = slices.Clone(r.FilesChanged[:min(n, trimFilePaths)])
	for i := range t.FilesChanged {
		t.FilesChanged[i] = cut(t.FilesChanged[i])
	}
	if n > trimFilePaths {
		left = append(left, fmt.Sprintf("%d files changed past the first %d", n-trimFilePaths, trimFilePaths))
	}
	t.Trimmed = fmt.Sprintf("the report took %d bytes, over the %d the status file's readers read: left out %s (the command's -o json output has them)", size, limit, strings.Join(left, ", "))
	return &t
}

// cut is s, or its first trimText bytes (at a character boundary) and
// "…" when it is longer.
func cut(s string) string {
	if len(s) <= trimText {
		return s
	}
	i := trimText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func (f statusFiles) writeMetrics(r *Report) error {
	if f.metrics == "" {
		return nil
	}
	data, err := Metrics(r, f.now())
	if err != nil {
		return fmt.Errorf("encoding metrics %q: %w", f.metrics, err)
	}
	return f.host.WriteFile(f.metrics, data, hostfs.WriteOptions{Mode: 0o644})
}

// Output is one file an up or health run writes, for CheckOutputs.
type Output struct {
	What string // "status file", "metrics file", "k3s drop-in"
	Path string // host path; "" for none
	// Name is the output's file name by default (StatusFileName,
	// MetricsFileName, the drop-in's name): what CheckOutputs suggests
	// when Path names a directory. "" for none.
	Name string
}

// The outputs' default file names: the status file's (its default is
// /run/nodeprep/status.json), and the metrics file's, as the NixOS
// module names it in node_exporter's textfile directory (the collector
// reads only *.prom files there).
const (
	StatusFileName  = "status.json"
	MetricsFileName = "nodeprep.prom"
)

// Outputs are the files Up writes whose paths are known before it runs:
// the status file, the metrics file and the k3s drop-in, each with its
// default name. Up refuses them (CheckOutputs) before anything runs; a
// caller that takes the host lock first, which creates /run/nodeprep/lock,
// checks them itself before, so that a refused run changes no file.
func (o UpOptions) Outputs() []Output {
	dropIn := o.Join.DropInPath()
	return append(statusOutputs(o.StatusFile, o.MetricsFile), Output{"k3s drop-in", dropIn, path.Base(dropIn)})
}

// Outputs are the files Health writes: the status and metrics files, as
// UpOptions.Outputs says them.
func (o HealthOptions) Outputs() []Output { return statusOutputs(o.StatusFile, o.MetricsFile) }

func statusOutputs(status, metrics string) []Output {
	return []Output{{"status file", status, StatusFileName}, {"metrics file", metrics, MetricsFileName}}
}

// CheckOutputs checks the output paths an up or health run is given before
// anything runs: each is a file path (not ending in "/", which names a
// directory; the error suggests the path with the output's own default
// name in it, so that following it for two outputs does not put them at
// one file) and no two are the same file, since two outputs at one path
// would leave one overwriting the other (status.json holding Prometheus
// text). Errors are marked fault.ErrUsage and name the paths.
func CheckOutputs(outputs ...Output) error {
	var errs []error
	seen := map[string]string{}
	for _, o := range outputs {
		if o.Path == "" {
			continue
		}
		if strings.HasSuffix(o.Path, "/") || path.Base(o.Path) == "." || path.Base(o.Path) == ".." {
			err := fmt.Errorf("%s %q names a directory: want a file path", o.What, o.Path)
			if o.Name != "" {
				err = fmt.Errorf("%w, such as %s", err, path.Join(path.Clean(o.Path), o.Name))
			}
			errs = append(errs, err)
			continue
		}
		c := path.Clean(o.Path)
		if other, ok := seen[c]; ok {
			errs = append(errs, fmt.Errorf("%s and %s are both %s: two outputs cannot share one file", other, o.What, c))
			continue
		}
		seen[c] = o.What
	}
	return fault.Usage(errors.Join(errs...))
}

// Metrics renders the report in the Prometheus text format (version
// 0.0.4) for node_exporter's textfile collector: gauges only, each family
// with HELP and TYPE, families sorted by name, samples by label.
//
//	nodeprep_gpus                                GPUs in the inventory
//	nodeprep_gpus_healthy                        healthy GPUs
//	nodeprep_last_run_timestamp_seconds          when the run ended (Unix time)
//	nodeprep_ready                               1 ready, 0 not (tainted counts as ready)
//	nodeprep_selftest_adapters_matched           GPUs matched to a working Vulkan adapter
//	nodeprep_selftest_cuda_matched               GPUs matched to a CUDA device that passed the CUDA probe
//	nodeprep_selftest_gpu_cuda_ok{uuid}          1 when that GPU's CUDA device passed, 0 when not (or not probed)
//	nodeprep_stage_duration_seconds{stage}       each stage's wall time
//	nodeprep_stage_ok{stage}                     1 ok or warning, 0 failed or skipped
//	                                             (and 0 for a self-test that failed under policy taint)
//	nodeprep_tainted                             1 when joined with the unhealthy taint
//
// The encoder is ours (writeGauges), not prometheus/common's expfmt: expfmt
// links the protobuf runtime and a YAML library whose package init every
// nodeprep process pays, the self-test's probe children included; a test
// checks the bytes equal expfmt's.
func Metrics(r *Report, now time.Time) ([]byte, error) {
	gpus, healthy := 0, 0
	if r.Inventory != nil {
		gpus, healthy = len(r.Inventory.GPUs), len(r.Inventory.Healthy())
	}
	stages := slices.Clone(r.Stages)
	slices.SortFunc(stages, func(a, b StageResult) int { return strings.Compare(a.Name, b.Name) })
	var dur, ok []sample
	for _, s := range stages {
		// Whole microseconds: ms/1000 in binary floating point reads
		// 0.018881000000000002 where the stage took 18.881 ms.
		dur = append(dur, sample{stage: s.Name, value: math.Round(s.DurationMS*1000) / 1e6})
		passed := s.Status == StatusOK || s.Status == StatusWarning
		if s.Name == StageSelftest && r.Tainted {
			passed = false // it failed; policy taint only let the node join
		}
		ok = append(ok, sample{stage: s.Name, value: b2f(passed)})
	}
	one := func(v float64) []sample { return []sample{{value: v}} }
	families := []gaugeFamily{ // sorted by name
		{"nodeprep_gpus", "GPUs NVML reports.", one(float64(gpus))},
		{"nodeprep_gpus_healthy", "GPUs NVML reports healthy.", one(float64(healthy))},
		{"nodeprep_last_run_timestamp_seconds", "Unix time the last nodeprep up ended.", one(float64(now.Unix()))},
		{"nodeprep_ready", "1 when the last nodeprep up declared the node ready to join.", one(b2f(r.Ready))},
		{"nodeprep_selftest_adapters_matched", "GPUs matched by UUID to a Vulkan adapter whose compute dispatch verified.", one(float64(vulkanMatched(r.Selftest)))},
		{"nodeprep_selftest_cuda_matched", "GPUs matched by UUID to a CUDA device whose memory round trip and PTX kernel verified.", one(float64(cudaMatched(r.Selftest)))},
		{"nodeprep_selftest_gpu_cuda_ok", "1 when the GPU's CUDA device (by UUID) passed the CUDA probe in the last run; 0 when it failed or was not probed.", cudaPerGPU(r)},
		{"nodeprep_stage_duration_seconds", "Wall time of each stage of the last nodeprep up.", dur},
		{"nodeprep_stage_ok", "1 when the stage passed (ok or warning) in the last nodeprep up; 0 when it failed or was skipped, and for a self-test that failed under policy taint.", ok},
		{"nodeprep_tainted", "1 when the node joined with the nodeprep.dev/gpu-unhealthy taint.", one(b2f(r.Tainted))},
	}
	var buf bytes.Buffer
	writeGauges(&buf, families)
	return buf.Bytes(), nil
}

// MetricLabels are the metric families Metrics writes, each with its label
// names: what a KEDA trigger or an alert may query (cluster check judges
// triggers against it). A test keeps it equal to Metrics' output.
var MetricLabels = map[string][]string{
	"nodeprep_gpus":                       nil,
	"nodeprep_gpus_healthy":               nil,
	"nodeprep_last_run_timestamp_seconds": nil,
	"nodeprep_ready":                      nil,
	"nodeprep_selftest_adapters_matched":  nil,
	"nodeprep_selftest_cuda_matched":      nil,
	"nodeprep_selftest_gpu_cuda_ok":       {"uuid"},
	"nodeprep_stage_duration_seconds":     {"stage"},
	"nodeprep_stage_ok":                   {"stage"},
	"nodeprep_tainted":                    nil,
}

// gaugeFamily is one metric family of gauges.
type gaugeFamily struct {
	name, help string
	samples    []sample
}

// sample is one gauge value, with a stage label when stage is set, or a
// uuid label when uuid is.
type sample struct {
	stage string
	uuid  string
	value float64
}

// cudaPerGPU is one sample per inventory GPU, labelled with its UUID, in
// inventory order: 1 when its CUDA device passed (selftest.Match.CUDA).
func cudaPerGPU(r *Report) []sample {
	if r.Inventory == nil {
		return nil
	}
	var out []sample
	for _, g := range r.Inventory.GPUs {
		ok := false
		if r.Selftest != nil {
			for _, m := range r.Selftest.Matches {
				ok = ok || m.UUID == g.UUID && m.CUDA
			}
		}
		out = append(out, sample{uuid: g.UUID, value: b2f(ok)})
	}
	slices.SortFunc(out, func(a, b sample) int { return strings.Compare(a.uuid, b.uuid) })
	return out
}

// writeGauges writes families in the Prometheus text exposition format
// (prometheus docs, "Exposition formats", text format 0.0.4): "# HELP"
// with '\\' and newline escaped, "# TYPE name gauge", one line per sample
// with label values escaped ('\\', '"', newline) and the value as
// formatValue writes it. A family with no sample is left out, as expfmt
// leaves it out.
func writeGauges(buf *bytes.Buffer, families []gaugeFamily) {
	help := strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	label := strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	for _, f := range families {
		if len(f.samples) == 0 {
			continue
		}
		fmt.Fprintf(buf, "# HELP %s %s\n# TYPE %s gauge\n", f.name, help.Replace(f.help), f.name)
		for _, s := range f.samples {
			buf.WriteString(f.name)
			if s.stage != "" {
				buf.WriteString(`{stage="`)
				buf.WriteString(label.Replace(s.stage))
				buf.WriteString(`"}`)
			} else if s.uuid != "" {
				buf.WriteString(`{uuid="`)
				buf.WriteString(label.Replace(s.uuid))
				buf.WriteString(`"}`)
			}
			buf.WriteByte(' ')
			buf.WriteString(formatValue(s.value))
			buf.WriteByte('\n')
		}
	}
}

// formatValue writes a sample value as the text format allows (any form
// Go's ParseFloat reads, +Inf, -Inf, NaN): a whole number below 2^53 in
// plain digits (a Unix timestamp reads 1796153420, not expfmt's
// 1.79615342e+09, which looks like a 10-second resolution), 0 for -0
// too, else Go's shortest 'g' form (0.018881, 1e+20).
func formatValue(v float64) string {
	switch {
	case v == 0: // -0 too
		return "0"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
