// Package specset is the CDI view: every spec a container runtime reads
// from its CDI spec directories, loaded with the CDI library's own cache
// (tags.cncf.io/container-device-interface pkg/cdi NewCache), exactly as
// containerd and CRI-O resolve device names against it.
//
// A runtime does not read one spec file: it reads every *.json and *.yaml
// in each directory of cdi_spec_dirs (containerd; default /etc/cdi then
// /var/run/cdi, later directories winning) and resolves "vendor/class=name"
// against all of them. So a second copy of the generated spec drops every
// device the two share (the library's "conflicting device" rule), and the
// NVIDIA device plugin's own kind, k8s.device-plugin.nvidia.com/gpu, serves
// pods from a spec nodeprep never patched unless it looks. Load builds the
// view once; Check and Patch judge and patch every GPU spec in it, so that
// `cdi check`, `cdi patch`, `up` and `selftest --container` agree.
package specset

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultDirs are the CDI spec directories a runtime reads when
// cdi_spec_dirs is not set, lowest priority first (CDI library
// DefaultSpecDirs; containerd's default).
var DefaultDirs = []string{"/etc/cdi", "/var/run/cdi"}

// StorePrefix is where NixOS keeps read-only build outputs: a spec that
// resolves there cannot be patched in place.
const StorePrefix = "/nix/store/"

// Role says why a spec is in the view's GPU set.
type Role string

// Roles of a GPU spec.
const (
	// RoleNamed is the spec nodeprep was pointed at (cdi.spec, --spec).
	RoleNamed Role = "named"
	// RoleGenerator is another spec of NVIDIA's nvidia.com/gpu or
	// nvidia.com/gpu.* kinds (nvidia-ctk writes siblings, e.g. a
	// .coherent class, next to the named one).
	RoleGenerator Role = "generator"
	// RolePlugin is a spec of the NVIDIA device plugin's own vendor
	// (k8s.device-plugin.nvidia.com/*), which it generates and asks for in
	// its cdi-annotations and cdi-cri device list strategies.
	RolePlugin Role = "device-plugin"
	// RoleDRA is the NVIDIA DRA driver's base spec (kind
	// k8s.gpu.nvidia.com/device, file k8s.gpu.nvidia.com-device_base.yaml):
	// one device per GPU and MIG device it publishes, with the driver's
	// common edits; a pod's claim gets its devices.
	RoleDRA Role = "dra-driver"
	// RoleDRAClaim is a per-claim spec of the DRA driver (kind
	// k8s.gpu.nvidia.com/claim, k8s.gpu.nvidia.com-claim_<claim UID>.yaml,
	// written at claim time): only the claim's own settings (sharing,
	// MPS); its devices are always asked for together with the base
	// spec's, which brings the driver and the graphics mounts. Not
	// patched (Spec.NotPatched says so).
	RoleDRAClaim Role = "dra-claim"
	// RoleVFIO is the DRA driver's VFIO spec (k8s.gpu.nvidia.com/device
	// devices whose nodes are /dev/vfio/*, k8s.gpu.nvidia.com-device_vfio.yaml):
	// the GPU is passed through to a virtual machine and no NVIDIA driver
	// runs in the container. Not patched.
	RoleVFIO Role = "vfio"
)

// PluginVendor is the CDI vendor the NVIDIA k8s-device-plugin writes and
// requests (cmd/nvidia-device-plugin: cdi.WithVendor).
const PluginVendor = "k8s.device-plugin.nvidia.com"

// DRAVendor is the CDI vendor of NVIDIA's DRA driver for GPUs,
// "k8s." + its driver name gpu.nvidia.com (NVIDIA/k8s-dra-driver-gpu
// cmd/gpu-kubelet-plugin/cdi.go: classes "device" for the base spec and
// "claim" for the per-claim specs, both written with the CDI library's
// WriteSpec into /var/run/cdi as <vendor>-<class>_<id>.yaml).
const DRAVendor = "k8s.gpu.nvidia.com"

