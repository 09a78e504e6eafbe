package specset

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// expects reports whether a spec of this kind must serve the inventory's
// device names: the generator's nvidia.com/gpu and the device plugin's
// k8s.device-plugin.nvidia.com/gpu name one device per GPU (by its
// deviceIDStrategy); sibling classes such as nvidia.com/gpu.coherent name
// their own.
func expects(s Spec) bool {
	return s.Role == RoleNamed || s.Kind == "nvidia.com/gpu" || s.Kind == PluginVendor+"/gpu"
}

// expectFor returns the devices spec s is checked for: none unless its
// kind names one device per GPU (expects); else each expected name it
// declares, and each one that no spec of its kind in the view declares,
// the latter on the first such spec only (the named one first), so a
// missing name is one finding. The CDI library resolves a name against
// every spec of its kind in every directory (pkg/cdi Cache), so a name
// another spec of the kind serves (a stale /etc/cdi copy with the UUID
// names) is served, and saying "not in the spec … unresolvable" would be
// wrong.
func (v *View) expectFor(s Spec, expect []cdi.ExpectedDevice) []cdi.ExpectedDevice {
	if !expects(s) || len(expect) == 0 {
		return nil
	}
	if s.Kind == "" { // the named spec, refused or absent: its own load reports it
		return expect
	}
	served := map[string]bool{}
	first := ""
	for _, o := range v.Specs {
		if o.Kind != s.Kind || !expects(o) {
			continue
		}
		if first == "" {
			first = o.Path
		}
		for _, d := range o.Devices {
			served[d] = true
		}
	}
	var out []cdi.ExpectedDevice
	for _, e := range expect {
		if slices.Contains(s.Devices, e.Name) || (!served[e.Name] && s.Path == first) {
			out = append(out, e)
		}
	}
	return out
}

// AllDevice is the device name that asks for every GPU (nvidia-ctk cdi
// generate writes it unless --no-all-device): docker and podman users and
// the NixOS manual ask for nvidia.com/gpu=all.
const AllDevice = "all"

