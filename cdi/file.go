package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	udiff "github.com/aymanbagabas/go-udiff"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultSpecPath is the host path of the spec nvidia-ctk generates on NixOS
// (nvidia-container-toolkit-cdi-generator.service).
const DefaultSpecPath = "/var/run/cdi/nvidia-container-toolkit.json"

// FileOptions name the spec file and where the graphics files are.
type FileOptions struct {
	// Spec is the host path of the spec (DefaultSpecPath).
	Spec string
	// SpecDirs are the runtime's CDI spec directories (host paths, lowest
	// priority first; containerd's cdi_spec_dirs); empty means the CDI
	// library's defaults. Only the specset package reads them.
	SpecDirs []string
	Discover DiscoverOptions // where to look for the graphics files
	// Expect are the devices the patched spec must serve (from the
	// inventory); PatchFile writes nothing when one is missing.
	Expect []ExpectedDevice
}

// PatchResult is what PatchFile did.
type PatchResult struct {
	Spec string `json:"spec" yaml:"spec"` // host path of the spec
	// Changed is true when the spec needed edits; Written when they were
	// written (false for a dry run).
	Changed  bool     `json:"changed" yaml:"changed"`
	Written  bool     `json:"written" yaml:"written"`   // see Changed
	Changes  []Change `json:"changes" yaml:"changes"`   // the edits made (or, unwritten, that would be made)
	Findings Findings `json:"findings" yaml:"findings"` // problems found, errors first; an error means nothing was written
	// Diff is a unified diff of the file, empty when unchanged.
	Diff     string    `json:"diff,omitempty" yaml:"diff,omitempty"`
	Graphics *Graphics `json:"graphics" yaml:"graphics"` // what Discover found
	// Related are the other GPU specs the runtime serves (package
	// specset), each patched the same way; their findings are in
	// Findings too, prefixed with their path.
	Related []*PatchResult `json:"related,omitempty" yaml:"related,omitempty"`
	// Skipped are the GPU specs the runtime serves that nodeprep leaves
	// as they are, each with the reason (package specset).
	Skipped []SkippedSpec `json:"notPatched,omitempty" yaml:"notPatched,omitempty"`

	file fs.FileInfo // the file ApplyPatch wrote, as it was renamed into place
}

// File returns the Stat of the spec file ApplyPatch wrote, taken before
// its rename (hostfs.WriteOptions.Written), or nil when it wrote none.
func (r *PatchResult) File() fs.FileInfo { return r.file }

// CheckResult is what CheckFile found.
type CheckResult struct {
	Spec     string    `json:"spec" yaml:"spec"`         // host path of the spec
	Findings Findings  `json:"findings" yaml:"findings"` // one per problem, errors first
	Graphics *Graphics `json:"graphics" yaml:"graphics"` // what Discover found
	// Related are the other GPU specs the runtime serves (package
	// specset), each checked the same way; their findings are in Findings
	// too, prefixed with their path.
	Related []*CheckResult `json:"related,omitempty" yaml:"related,omitempty"`
	// Skipped are the GPU specs the runtime serves that nodeprep neither
	// patches nor checks, each with the reason (package specset).
	Skipped []SkippedSpec `json:"notPatched,omitempty" yaml:"notPatched,omitempty"`
}

// SkippedSpec is a GPU spec in the runtime's view that nodeprep leaves as
// it is on purpose, such as a DRA driver's per-claim spec (its devices come
// with the base spec's, which is patched) or a VFIO passthrough spec (no
// NVIDIA driver runs in the container): `cdi check` and `cdi patch` name it
// with the reason.
type SkippedSpec struct {
	Spec   string `json:"spec" yaml:"spec"`     // host path
	Kind   string `json:"kind" yaml:"kind"`     // vendor/class
	Reason string `json:"reason" yaml:"reason"` // why it is left as it is
}

// nameFindings warns about a spec file name the CDI library's directory
// scan skips (pkg/cdi spec-dirs.go: only ".json" and ".yaml").
func nameFindings(specPath string) Findings {
	if ext := path.Ext(specPath); ext != ".json" && ext != ".yaml" {
		return Findings{warnf(CodeSpecName, "%s ends in %q: container runtimes load only *.json and *.yaml from a CDI spec directory", specPath, ext)}
	}
	return nil
}