// GPURole returns the role a spec of this kind ("vendor/class") plays for
// GPU pods, and false for kinds no GPU pod is served from (such as
// management.nvidia.com/gpu or another vendor's).
func GPURole(kind string) (Role, bool) {
	vendor, class, ok := strings.Cut(kind, "/")
	if !ok {
		return "", false
	}
	switch {
	case vendor == "nvidia.com" && (class == "gpu" || strings.HasPrefix(class, "gpu.")):
		return RoleGenerator, true
	case vendor == PluginVendor:
		return RolePlugin, true
	case kind == DRAVendor+"/device":
		return RoleDRA, true
	case kind == DRAVendor+"/claim":
		return RoleDRAClaim, true
	}
	return "", false
}

// notPatched says why nodeprep leaves a GPU spec of this role as it is
// ("" when it patches it).
func notPatched(role Role) string {
	switch role {
	case RoleDRAClaim:
		return "a DRA per-claim spec: it carries only the claim's settings, and its devices come with " + DRAVendor + "/device from the base spec, which is patched"
	case RoleVFIO:
		return "VFIO passthrough devices: the GPU goes to a virtual machine and no NVIDIA driver runs in the container"
	}
	return ""
}

// vfioOnly reports whether every device node of a spec is a /dev/vfio
// node (the DRA driver's passthrough spec).
func vfioOnly(sp *specs.Spec) bool {
	n := 0
	for _, e := range append([]specs.ContainerEdits{sp.ContainerEdits}, deviceEdits(sp)...) {
		for _, dn := range e.DeviceNodes {
			if !strings.HasPrefix(dn.Path, "/dev/vfio/") {
				return false
			}
			n++
		}
	}
	return n > 0
}

func deviceEdits(sp *specs.Spec) []specs.ContainerEdits {
	out := make([]specs.ContainerEdits, 0, len(sp.Devices))
	for _, d := range sp.Devices {
		out = append(out, d.ContainerEdits)
	}
	return out
}

// Spec is one GPU spec in the view.
type Spec struct {
	Path     string `json:"path" yaml:"path"`         // host path, under the directory the runtime reads it from
	Kind     string `json:"kind" yaml:"kind"`         // vendor/class
	Role     Role   `json:"role" yaml:"role"`         // why it is patched
	Priority int    `json:"priority" yaml:"priority"` // index of its directory in Dirs: a higher one wins a name
	// Devices are the names it declares, in file order.
	Devices []string `json:"devices" yaml:"devices"`
	// Unpatchable says why nodeprep cannot patch the file in place
	// (it resolves into the read-only store); empty when it can.
	Unpatchable string `json:"unpatchable,omitempty" yaml:"unpatchable,omitempty"`
	// NotPatched says why nodeprep leaves a spec as it is although the
	// runtime serves it (a DRA per-claim spec, VFIO passthrough); empty
	// when it patches it.
	NotPatched string `json:"notPatched,omitempty" yaml:"notPatched,omitempty"`

	// served are the Devices the library resolves to this spec (none of a
	// later directory's specs declares them).
	served []string
}

// View is what the runtime sees in its spec directories.
type View struct {
	Dirs []string `json:"dirs" yaml:"dirs"` // host paths, lowest priority first
	// Named is the spec nodeprep was pointed at (host path).
	Named string `json:"named" yaml:"named"`
	// Specs are the GPU specs, named first, then by priority and path.
	Specs []Spec `json:"specs" yaml:"specs"`
	// Findings are the view's own problems: conflicting copies, specs the
	// library refuses, unpatchable specs a pod would get, a named spec the
	// runtime does not read; at most cdi.MaxPerCode of a code in full, the
	// rest counted in one finding (cdi.Findings.Capped).
	Findings cdi.Findings `json:"findings" yaml:"findings"`

	// loaded are the specs parsed and validated, by host path.
	loaded map[string]*specs.Spec
	// bytes is the size of the spec files read.
	bytes int
	// refused are the library's load errors, by host path.
	refused map[string]error
}