// allDeviceFindings judges nvidia.com/gpu=all as its consumers ask for it,
// outside Kubernetes: `docker run --device nvidia.com/gpu=all`, `podman
// run --device nvidia.com/gpu=all`, the NixOS manual's examples. No spec
// of kind nvidia.com/gpu in the view declaring it (a spec generated with
// --no-all-device) is a warning, as is an all device whose edits lack an
// expected GPU's device node: they get fewer GPUs, or "unresolvable CDI
// devices". Pods through the device plugin ask for per-GPU names and are
// unaffected, hence warnings. Nothing when the view has no nvidia.com/gpu
// spec.
func (v *View) allDeviceFindings(expect []cdi.ExpectedDevice) cdi.Findings {
	const kind = "nvidia.com/gpu"
	var owner *specs.Spec
	var ownerPath string
	found := false
	for _, s := range v.Specs {
		if s.Kind != kind {
			continue
		}
		found = true
		if slices.Contains(s.Devices, AllDevice) && owner == nil {
			owner, ownerPath = v.loaded[s.Path], s.Path
		}
	}
	if !found {
		return nil
	}
	if owner == nil {
		return cdi.Findings{{Severity: cdi.SeverityWarning, Code: cdi.CodeMissingAllDevice,
			Message: fmt.Sprintf("%s=%s is in no spec (generated with --no-all-device?): `docker run --device %s=%s`, podman's and the NixOS manual's examples fail with \"unresolvable CDI devices\" (pods through the device plugin ask for each GPU's name and are unaffected); generate the spec without --no-all-device", kind, AllDevice, kind, AllDevice)}}
	}
	var nodes []string
	for _, d := range owner.Devices {
		if d.Name != AllDevice {
			continue
		}
		for _, dn := range append(slices.Clone(d.ContainerEdits.DeviceNodes), owner.ContainerEdits.DeviceNodes...) {
			nodes = append(nodes, dn.Path)
		}
	}
	var missing []string
	for _, e := range expect {
		for _, n := range e.DeviceNodes {
			if !slices.Contains(nodes, n) && !slices.Contains(missing, n) {
				missing = append(missing, n)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return cdi.Findings{{Severity: cdi.SeverityWarning, Code: cdi.CodeAllDevicePartial,
		Message: fmt.Sprintf("%s: %s=%s does not carry %s: `--device %s=%s` gets fewer GPUs than the node has; regenerate the spec", ownerPath, kind, AllDevice, strings.Join(missing, ", "), kind, AllDevice)}}
}

// relatedFindings prefixes a related spec's findings with its path, so
// the merged list says which file each is about.
func relatedFindings(specPath string, fs cdi.Findings) cdi.Findings {
	out := make(cdi.Findings, 0, len(fs))
	for _, f := range fs {
		f.Message = specPath + ": " + f.Message
		out = append(out, f)
	}
	return out
}

// spec returns the view's entry for a host path (the zero Spec, with
// RoleNamed, for a named spec the view does not hold).
func (v *View) spec(p string) Spec {
	for _, s := range v.Specs {
		if s.Path == p {
			return s
		}
	}
	return Spec{Path: p, Role: RoleNamed}
}

// pluginFinding warns that the device plugin regenerates its spec.
func pluginFinding(s Spec) cdi.Finding {
	return cdi.Finding{Severity: cdi.SeverityWarning, Code: cdi.CodePluginSpec,
		Message: fmt.Sprintf("the NVIDIA device plugin's own spec: pods asking for %s=… get it, and the plugin rewrites it without graphics mounts when it starts: the re-patch on write (the NixOS path unit, nodeprep cdi watch) patches it again (docs/runtime-view.md, \"After boot\")", s.Kind)}
}

// Check checks every GPU spec in the runtime's view (opts.SpecDirs) the way
// cdi.CheckFile checks one: opts.Spec is the named spec, and the result is
// its CheckResult with the view's findings and every other GPU spec's
// (Related) merged into Findings. The graphics files are discovered once.
// Errors: those of Load and of cdi.CheckFile on the named spec
// (fault.ErrUnavailable when it is missing, fault.ErrMalformed when it does
// not parse).
func Check(host *hostfs.Root, opts cdi.FileOptions) (*cdi.CheckResult, error) {
	v, err := Load(host, opts.SpecDirs, opts.Spec)
	if err != nil {
		return nil, err
	}
	return v.Check(host, opts)
}

// Check is Check over an already loaded view.
func (v *View) Check(host *hostfs.Root, opts cdi.FileOptions) (*cdi.CheckResult, error) {
	named, err := v.checkNamed(host, v.namedOptions(opts))
	if err != nil {
		return nil, err
	}
	return v.merge(named, v.checkRelated(host, named.Graphics, opts), opts), nil
}

// namedOptions are opts with the devices the named spec is checked for.
func (v *View) namedOptions(opts cdi.FileOptions) cdi.FileOptions {
	nopts := opts
	nopts.Expect = v.expectFor(v.spec(v.Named), opts.Expect)
	return nopts
}

// checkRelated checks every GPU spec of the view but the named one (and
// those nodeprep leaves as they are), as they are in v.loaded, against g.
func (v *View) checkRelated(host *hostfs.Root, g *cdi.Graphics, opts cdi.FileOptions) []*cdi.CheckResult {
	var out []*cdi.CheckResult
	for _, s := range v.relatedSpecs() {
		out = append(out, &cdi.CheckResult{Spec: s.Path, Findings: v.checkOne(host, g, s, opts), Graphics: g})
	}
	return out
}

// checkOne checks s, one of the view's specs other than the named one, as
// it is in v.loaded.
func (v *View) checkOne(host *hostfs.Root, g *cdi.Graphics, s Spec, opts cdi.FileOptions) cdi.Findings {
	fs := cdi.Check(v.loaded[s.Path], g, host, v.expectFor(s, opts.Expect))
	if s.Role == RolePlugin {
		fs = append(fs, pluginFinding(s))
	}
	return fs.Sorted()
}

// relatedSpecs are the view's GPU specs that Check checks besides the
// named one.
func (v *View) relatedSpecs() []Spec {
	var out []Spec
	for _, s := range v.Specs {
		if s.Path != v.Named && s.NotPatched == "" {
			out = append(out, s)
		}
	}
	return out
}

// merge makes named, the named spec's result, the view's: related in
// Related, and in Findings its own, the view's and the related specs'
// (each prefixed with its path), sorted.
func (v *View) merge(named *cdi.CheckResult, related []*cdi.CheckResult, opts cdi.FileOptions) *cdi.CheckResult {
	all := append(cdi.Findings{}, named.Findings...)
	all = append(all, v.Findings...)
	all = append(all, v.allDeviceFindings(opts.Expect)...)
	for _, rel := range related {
		named.Related = append(named.Related, rel)
		all = append(all, relatedFindings(rel.Spec, rel.Findings)...)
	}
	named.Findings = all.Sorted().Capped(cdi.MaxPerCode)
	named.Skipped = v.skipped()
	return named
}

// CheckPatched is Check, with each finding that `nodeprep cdi patch`
// fixes marked (cdi.Finding.FixedByPatch). It plans the patch as
// PlanPatch does, in memory: the specs PlanPatch patches are patched with
// cdi.Patch and the graphics files Check discovered, and checked again as
// Check checks them (the named spec the runtime does not read, or the
// library refuses, with cdi.CheckPatchedFile); a finding the patched view
// no longer has is fixed (markFixed). held counts the fixed findings of a
// spec the patch would not write yet, judged against opts.Expect as `up`
// judges it (ApplyPatch: an error it does not fix left in that spec or in
// the view; PlanPatch: a named spec of a kind that is not a GPU's). It
// writes nothing. Errors: those of Load and Check, and of cdi.Load reading
// the named spec again.
func CheckPatched(host *hostfs.Root, opts cdi.FileOptions) (res *cdi.CheckResult, held int, err error) {
	v, err := Load(host, opts.SpecDirs, opts.Spec)
	if err != nil {
		return nil, 0, err
	}
	nopts := v.namedOptions(opts)
	named, err := v.checkNamed(host, nopts)
	if err != nil {
		return nil, 0, err
	}
	g := named.Graphics
	related := v.checkRelated(host, g, opts)
	viewBlocked := v.Findings.Errors() > 0

	// A spec with no finding has none to fix: it is not patched again,
	// so a clean view costs no second check.
	if len(named.Findings) > 0 {
		var after cdi.Findings
		var changes []cdi.Change
		refused := false
		if raw, ok := v.loaded[v.Named]; ok {
			_, gpu := GPURole(raw.Kind)
			refused = !gpu
			changes, _ = cdi.Patch(raw, g, host)
			after = cdi.Check(raw, g, host, nopts.Expect)
		} else {
			res, ch, err := cdi.CheckPatchedFile(host, nopts, g)
			if err != nil {
				return nil, 0, err
			}
			after, changes = res.Findings, ch
		}
		writes := len(changes) > 0 && !refused && !viewBlocked && after.Errors() == 0
		held += mark(named.Findings, after, writes)
	}
	// The others PlanPatch patches (checkRelated checks them in the order
	// of relatedSpecs); an unpatchable one keeps its findings.
	for i, s := range v.relatedSpecs() {
		if s.Unpatchable != "" || len(related[i].Findings) == 0 {
			continue
		}
		changes, _ := cdi.Patch(v.loaded[s.Path], g, host)
		after := v.checkOne(host, g, s, opts)
		writes := len(changes) > 0 && !viewBlocked && after.Errors() == 0
		held += mark(related[i].Findings, after, writes)
	}
	return v.merge(named, related, opts), held, nil
}

// mark marks the findings of before that after no longer has
// (markFixed) as fixed by the patch, and returns how many it marked when
// the patch does not write the spec yet (writes false), else 0.
func mark(before, after cdi.Findings, writes bool) (held int) {
	for i, fixed := range markFixed(before, after) {
		if fixed {
			before[i].FixedByPatch = true
			held++
		}
	}
	if writes {
		return 0
	}
	return held
}

// markFixed reports, for each finding of before (a spec's findings), whether
// after (the same spec's, patched) no longer has it: no finding of after
// has its code and message. A message the patch changed (a path, a count)
// is not taken for a fix: while after holds a finding of the same code
// that matched none of before, a finding of before with that code is not
// fixed, one for one, in order.
func markFixed(before, after cdi.Findings) []bool {
	type key struct{ code, msg string }
	left := map[key]int{}
	for _, f := range after {
		left[key{f.Code, f.Message}]++
	}
	fixed := make([]bool, len(before))
	for i, f := range before {
		k := key{f.Code, f.Message}
		if left[k] > 0 {
			left[k]--
			continue
		}
		fixed[i] = true
	}
	unmatched := map[string]int{}
	for k, n := range left {
		unmatched[k.code] += n
	}
	for i, f := range before {
		if fixed[i] && unmatched[f.Code] > 0 {
			unmatched[f.Code]--
			fixed[i] = false
		}
	}
	return fixed
}

// skipped lists the view's specs nodeprep leaves as they are, with why.
func (v *View) skipped() []cdi.SkippedSpec {
	var out []cdi.SkippedSpec
	for _, s := range v.Specs {
		if s.NotPatched != "" {
			out = append(out, cdi.SkippedSpec{Spec: s.Path, Kind: s.Kind, Reason: s.NotPatched})
		}
	}
	return out
}

// checkNamed checks the named spec: from the library's parse when the
// runtime reads it and the library accepts it, else with cdi.CheckFile
// (which reads, validates and reports it on its own).
func (v *View) checkNamed(host *hostfs.Root, opts cdi.FileOptions) (*cdi.CheckResult, error) {
	raw, ok := v.loaded[v.Named]
	if !ok {
		return cdi.CheckFile(host, opts)
	}
	g, err := cdi.Discover(host, opts.Discover)
	if err != nil {
		return nil, err
	}
	return &cdi.CheckResult{Spec: v.Named, Findings: cdi.Check(raw, g, host, opts.Expect), Graphics: g}, nil
}

// Patch patches every GPU spec in the runtime's view (opts.SpecDirs) the
// way cdi.PatchFile patches one, and returns the named spec's result with
// the others in Related and every finding merged: PlanPatch, then, unless
// dryRun, ApplyPatch. Errors: those of PlanPatch and ApplyPatch.
func Patch(host *hostfs.Root, opts cdi.FileOptions, dryRun bool) (*cdi.PatchResult, error) {
	p, err := cdi.PlanThenApply(host, opts, dryRun, PlanPatch, ApplyPatch)
	if err != nil {
		return nil, err
	}
	return p.Result, nil
}

// PatchPlan is a patch of the runtime's whole view, planned and not yet
// written: one cdi.PatchPlan per spec nodeprep patches, the named spec's
// first. Result is the named spec's result with the others in Related and
// every finding merged.
type PatchPlan struct {
	Result *cdi.PatchResult
	plans  []*cdi.PatchPlan
	// blocked is set when the view itself has an error (conflicting
	// copies, an unpatchable spec a pod would get, a spec the library
	// refuses): then nothing is written, since the patch would not make
	// the node work.
	blocked bool
}

// PlanPatch loads the view over opts.SpecDirs and plans the patch of every
// GPU spec in it (cdi.PlanPatch for each; nothing is written). Errors: those
// of Load and cdi.PlanPatch, the latter naming the spec and its kind.
func PlanPatch(host *hostfs.Root, opts cdi.FileOptions) (*PatchPlan, error) {
	// The named spec is parsed again, patched and validated by
	// cdi.PlanPatch: the view need not validate it too.
	v, err := load(host, opts.SpecDirs, opts.Spec, false)
	if err != nil {
		return nil, err
	}
	return v.PlanPatch(host, opts)
}

// PlanPatch is PlanPatch over an already loaded view. The view's specs are
// read again from disk: a plan needs their bytes to write nothing when
// nothing changes.
func (v *View) PlanPatch(host *hostfs.Root, opts cdi.FileOptions) (*PatchPlan, error) {
	for _, s := range v.Specs {
		if s.Path != v.Named || s.Kind == "" {
			continue
		}
		if _, gpu := GPURole(s.Kind); !gpu {
			return nil, fault.Malformed(fmt.Errorf("patching CDI spec %q: its kind is %s, not an NVIDIA GPU kind (nvidia.com/gpu, nvidia.com/gpu.*, %s/*): nodeprep adds the NVIDIA driver's graphics files only to those", v.Named, s.Kind, PluginVendor))
		}
	}
	allFindings := v.allDeviceFindings(opts.Expect)
	// The plans parse the specs again; the view's parses would only
	// double a big spec in memory.
	v.loaded = nil
	if v.bytes > 1<<20 {
		runtime.GC() // so the plans reuse that memory rather than add to it
	}
	nopts := opts
	nopts.Expect = v.expectFor(v.spec(v.Named), opts.Expect)
	named, err := cdi.PlanPatch(host, nopts)
	if err != nil {
		return nil, err
	}
	p := &PatchPlan{plans: []*cdi.PatchPlan{named}, blocked: v.Findings.Errors() > 0}
	res := named.Result
	all := append(cdi.Findings{}, res.Findings...)
	all = append(all, v.Findings...)
	all = append(all, allFindings...)
	for _, s := range v.Specs {
		if s.Path == v.Named || s.Unpatchable != "" || s.NotPatched != "" {
			continue // the view's findings name an unpatchable spec
		}
		o := opts
		o.Spec = s.Path
		o.Expect = v.expectFor(s, opts.Expect)
		rel, err := cdi.PlanPatch(host, o)
		if err != nil {
			return nil, fmt.Errorf("patching %s, which the runtime serves for %s: %w", s.Path, s.Kind, err)
		}
		if s.Role == RolePlugin {
			rel.Result.Findings = append(rel.Result.Findings, pluginFinding(s)).Sorted()
		}
		p.plans = append(p.plans, rel)
		res.Related = append(res.Related, rel.Result)
		res.Changed = res.Changed || rel.Result.Changed
		all = append(all, relatedFindings(s.Path, rel.Result.Findings)...)
	}
	res.Findings = all.Sorted().Capped(cdi.MaxPerCode)
	res.Skipped = v.skipped()
	p.Result = res
	return p, nil
}

// ApplyPatch writes every spec the plan changed (cdi.ApplyPatch for each;
// each write atomic, a spec whose own findings have an error is not
// written) and nothing when the view itself has an error. Before the
// first write it proves every spec it will write can be written
// (hostfs.Root.CheckWritable: the directory takes a new file, the old
// file can be replaced), so a read-only directory or an immutable file
// leaves every spec as it was. Errors: fault.ErrCantWrite naming the spec;
// a write that still fails after that check leaves the specs before it
// written, each one whole.
func ApplyPatch(host *hostfs.Root, p *PatchPlan) error {
	if p.blocked {
		return nil
	}
	for _, pl := range p.plans {
		if !pl.Writes() {
			continue
		}
		if err := host.CheckWritable(pl.Result.Spec, false); err != nil {
			return fmt.Errorf("patching CDI spec %q: %w", pl.Result.Spec, err)
		}
	}
	for _, pl := range p.plans {
		if err := cdi.ApplyPatch(host, pl); err != nil {
			return err
		}
	}
	return nil
}