// Load reads and parses the spec at a host path. A missing file is an error
// marked fault.ErrUnavailable (the generator has not run); one that does not
// parse, is larger than bounded.MaxCDISpec (64 MiB) or is not a regular
// file, fault.ErrMalformed naming the file and the complaint (and, for one
// that does not parse, that regenerating it is the way out).
func Load(host *hostfs.Root, specPath string) ([]byte, *specs.Spec, error) {
	data, err := readSpec(host, specPath)
	if err != nil {
		return nil, nil, err
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return nil, nil, fault.Malformed(fmt.Errorf("reading CDI spec %q: %w; %s", specPath, err, regenerate))
	}
	return data, spec, nil
}

// regenerate is the way to a spec only its generator can make right (one
// that does not parse, a device with no edits): write it again.
const regenerate = "regenerate the spec (nvidia-container-toolkit-cdi-generator.service on NixOS, nvidia-ctk cdi generate elsewhere)"

// readSpec reads the spec file's bytes with Load's errors.
func readSpec(host *hostfs.Root, specPath string) ([]byte, error) {
	if st, err := host.Stat(specPath); err == nil && st.Mode().IsRegular() && st.Size() > bounded.MaxCDISpec {
		return nil, fault.Malformed(fmt.Errorf("reading CDI spec %q: %d bytes: larger than the %d MiB a CDI spec may have (bounded.MaxCDISpec)", specPath, st.Size(), bounded.MaxCDISpec>>20))
	}
	data, err := host.ReadFile(specPath, bounded.MaxCDISpec)
	if errors.Is(err, bounded.ErrNotRegular) || errors.Is(err, bounded.ErrTooLarge) {
		return nil, fault.Malformed(fmt.Errorf("reading CDI spec %q: %w", specPath, err))
	}
	if st, lerr := host.Lstat(specPath); errors.Is(err, fs.ErrNotExist) && lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
		target, rerr := host.Resolve(specPath)
		if rerr != nil {
			target = rerr.Error()
		}
		return nil, fault.Unavailable(fmt.Errorf("reading CDI spec %q: it is a dangling link to %s: %w", specPath, target, err))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fault.Unavailable(fmt.Errorf("reading CDI spec %q: %w (the generator has not run yet: nvidia-container-toolkit-cdi-generator.service on NixOS, nvidia-ctk cdi generate elsewhere)", specPath, err))
	}
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("reading CDI spec %q: %w", specPath, err))
	}
	return data, nil
}

// PatchPlan is a patch read, edited, validated and encoded but not yet
// written: PlanPatch makes it, ApplyPatch writes it. Between the two the
// caller may validate the inputs of later stages, so that nothing is written
// when any of them is bad.
type PatchPlan struct {
	// Result is what the patch found and would change; ApplyPatch sets
	// its Written.
	Result *PatchResult
	data   []byte // the patched spec's bytes; nil when nothing is to be written
	// read is the identity of the file the plan was made from, taken
	// before it was read: ApplyPatch writes only over that same file.
	read fileIdentity
}

// ErrSpecChanged is returned (wrapped, with the file named) by ApplyPatch
// when the spec on disk is no longer the file the plan was made from:
// another writer (the device plugin, the DRA driver, the generator)
// replaced or rewrote it in between. Nothing is written; the caller plans
// again from the new file. nodeprep never renames a patch of an old spec
// over a writer's newer one.
var ErrSpecChanged = errors.New("the CDI spec changed since it was read")

// fileIdentity is what tells one version of a file from the next: its
// inode (an atomic rename brings a new one) and its size and modification
// time (an in-place write changes them).
type fileIdentity struct {
	dev, ino uint64
	size     int64
	mtime    int64 // ns
	ok       bool  // false: the file could not be stat'ed
}

// identify returns the identity of the file at a host path (links
// followed under the root), ok false when it cannot be stat'ed.
func identify(host *hostfs.Root, specPath string) fileIdentity {
	st, err := host.Stat(specPath)
	if err != nil {
		return fileIdentity{}
	}
	id := fileIdentity{size: st.Size(), mtime: st.ModTime().UnixNano(), ok: true}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(sys.Dev), sys.Ino //nolint:unconvert // Dev is uint64 on amd64, not everywhere
	}
	return id
}

// Writes reports whether ApplyPatch would write the spec: it changed and no
// error finding blocks it.
func (p *PatchPlan) Writes() bool { return p.data != nil }