// scanDirs lists the spec files of dirs (host paths, lowest priority
// first) as the CDI library's scan does (pkg/cdi scanSpecDirs: the
// *.json and *.yaml entries of each directory that are not directories,
// in name order; a missing directory is skipped), with the machine path
// of each. A FIFO or other non-regular spec file is an error: the library
// opens spec files with a blocking open, which would hang a boot. So is a
// spec larger than bounded.MaxCDISpec. Both are fault.ErrMalformed naming
// the file; a directory that cannot be read is an error too.
func scanDirs(host *hostfs.Root, dirs []string) (machine []string, files [][]string, err error) {
	machine = make([]string, 0, len(dirs))
	files = make([][]string, len(dirs))
	for i, d := range dirs {
		p, err := host.Path(d)
		if err != nil {
			return nil, nil, fmt.Errorf("CDI spec directory %q: %w", d, err)
		}
		machine = append(machine, p)
		entries, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if st, serr := os.Stat(p); serr == nil && !st.IsDir() {
			return nil, nil, fault.Malformed(fmt.Errorf("CDI spec directory %q is not a directory", d))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("loading CDI specs from %q: %w", d, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			if ext := filepath.Ext(e.Name()); ext != ".json" && ext != ".yaml" {
				continue
			}
			// host.Stat re-roots an absolute link (environment.etc links
			// a spec into /nix/store) as the runtime on the host sees it.
			st, err := host.Stat(path.Join(d, e.Name()))
			if err == nil && !st.Mode().IsRegular() && !st.IsDir() {
				return nil, nil, fault.Malformed(fmt.Errorf("loading CDI specs from %q: %s is not a regular file", d, e.Name()))
			}
			if err == nil && st.Size() > bounded.MaxCDISpec {
				return nil, nil, fault.Malformed(fmt.Errorf("loading CDI specs from %q: %s has %d bytes: larger than the %d MiB a CDI spec may have (bounded.MaxCDISpec)", d, e.Name(), st.Size(), bounded.MaxCDISpec>>20))
			}
			files[i] = append(files[i], e.Name())
		}
	}
	return machine, files, nil
}

// maxViewExpansion is what the YAML aliases of all the specs of one view
// (Load, NewCache) may expand them to together: yamlbound.MaxCDISpec,
// what one spec may. The tests lower it.
var maxViewExpansion int64 = yamlbound.MaxCDISpec

// NewCache loads the CDI library's cache over dirs (host paths, lowest
// priority first) resolved under host, without watching them, and returns
// it with the machine directory of each host directory, for injecting
// devices into an OCI spec (selftest/container). Its files are checked first as
// scanDirs checks them (fault.ErrMalformed for a FIFO or a huge spec), and
// for YAML aliases that expand past yamlbound.MaxCDISpec, each or all
// of them together (cdi.CheckExpansionWithin; fault.ErrMalformed wrapping
// yamlbound.ErrExpands).
func NewCache(host *hostfs.Root, dirs []string) (*cdilib.Cache, []string, error) {
	machine, files, err := scanDirs(host, dirs)
	if err != nil {
		return nil, nil, err
	}
	// The library decodes every spec with yaml.v3, aliases expanded:
	// bound them first, each and all together.
	budget := yamlbound.NewBudget(maxViewExpansion)
	for i, names := range files {
		for _, name := range names {
			hp := path.Join(dirs[i], name)
			data, err := host.ReadFile(hp, bounded.MaxCDISpec)
			if err != nil {
				continue // the library reports what it cannot read
			}
			if err := cdi.CheckExpansionWithin(data, budget); err != nil {
				return nil, nil, fault.Malformed(fmt.Errorf("loading CDI specs from %q: %s: %w", dirs[i], name, err))
			}
		}
	}
	cache, err := cdilib.NewCache(cdilib.WithSpecDirs(machine...), cdilib.WithAutoRefresh(false))
	if err != nil {
		return nil, nil, fmt.Errorf("loading CDI specs from %s: %w", strings.Join(dirs, ", "), err)
	}
	return cache, machine, nil
}

// distinctDirs drops from dirs each directory that a later one names again
// through a link (/var/run/cdi and /run/cdi on a host where /var/run is a
// link to /run): the runtime reads it twice, and the later reading wins
// every device, so it counts once, at the later place.
func distinctDirs(host *hostfs.Root, dirs []string) []string {
	var out []string
	for i, d := range dirs {
		later := slices.ContainsFunc(dirs[i+1:], func(e string) bool { return resolved(host, e) == resolved(host, d) })
		if !later {
			out = append(out, d)
		}
	}
	return out
}

// resolved is the host path p leads to, links followed under the root;
// p itself when it cannot be resolved (a directory that does not exist).
func resolved(host *hostfs.Root, p string) string {
	if r, err := host.Resolve(p); err == nil {
		return r
	}
	return path.Clean(p)
}

// scanned is one spec file of the view as Load read it.
type scanned struct {
	path     string // host path
	priority int    // index of its directory
	spec     *specs.Spec
}

// Load builds the view over dirs (DefaultDirs when empty) under host, with
// named the spec nodeprep was pointed at. Errors: those of scanDirs.
// Everything the CDI library's rules say about a spec is a finding, not
// an error.
//
// It applies the library's cache rules itself rather than loading a
// pkg/cdi Cache: the library parses every spec with yaml.v3, about ten
// times a spec's size in memory (a 50 MB, 10,000-device spec took 600 MB
// and 2 s before the patch even began). Here each spec is parsed with
// cdi.ParseSpec (about its size) and validated with the library's own
// validation, in pieces (cdi.ValidateSpec); the rules between files are
// the library's (pkg/cdi Cache.refresh): a device name two files in one
// directory declare is a conflict, and the library drops it; a later
// directory's device wins over an earlier one's (shadowing). A spec
// other than the named one whose YAML aliases take what the view's specs
// expand to past yamlbound.MaxCDISpec is refused as the library would
// refuse it (cdi.CheckExpansionWithin), a warning.
func Load(host *hostfs.Root, dirs []string, named string) (*View, error) {
	return load(host, dirs, named, true)
}

// load is Load; validateNamed false leaves the named spec's validation to
// the caller (a patch validates what it writes).
func load(host *hostfs.Root, dirs []string, named string, validateNamed bool) (*View, error) {
	if len(dirs) == 0 {
		dirs = DefaultDirs
	}
	dirs = distinctDirs(host, dirs)
	_, files, err := scanDirs(host, dirs)
	if err != nil {
		return nil, err
	}
	v := &View{Dirs: slices.Clone(dirs), Named: named, loaded: map[string]*specs.Spec{}, refused: map[string]error{}}
	namedIn := -1
	namedDir := resolved(host, path.Dir(named))
	for i, d := range dirs {
		if namedDir == resolved(host, d) {
			namedIn = i
		}
	}
	if named != "" && namedIn < 0 {
		v.Findings = append(v.Findings, cdi.Finding{Severity: cdi.SeverityWarning, Code: cdi.CodeSpecNotRead,
			Message: fmt.Sprintf("%s is in none of the CDI spec directories %s: the runtime does not read it", named, strings.Join(dirs, ", "))})
	}

	var all []scanned
	budget := yamlbound.NewBudget(maxViewExpansion)
	for prio, names := range files {
		for _, name := range names {
			hp := path.Join(dirs[prio], name)
			if namedIn == prio && path.Base(named) == name {
				hp = named // the same file, by the path nodeprep was given
			}
			data, err := host.ReadFile(hp, bounded.MaxCDISpec)
			v.bytes += len(data)
			var raw *specs.Spec
			if err == nil && hp != named {
				// The named spec is bounded by its own limit alone: the
				// others cannot take its share.
				err = cdi.CheckExpansionWithin(data, budget)
			}
			if err == nil {
				raw, err = cdi.ParseSpec(data)
				if err != nil && hp != named && !errors.Is(err, yamlbound.ErrExpands) {
					// The runtime reads other specs with the library's
					// parser, which takes the first YAML document.
					if lib, lerr := cdilib.ParseSpec(data); lerr == nil && lib != nil {
						raw, err = lib, nil
					}
				}
			}
			data = nil
			if err == nil && (validateNamed || hp != named) {
				err = cdi.ValidateSpec(raw)
			}
			if err != nil {
				v.refused[hp] = err
				continue
			}
			all = append(all, scanned{path: hp, priority: prio, spec: raw})
		}
	}

	// The library's device table: a later directory's device wins; two
	// files of one directory declaring a name is a conflict.
	winner := map[string]scanned{}
	var conflicts []string
	dropped := map[string]bool{}
	for _, sc := range all {
		for _, d := range sc.spec.Devices {
			q := sc.spec.Kind + "=" + d.Name
			if other, ok := winner[q]; ok && other.priority == sc.priority {
				conflicts = append(conflicts, fmt.Sprintf("conflicting device %q (specs %q, %q)", q, sc.path, other.path))
				dropped[q] = true
				continue
			}
			winner[q] = sc
		}
	}
	for q := range dropped {
		delete(winner, q)
	}
	v.Findings = append(v.Findings, conflictFindings(conflicts)...)
	// In path order, so that the findings kept in full (Capped) are the
	// same from run to run.
	for _, hp := range slices.Sorted(maps.Keys(v.refused)) {
		err := v.refused[hp]
		if hp == named {
			continue // the named spec's own checks report it
		}
		// The runtime skips a spec it refuses and serves the rest: pods
		// asking for that file's devices fail, GPU pods served by the
		// other specs do not. A warning, not a reason to block the node.
		v.Findings = append(v.Findings, cdi.Finding{Severity: cdi.SeverityWarning, Code: cdi.CodeInvalidSpec,
			Message: fmt.Sprintf("the runtime skips %s, which the CDI library refuses: %v; pods asking for its devices fail", hp, err)})
	}

	for _, s := range all {
		kind := s.spec.Kind
		role, ok := GPURole(kind)
		if s.path == named {
			role, ok = RoleNamed, true
		}
		if !ok {
			continue
		}
		if role == RoleDRA && vfioOnly(s.spec) {
			role = RoleVFIO
		}
		v.loaded[s.path] = s.spec
		sp := Spec{Path: s.path, Kind: kind, Role: role, Priority: s.priority, NotPatched: notPatched(role)}
		for _, d := range s.spec.Devices {
			sp.Devices = append(sp.Devices, d.Name)
		}
		if r, err := host.Resolve(s.path); err == nil && strings.HasPrefix(r, StorePrefix) {
			sp.Unpatchable = fmt.Sprintf("it resolves to %s in the read-only Nix store", r)
		}
		sp.served = servedNames(winner, sp)
		v.Specs = append(v.Specs, sp)
		v.shadowed(winner, sp)
	}
	if _, ok := v.loaded[named]; !ok && named != "" && namedIn >= 0 {
		// Refused or absent: the named spec's own load reports why.
		v.Specs = append(v.Specs, Spec{Path: named, Role: RoleNamed, Priority: namedIn})
	}
	sort.SliceStable(v.Specs, func(i, j int) bool {
		a, b := v.Specs[i], v.Specs[j]
		if (a.Role == RoleNamed) != (b.Role == RoleNamed) {
			return a.Role == RoleNamed
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		return a.Path < b.Path
	})
	// A claim spec's devices come with the base spec's: say so only when
	// the view has a base spec nodeprep patches.
	base := slices.ContainsFunc(v.Specs, func(s Spec) bool { return s.Role == RoleDRA && s.Unpatchable == "" })
	for i, s := range v.Specs {
		if s.Role == RoleDRAClaim && !base {
			v.Specs[i].NotPatched = "a DRA per-claim spec: it carries only the claim's settings, and its devices come with " + DRAVendor + "/device from the DRA driver's base spec, which is not in the runtime's view (or the CDI library refuses it, or it cannot be patched): pods with this claim get no GPU until the driver writes it"
		}
	}
	for _, s := range v.Specs {
		// An unpatchable spec is an error only when a pod can get it: a
		// spec of a later directory that serves every one of its names
		// (shadowed-device says so) leaves it unused.
		if s.Unpatchable == "" || s.NotPatched != "" || len(s.served) == 0 {
			continue
		}
		v.Findings = append(v.Findings, cdi.Finding{Severity: cdi.SeverityError, Code: cdi.CodeUnpatchableSpec,
			Message: fmt.Sprintf("pods asking for %s=%s get %s, which nodeprep cannot patch: %s (generate it into a writable CDI directory, e.g. /var/run/cdi)", s.Kind, s.served[0], s.Path, s.Unpatchable)})
	}
	// One finding per file: however many files a directory holds, the
	// view says the first of each kind and counts the rest.
	v.Findings = v.Findings.Capped(cdi.MaxPerCode)
	return v, nil
}

// servedNames are the device names of sp that the CDI library resolves to
// sp: those no spec of a later directory declares too (the library's
// priority rule; winner holds, per kind=name, the highest-priority spec
// that declares it).
func servedNames(winner map[string]scanned, sp Spec) []string {
	var out []string
	for _, name := range sp.Devices {
		if w, ok := winner[sp.Kind+"="+name]; ok && w.priority > sp.Priority {
			continue
		}
		out = append(out, name)
	}
	return out
}

// shadowed warns about each of sp's devices that a spec in a later
// directory serves instead (the CDI library's priority rule: no error, the
// earlier spec is simply never used for that name).
func (v *View) shadowed(winner map[string]scanned, sp Spec) {
	for _, name := range sp.Devices {
		w, ok := winner[sp.Kind+"="+name]
		if !ok || w.priority <= sp.Priority {
			continue
		}
		v.Findings = append(v.Findings, cdi.Finding{Severity: cdi.SeverityWarning, Code: cdi.CodeShadowedDevice,
			Message: fmt.Sprintf("%s=%s in %s is shadowed by %s, in a later CDI directory: pods get that one; remove %s if it is a stale copy", sp.Kind, name, sp.Path, w.path, sp.Path)})
		return
	}
}

// conflictPattern matches the CDI library's conflict error (pkg/cdi
// cache.go: conflicting device %q (specs %q, %q)).
var conflictPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^conflicting device "([^"]*)" \(specs "([^"]*)", "([^"]*)"\)$`)
})