// PlanPatch does everything PatchFile does except the write: it reads the
// spec, discovers the graphics files, edits, lints, encodes and validates
// the result with the CDI library (in memory: nothing is written anywhere,
// not even a temporary file). Errors are PatchFile's, less the write's.
func PlanPatch(host *hostfs.Root, opts FileOptions) (*PatchPlan, error) {
	read := identify(host, opts.Spec)
	old, spec, err := Load(host, opts.Spec)
	if err != nil {
		return nil, err
	}
	if empty := EmptyEditDevices(spec); len(empty) > 0 {
		return nil, fault.Malformed(fmt.Errorf("patching CDI spec %q: device %s has no container edits; nodeprep never writes such a device: %s, or give the device a device node or mount", opts.Spec, strings.Join(empty, ", "), regenerate))
	}
	g, err := Discover(host, opts.Discover)
	if err != nil {
		return nil, err
	}
	changes, findings := Patch(spec, g, host)
	// Whatever `cdi check` would call an error in the result blocks the
	// write: host paths that do not exist, duplicate container paths, and
	// devices the consumer will ask for.
	findings = append(findings, g.Findings...)
	findings = append(findings, Lint(spec, host)...)
	findings = append(findings, CheckDevices(spec, opts.Expect)...)
	findings = append(findings, CheckMIGCaps(spec, host, opts.Expect)...)
	findings = append(findings, ProfileHookFindings(spec)...)
	findings = append(findings, nameFindings(opts.Spec)...)
	if changes == nil {
		changes = []Change{} // [] in JSON, not null
	}
	res := &PatchResult{Spec: opts.Spec, Changes: changes, Findings: findings.sorted(), Graphics: g}
	plan := &PatchPlan{Result: res, read: read}
	if len(changes) == 0 {
		return plan, nil // nothing to write, whatever the findings say
	}
	if err := checkUTF8(old); err != nil {
		return nil, fault.Malformed(fmt.Errorf("patching CDI spec %q: %w", opts.Spec, err))
	}
	// A big spec is held at most twice at a time: the old bytes go once
	// parsed, the spec once validated and encoded, and the old bytes come
	// back from the file for the comparison and the diff.
	size := len(old)
	// For a big spec, collect where what is live shrinks (the old bytes
	// dead after the parse, the spec after the encoding): the collector
	// would otherwise let the heap grow to twice what was live when it last
	// ran, halfway through the parse or the encoding, and peak RSS would be
	// 4.5 times the file instead of under 4 (BenchmarkPatchFileHuge,
	// scripts/bench-cdi.sh).
	collect := func() {
		if size > bigDiff {
			runtime.GC()
		}
	}
	collect()
	if err := ValidateSpec(spec); err != nil {
		return nil, invalidResult(opts.Spec, err)
	}
	format := FormatOf(opts.Spec)
	data, err := encodeSized(spec, format, size+64<<10)
	if err != nil {
		return nil, fmt.Errorf("encoding CDI spec %q: %w", opts.Spec, err)
	}
	collect()
	if old, err = readSpec(host, opts.Spec); err != nil {
		return nil, err
	}
	if bytes.Equal(data, old) {
		return plan, nil
	}
	res.Changed = true
	res.Diff = unifiedDiff("a"+opts.Spec, "b"+opts.Spec, old, data)
	if res.Findings.Errors() == 0 {
		plan.data = data
	}
	return plan, nil
}