// conflictFindings turns the library's conflict errors, one per device
// and reported under both files, into one finding per pair of files
// naming the devices the library dropped. An error in a form this
// version does not know is reported as it is.
func conflictFindings(errs []string) cdi.Findings {
	type pair struct{ a, b string }
	devices := map[pair][]string{}
	var fs cdi.Findings
	for _, e := range errs {
		m := conflictPattern().FindStringSubmatch(e)
		if m == nil {
			fs = append(fs, cdi.Finding{Severity: cdi.SeverityError, Code: cdi.CodeConflictingSpecs, Message: "the CDI library reports: " + e})
			continue
		}
		p := pair{m[2], m[3]}
		if p.b < p.a {
			p = pair{p.b, p.a}
		}
		if !slices.Contains(devices[p], m[1]) {
			devices[p] = append(devices[p], m[1])
		}
	}
	pairs := slices.Collect(maps.Keys(devices))
	slices.SortFunc(pairs, func(x, y pair) int { return strings.Compare(x.a+"\x00"+x.b, y.a+"\x00"+y.b) })
	for _, p := range pairs {
		names := devices[p]
		slices.Sort(names)
		fs = append(fs, cdi.Finding{Severity: cdi.SeverityError, Code: cdi.CodeConflictingSpecs,
			Message: fmt.Sprintf("%s and %s declare the same %d device(s) (%s): the CDI library drops every one, so pods asking for them fail with \"unresolvable CDI devices\"; remove one of the files", p.a, p.b, len(names), strings.Join(names, ", "))})
	}
	return fs
}