// checkUTF8 refuses a spec that is not UTF-8 (a value such as
// containerEdits.env "NODEPREP_BAD=\xff\xfe\xc3"): JSON and YAML text is
// UTF-8 (RFC 8259 section 8.1, YAML 1.2 section 5.2), the decoders turn
// each bad byte into U+FFFD, and writing the patched spec would change a
// value nodeprep does not own without saying so. The error names the line,
// the column and the string the first bad byte is in, escaped.
func checkUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	at := 0
	for at < len(data) {
		r, n := utf8.DecodeRune(data[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	line := 1 + bytes.Count(data[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(data[:at], '\n')
	// The quoted string (or line) the byte is in, at most 80 bytes a side.
	start := max(bytes.LastIndexAny(data[:at], "\"\n")+1, at-80)
	end := at + 80
	if i := bytes.IndexAny(data[at:], "\"\n"); i >= 0 && at+i < end {
		end = at + i
	}
	end = min(end, len(data))
	return fmt.Errorf("byte 0x%02x at line %d, column %d is not UTF-8 (in %s): written back it would become U+FFFD, changing a value nodeprep does not patch, so nothing was written; a CDI spec is UTF-8 text (JSON: RFC 8259; YAML 1.2)", data[at], line, col, strconv.QuoteToASCII(string(data[start:end])))
}

// bigDiff is the file size above which unifiedDiff diffs only the changed
// region.
const bigDiff = 1 << 20

// unifiedDiff returns a unified diff of old and new. Up to bigDiff it is
// go-udiff's line diff. Above, go-udiff would split both files into lines
// and hold them (about 4 times a 50 MB spec), so the one region between
// what both files share at the start and at the end (whole lines) is
// printed as one hunk with 3 lines of context, as udiff prints one edit.
// A patch changes one region of a big spec (the spec-level mounts), and
// cdiVersion near the top when it raises it: then the hunk spans both.
func unifiedDiff(oldLabel, newLabel string, old, new []byte) string {
	if len(old) <= bigDiff && len(new) <= bigDiff {
		return udiff.Unified(oldLabel, newLabel, string(old), string(new))
	}
	if bytes.Equal(old, new) {
		return ""
	}
	const context = udiff.DefaultContextLines
	prefix := 0
	for prefix < len(old) && prefix < len(new) && old[prefix] == new[prefix] {
		prefix++
	}
	prefix = bytes.LastIndexByte(old[:prefix], '\n') + 1 // back to a line start
	suffix := 0
	for suffix < len(old)-prefix && suffix < len(new)-prefix && old[len(old)-1-suffix] == new[len(new)-1-suffix] {
		suffix++
	}
	// Shorten the shared tail until it starts a line in both files.
	lineStart := func(b []byte, i int) bool { return i == 0 || b[i-1] == '\n' }
	for suffix > 0 && !(lineStart(old, len(old)-suffix) && lineStart(new, len(new)-suffix)) {
		suffix--
	}
	lines := func(b []byte) []string {
		if len(b) == 0 {
			return nil
		}
		return strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	// Context: up to 3 whole lines before and after the changed region.
	start := prefix
	for n := 0; n < context && start > 0; n++ {
		start = bytes.LastIndexByte(old[:start-1], '\n') + 1
	}
	before := lines(old[start:prefix])
	endOld := len(old) - suffix
	end := endOld
	for n := 0; n < context && end < len(old); n++ {
		if i := bytes.IndexByte(old[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(old)
		}
	}
	after := lines(old[endOld:end])
	removed := lines(old[prefix:endOld])
	added := lines(new[prefix : len(new)-suffix])
	first := bytes.Count(old[:start], []byte("\n")) + 1
	span := func(n int) string {
		if n == 1 {
			return fmt.Sprint(first)
		}
		return fmt.Sprintf("%d,%d", first, n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s\n+++ %s\n@@ -%s +%s @@\n", oldLabel, newLabel,
		span(len(before)+len(removed)+len(after)), span(len(before)+len(added)+len(after)))
	for _, group := range []struct {
		mark  string
		lines []string
	}{{" ", before}, {"-", removed}, {"+", added}, {" ", after}} {
		for _, l := range group.lines {
			b.WriteString(group.mark)
			b.WriteString(l)
			if !strings.HasSuffix(l, "\n") {
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

func invalidResult(spec string, err error) error {
	return fault.Malformed(fmt.Errorf("patching CDI spec %q: the spec is not valid even with the patch, so nothing was written (the CDI library says: %w)", spec, err))
}

// ApplyPatch writes a plan's spec when it has one to write (Writes):
// atomically, keeping the file's mode. The bytes are those PlanPatch had
// the CDI library validate, so they are not validated twice (a 50 MB spec
// takes seconds). Just before the write it checks that the file is still
// the one the plan read (same inode, size and modification time); when
// another writer replaced it meanwhile it writes nothing and returns
// ErrSpecChanged. The check and the rename are not one atomic step: a
// writer's rename in the microseconds between them is overwritten, and the
// next event (the watch, the path unit) patches the spec again. Errors: a
// failed write → fault.ErrCantWrite (the old file intact); ErrSpecChanged.
func ApplyPatch(host *hostfs.Root, p *PatchPlan) error {
	if p.data == nil {
		return nil
	}
	if now := identify(host, p.Result.Spec); now != p.read || !now.ok {
		return fmt.Errorf("patching CDI spec %q: %w: nothing written", p.Result.Spec, ErrSpecChanged)
	}
	if err := host.WriteFile(p.Result.Spec, p.data, hostfs.WriteOptions{Written: func(fi fs.FileInfo) { p.Result.file = fi }}); err != nil {
		return err
	}
	p.Result.Written = true
	return nil
}

// PatchFile patches the spec file in place (see Patch): PlanPatch, then,
// unless dryRun, ApplyPatch. When nothing needs to change it writes nothing
// (a second run changes no byte). It is all or nothing: when any problem
// could not be fixed (an error finding, such as no ICD manifest on the
// host) it writes nothing either, and the caller reports the findings.
//
// Errors: those of Load and Discover; a device with no container edits, or a
// result the CDI library refuses → fault.ErrMalformed (nothing written);
// a failed write → fault.ErrCantWrite (the old file intact).
func PatchFile(host *hostfs.Root, opts FileOptions, dryRun bool) (*PatchResult, error) {
	p, err := PlanThenApply(host, opts, dryRun, PlanPatch, ApplyPatch)
	if err != nil {
		return nil, err
	}
	return p.Result, nil
}

// PlanThenApply is the order of every patch command: plan the patch with
// plan (which writes nothing), then, unless dryRun, write the plan with
// apply. PatchFile runs it over one spec file and specset.Patch over the
// runtime's whole view. It returns the plan, written unless dryRun.
// Errors: plan's, then apply's.
func PlanThenApply[P any](host *hostfs.Root, opts FileOptions, dryRun bool, plan func(*hostfs.Root, FileOptions) (P, error), apply func(*hostfs.Root, P) error) (P, error) {
	p, err := plan(host, opts)
	if err == nil && !dryRun {
		err = apply(host, p)
	}
	return p, err
}

// explained reports whether findings already name what the CDI library
// refuses a spec for: a cdiVersion lower than its fields need, or a device
// with no container edits (the library's two complaints nodeprep's own
// lint names more precisely). One fault is then one finding.
func explained(findings Findings) bool {
	for _, f := range findings {
		if f.Code == CodeVersionTooLow || f.Code == CodeDeviceNoEdits {
			return true
		}
	}
	return false
}

// CheckPatchedFile is CheckFile on the spec as PlanPatch would make it:
// the file read, patched in memory (Patch, with g, the graphics files
// CheckFile discovered), checked (Check) and validated with the CDI
// library in memory (ValidateSpec), as CheckFile checks and validates the
// file. It writes nothing. It returns the result and the changes the patch
// made. Errors are Load's.
func CheckPatchedFile(host *hostfs.Root, opts FileOptions, g *Graphics) (*CheckResult, []Change, error) {
	_, spec, err := Load(host, opts.Spec)
	if err != nil {
		return nil, nil, err
	}
	changes, _ := Patch(spec, g, host)
	findings := append(Check(spec, g, host, opts.Expect), nameFindings(opts.Spec)...)
	if err := ValidateSpec(spec); err != nil && !explained(findings) {
		findings = append(findings, errorf(CodeInvalidSpec, "the CDI library refuses %s: %v", opts.Spec, err))
	}
	return &CheckResult{Spec: opts.Spec, Findings: findings.sorted(), Graphics: g}, changes, nil
}

// CheckFile lints the spec file (see Check) against opts.Expect and also
// runs the CDI library's own validation, reporting its complaint as an
// invalid-spec finding. It writes nothing. Errors are those of Load and
// Discover.
func CheckFile(host *hostfs.Root, opts FileOptions) (*CheckResult, error) {
	_, spec, err := Load(host, opts.Spec)
	if err != nil {
		return nil, err
	}
	g, err := Discover(host, opts.Discover)
	if err != nil {
		return nil, err
	}
	findings := append(Check(spec, g, host, opts.Expect), nameFindings(opts.Spec)...)
	p, err := host.Path(opts.Spec)
	if err == nil {
		err = ValidateFile(p)
	}
	if err != nil && !explained(findings) {
		findings = append(findings, errorf(CodeInvalidSpec, "the CDI library refuses %s: %v", opts.Spec, err))
	}
	return &CheckResult{Spec: opts.Spec, Findings: findings.sorted(), Graphics: g}, nil
}
