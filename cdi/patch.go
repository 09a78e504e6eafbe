package cdi

import (
	"debug/elf"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi/ctrfs"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// MountOptions are the options of every mount nodeprep adds: a read-only
// bind mount, as nvidia-ctk writes its own.
var MountOptions = []string{"ro", "nosuid", "nodev", "bind"}

// Change is one edit Patch made to a spec.
type Change struct {
	// Action is "add" (a new mount), "replace" (a mount nodeprep owns got a
	// new hostPath), "move" (a mount nodeprep made got the configured
	// containerPath; From and To are the old and new one), "remove" (a
	// mount nodeprep made sat where a hook of the spec creates a link) or
	// "cdiVersion" (the version was raised).
	Action string `json:"action" yaml:"action"`
	// Role is the graphics role, or "library" for a mount added so a
	// manifest's library resolves.
	Role          string `json:"role,omitempty" yaml:"role,omitempty"`
	HostPath      string `json:"hostPath,omitempty" yaml:"hostPath,omitempty"`           // host path of the mount's source
	ContainerPath string `json:"containerPath,omitempty" yaml:"containerPath,omitempty"` // where the mount appears in the container
	// From and To are the old and new cdiVersion for Action "cdiVersion",
	// the old and new containerPath for "move".
	From string `json:"from,omitempty" yaml:"from,omitempty"`
	To   string `json:"to,omitempty" yaml:"to,omitempty"` // see From
}

// String is the change in one line, as `cdi patch` prints it.
func (c Change) String() string {
	switch c.Action {
	case "cdiVersion":
		return fmt.Sprintf("cdiVersion %s → %s", c.From, c.To)
	case "replace":
		return fmt.Sprintf("replace %s: %s → %s", c.Role, c.ContainerPath, c.HostPath)
	case "move":
		return fmt.Sprintf("move %s: %s → %s", c.Role, c.From, c.To)
	case "remove":
		return fmt.Sprintf("remove %s: %s → %s (%s)", c.Role, c.HostPath, c.ContainerPath, c.To)
	}
	return fmt.Sprintf("add %s: %s → %s", c.Role, c.HostPath, c.ContainerPath)
}

// Patch adds the graphics files of g to the spec's top-level
// containerEdits.mounts, plus a mount for every manifest library that
// would not otherwise resolve in the container, then raises cdiVersion to
// what the fields need. It edits spec in place and returns the changes and
// the problems it could not fix (unresolvable libraries, container paths
// held by a mount that is not nodeprep's).
//
// Rules (issue 2, FIELD-REPORTS F1–F7): a graphics file already mounted
// where its loader looks is left alone; a mount at the same containerPath
// from the same host file is left alone; one nodeprep owns (its hostPath is
// under the driver root or a library directory) gets the new hostPath; any
// other is kept and reported. Devices are never removed or renamed; nothing
// else in the spec changes. Patch is idempotent: Patch on its own output
// makes no change.
func Patch(spec *specs.Spec, g *Graphics, host *hostfs.Root) ([]Change, Findings) {
	a := newAnalyzer(spec, g, host)
	return a.run(true)
}

type analyzer struct {
	spec     *specs.Spec
	g        *Graphics
	host     *hostfs.Root
	cache    *hostCache
	resolved map[string]string
	sonames  map[string]string
	// claimed are container paths a manifest names absolutely (or where
	// its link leads): a mount there is never moved.
	claimed map[string]bool
	changes []Change
	// ctr is the container view as of ctrChanges changes.
	ctr        *ctrfs.FS
	ctrChanges int
	findings   Findings
}

func newAnalyzer(spec *specs.Spec, g *Graphics, host *hostfs.Root) *analyzer {
	c := g.cache
	if c == nil || c.host != host {
		c = newHostCache(host)
	}
	return &analyzer{spec: spec, g: g, host: host, cache: c, resolved: c.resolved, sonames: c.sonames, claimed: map[string]bool{}}
}

// run does the analysis; with apply it edits the spec, otherwise it only
// records what is missing as findings (for Check).
func (a *analyzer) run(apply bool) ([]Change, Findings) {
	a.hookConflicts(apply)
	a.ldcacheGlibc()
	var mounted []GraphicsFile // manifests that are (or now will be) in the container
	glvnd, glvndProvided := 0, 0
	for _, f := range a.g.Files {
		if f.Role == RoleGlvnd {
			glvnd++
		}
		if !Essential(f.Role) && f.Manifest != nil {
			if missing := a.unavailableLibraries(f); len(missing) > 0 {
				a.findings = append(a.findings, warnf(CodeOptionalLeftOut, "%s %s names %s, which the host does not have: left out (optional; only what needs it is affected)", f.Role, f.HostPath, strings.Join(missing, ", ")))
				continue
			}
		}
		if m, cp, ok := a.providedBy(f); ok {
			// A changed cdi.containerPaths moves what nodeprep mounted.
			if cp != f.ContainerPath && a.nodeprepMount(m) && a.topMountAt(f.ContainerPath) == nil {
				if apply {
					a.move(m, string(f.Role), f.ContainerPath)
					cp = f.ContainerPath
				} else {
					a.findings = append(a.findings, warnf(CodeContainerPathChanged, "%s is mounted at %s, not at %s as configured: nodeprep cdi patch moves it", f.HostPath, cp, f.ContainerPath))
				}
			}
			if f.Role == RoleGlvnd {
				glvndProvided++
			}
			if f.Manifest != nil {
				f.ContainerPath = cp
				mounted = append(mounted, f)
			}
			continue
		}
		if m := a.topMountAt(f.ContainerPath); m != nil {
			if !a.owned(m.HostPath) {
				a.findings = append(a.findings, warnf(CodeForeignMount, "%s is already mounted at %s from %s, which nodeprep does not own: kept, so the %s from %s is not injected", f.ContainerPath, f.ContainerPath, m.HostPath, f.Role, f.HostPath))
				continue
			}
			if apply {
				m.HostPath = f.HostPath
				a.changes = append(a.changes, Change{Action: "replace", Role: string(f.Role), HostPath: f.HostPath, ContainerPath: f.ContainerPath})
			} else {
				a.findings = append(a.findings, missingFinding(f))
			}
		} else if !apply {
			// Check goes on to the manifest's libraries as if it were
			// mounted, as Patch does: one finding per mount Patch adds.
			a.findings = append(a.findings, missingFinding(f))
		} else {
			a.addMount(string(f.Role), f.HostPath, f.ContainerPath)
		}
		if f.Manifest != nil {
			mounted = append(mounted, f)
		}
	}
	if !apply && glvndProvided > 0 && glvndProvided < glvnd {
		a.findings = append(a.findings, errorf(CodePartialGlvnd, "the spec mounts %d of the %d glvnd dispatch libraries: a partial set mixes glvnd builds in the container", glvndProvided, glvnd))
	}
	for _, f := range mounted {
		for _, lib := range f.Manifest.Libraries {
			a.library(f, lib, apply)
		}
	}
	a.driverLibs(apply)
	a.deviceNodes(apply)
	a.uvmNodes()
	a.driverVersions()
	if apply {
		from := a.spec.Version
		if RaiseVersion(a.spec) {
			a.changes = append(a.changes, Change{Action: "cdiVersion", From: from, To: a.spec.Version})
		}
	}
	return a.changes, a.findings
}

func missingFinding(f GraphicsFile) Finding {
	code := map[Role]string{
		RoleICD: CodeMissingICD, RoleLayer: CodeMissingLayer, RoleEGLVendor: CodeMissingEGLVendor,
		RoleEGLPlatform: CodeMissingEGLPlatform, RoleGBM: CodeMissingGBM, RoleGlvnd: CodeMissingGlvnd,
	}[f.Role]
	what := map[Role]string{
		RoleICD: "Vulkan ICD manifest", RoleLayer: "Vulkan implicit layer manifest", RoleEGLVendor: "EGL vendor manifest",
		RoleEGLPlatform: "EGL external platform manifest", RoleGBM: "GBM backend", RoleGlvnd: "glvnd dispatch library",
	}[f.Role]
	return severityFor(f.Role, code, "%s %s is not mounted where the loader looks (want it at %s)", what, f.HostPath, f.ContainerPath)
}

// Essential reports whether a graphics role is part of the essential set,
// whose absence blocks the node: the Vulkan ICD manifest, the EGL vendor
// manifest and the glvnd dispatch libraries (and the libraries these
// name). The rest (implicit layer, EGL external platforms such as
// wayland, xcb or gbm, the GBM backend) is optional: a problem with it is a
// warning, and it is left out rather than stop the patch.
func Essential(r Role) bool {
	return r == RoleICD || r == RoleEGLVendor || r == RoleGlvnd
}

// severityFor makes a finding about a file of role r: an error for the
// essential set, a warning for an optional piece.
func severityFor(r Role, code, format string, args ...any) Finding {
	if Essential(r) {
		return errorf(code, format, args...)
	}
	return warnf(code, format, args...)
}

// unavailableLibraries returns the libraries the manifest f names that
// neither the container nor the host can provide.
func (a *analyzer) unavailableLibraries(f GraphicsFile) []string {
	var out []string
	for _, lib := range f.Manifest.Libraries {
		if strings.Contains(lib, "/") && !path.IsAbs(lib) {
			lib = path.Join(path.Dir(f.ContainerPath), lib)
		}
		if path.IsAbs(lib) {
			ctr := a.container()
			if e, err := ctr.Resolve(lib); err == nil && !e.Dir {
				continue
			}
			host, ok := ctr.HostPathOf(lib)
			if !ok {
				host = lib
			}
			if !a.cache.exist(host) || !a.sharedObject(host) {
				out = append(out, lib)
			}
			continue
		}
		if a.sonameProvided(lib) || slices.ContainsFunc(a.g.LibDirs, func(d string) bool {
			p := path.Join(d, lib)
			return a.cache.exist(p) && a.sharedObject(p)
		}) {
			continue
		}
		out = append(out, lib)
	}
	return out
}

func (a *analyzer) addMount(role, hostPath, containerPath string) {
	if why := a.hookCreates(containerPath); why != "" {
		// A file mounted where a hook makes its link or folder makes the
		// hook fail ("failed to create symlink: device or resource
		// busy"), and the container does not start.
		a.findings = append(a.findings, errorf(CodeHookConflict, "%s %s is not mounted at %s: %s", role, hostPath, containerPath, why))
		return
	}
	// The same file mounted by nodeprep under the same name in a folder the
	// dynamic linker no longer searches (the old cdi.containerPaths.libDir)
	// is moved, not mounted twice.
	want := a.resolve(hostPath)
	for _, m := range a.spec.ContainerEdits.Mounts {
		if a.nodeprepMount(m) && path.Base(m.ContainerPath) == path.Base(containerPath) && a.resolve(m.HostPath) == want &&
			!a.libSearchDir(path.Dir(path.Clean(m.ContainerPath))) && !a.claimed[path.Clean(m.ContainerPath)] {
			a.move(m, role, containerPath)
			return
		}
	}
	a.spec.ContainerEdits.Mounts = append(a.spec.ContainerEdits.Mounts, &specs.Mount{
		HostPath: hostPath, ContainerPath: containerPath, Options: slices.Clone(MountOptions),
	})
	a.changes = append(a.changes, Change{Action: "add", Role: role, HostPath: hostPath, ContainerPath: containerPath})
}

// effectiveMounts are the mounts every container with any device of this
// spec gets: the top-level ones and those that every device carries.
func (a *analyzer) effectiveMounts() []*specs.Mount {
	out := slices.Clone(a.spec.ContainerEdits.Mounts)
	if len(a.spec.Devices) == 0 {
		return out
	}
	for _, m := range a.spec.Devices[0].ContainerEdits.Mounts {
		inAll := true
		for _, d := range a.spec.Devices[1:] {
			if !slices.ContainsFunc(d.ContainerEdits.Mounts, func(o *specs.Mount) bool {
				return o.ContainerPath == m.ContainerPath && o.HostPath == m.HostPath
			}) {
				inAll = false
				break
			}
		}
		if inAll {
			out = append(out, m)
		}
	}
	return out
}

func (a *analyzer) topMountAt(containerPath string) *specs.Mount {
	for _, m := range a.spec.ContainerEdits.Mounts {
		if path.Clean(m.ContainerPath) == containerPath {
			return m
		}
	}
	return nil
}

// hostCache holds what the host says about paths, shared by every spec
// checked against one Graphics (the runtime's view checks several).
type hostCache struct {
	host     *hostfs.Root
	resolved map[string]string          // host path → what it finally names
	sonames  map[string]string          // host path → DT_SONAME
	exists   map[string]bool            // host path → it exists (links followed)
	elfs     map[string]*elfInfo        // host path → what its ELF header says
	lists    map[string]map[string]bool // directory → the names in it
}

// list returns the names in the host directory dir (none when it cannot
// be read), read once.
func (c *hostCache) list(dir string) map[string]bool {
	if names, ok := c.lists[dir]; ok {
		return names
	}
	names := map[string]bool{}
	if entries, err := c.host.ReadDir(dir); err == nil {
		for _, e := range entries {
			names[e.Name()] = true
		}
	}
	c.lists[dir] = names
	return names
}

// elfInfo is what nodeprep reads from a library's ELF file.
type elfInfo struct {
	shared bool     // ET_DYN
	needed []string // DT_NEEDED, bare names only
}

func newHostCache(host *hostfs.Root) *hostCache {
	return &hostCache{host: host, resolved: map[string]string{}, sonames: map[string]string{}, exists: map[string]bool{}, elfs: map[string]*elfInfo{}, lists: map[string]map[string]bool{}}
}

// exists reports whether hostPath exists on the host, cached.
func (c *hostCache) exist(hostPath string) bool {
	e, ok := c.exists[hostPath]
	if !ok {
		e = c.host.Exists(hostPath)
		c.exists[hostPath] = e
	}
	return e
}

// elf reads the ELF file at hostPath once (nil for a file that is not
// ELF).
func (c *hostCache) elf(hostPath string) *elfInfo {
	if info, ok := c.elfs[hostPath]; ok {
		return info
	}
	var info *elfInfo
	if p, err := c.host.Path(hostPath); err == nil {
		if ef, err := elf.Open(p); err == nil {
			info = &elfInfo{shared: ef.Type == elf.ET_DYN}
			if libs, err := ef.ImportedLibraries(); err == nil {
				info.needed = slices.DeleteFunc(libs, func(s string) bool { return strings.Contains(s, "/") })
			}
			ef.Close()
		}
	}
	c.elfs[hostPath] = info
	return info
}

// resolve returns the host path hostPath finally names, cached.
func (a *analyzer) resolve(hostPath string) string {
	if r, ok := a.resolved[hostPath]; ok {
		return r
	}
	r, err := a.host.Resolve(hostPath)
	if err != nil {
		r = hostPath
	}
	a.resolved[hostPath] = r
	return r
}

// owned reports whether a mount with this hostPath is one nodeprep makes:
// under the driver root or a library directory it searches.
func (a *analyzer) owned(hostPath string) bool {
	for _, dir := range append([]string{a.g.DriverRoot}, a.g.LibDirs...) {
		if hostPath == dir || strings.HasPrefix(hostPath, dir+"/") {
			return true
		}
	}
	return false
}

// searchDirs are the container directories a loader looks in for a role's
// files (Vulkan-Loader, libglvnd and eglexternalplatform docs). Libraries
// are found through the dynamic linker instead: see library.
func searchDirs(r Role) []string {
	switch r {
	case RoleICD:
		return []string{"/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"}
	case RoleLayer:
		return []string{"/etc/vulkan/implicit_layer.d", "/usr/share/vulkan/implicit_layer.d", "/usr/local/share/vulkan/implicit_layer.d"}
	case RoleEGLVendor:
		return []string{"/etc/glvnd/egl_vendor.d", "/usr/share/glvnd/egl_vendor.d"}
	case RoleEGLPlatform:
		return []string{"/etc/egl/egl_external_platform.d", "/usr/share/egl/egl_external_platform.d"}
	}
	return nil
}

// providedBy reports whether the spec already puts f's host file where its
// loader finds it, with the mount that does and its container path.
func (a *analyzer) providedBy(f GraphicsFile) (*specs.Mount, string, bool) {
	want := a.resolve(f.HostPath)
	for _, m := range a.effectiveMounts() {
		cp := path.Clean(m.ContainerPath)
		if a.resolve(m.HostPath) != want {
			continue
		}
		switch f.Role {
		case RoleGlvnd, RoleGBM:
			if cp == f.ContainerPath || path.Base(cp) == path.Base(f.ContainerPath) && a.libSearchDir(path.Dir(cp)) {
				return m, cp, true
			}
		default:
			if cp == f.ContainerPath || slices.Contains(searchDirs(f.Role), path.Dir(cp)) {
				return m, cp, true
			}
		}
	}
	return nil, "", false
}

// nodeprepMount reports whether m is a mount nodeprep made: in the spec's
// top-level edits, from a host path it owns, at a container path other
// than its host path (the generator mounts files at their host paths).
// Only such a mount is moved when cdi.containerPaths changes.
func (a *analyzer) nodeprepMount(m *specs.Mount) bool {
	return slices.Contains(a.spec.ContainerEdits.Mounts, m) && a.owned(m.HostPath) && path.Clean(m.HostPath) != path.Clean(m.ContainerPath)
}

// move gives a mount nodeprep made its configured container path.
func (a *analyzer) move(m *specs.Mount, role, to string) {
	a.changes = append(a.changes, Change{Action: "move", Role: role, HostPath: m.HostPath, From: path.Clean(m.ContainerPath), To: to})
	m.ContainerPath = to
}

// ldcacheFolders are the folders the spec's update-ldcache hooks add to the
// container's linker cache (nvidia-ctk hook update-ldcache --folder DIR),
// from the top-level edits and every device's.
func (a *analyzer) ldcacheFolders() (folders []string, hook bool) {
	e := SpecHooks(a.spec, true)
	return e.Folders, e.Ldcache
}

// libSearchDir reports whether the dynamic linker in the container finds a
// library by soname in dir: a folder the ldcache hook adds, or a system
// library directory (in the image's ld.so.conf, rescanned by the hook).
func (a *analyzer) libSearchDir(dir string) bool {
	folders, _ := a.ldcacheFolders()
	if slices.Contains(folders, dir) {
		return true
	}
	return slices.Contains(systemLibDirs(a.libDir()), dir)
}

func systemLibDirs(libDir string) []string {
	return []string{libDir, "/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"}
}

// libDir is the container library directory the glvnd set and libraries
// named by bare soname go to: the configured one (cdi.containerPaths.libDir),
// whether or not a glvnd set was found.
func (a *analyzer) libDir() string {
	if a.g.ContainerLibDir != "" {
		return a.g.ContainerLibDir
	}
	for _, f := range a.g.Files {
		if f.Role == RoleGlvnd {
			return path.Dir(f.ContainerPath)
		}
	}
	return ""
}

// container is the container's file view with the spec's mounts as they
// stand (an empty image: only what the spec mounts counts), built again
// only after the mounts changed.
func (a *analyzer) container() *ctrfs.FS {
	if a.ctr == nil || a.ctrChanges != len(a.changes) {
		a.ctr, a.ctrChanges = ctrfs.New(a.host, nil, a.effectiveMounts()).WithLinks(SpecHooks(a.spec, false).Links), len(a.changes)
	}
	return a.ctr
}

// library makes sure a library a mounted manifest names resolves in the
// container (F2, F3): an absolute path must be covered by a mount whose
// host side has the file; a bare soname must be provided by a mounted file
// in a folder the dynamic linker searches. What is missing is mounted from
// the host when the host has it (with apply), else reported.
func (a *analyzer) library(f GraphicsFile, lib string, apply bool) {
	if strings.Contains(lib, "/") && !path.IsAbs(lib) {
		lib = path.Join(path.Dir(f.ContainerPath), lib)
	}
	if path.IsAbs(lib) {
		a.absoluteLibrary(f, path.Clean(lib), apply)
		return
	}
	a.sonameLibrary(f, lib, apply)
}

func (a *analyzer) absoluteLibrary(f GraphicsFile, lib string, apply bool) {
	a.claimed[lib] = true
	ctr := a.container()
	e, err := ctr.Resolve(lib)
	if err == nil && !e.Dir {
		a.claimed[e.Path] = true
		return
	}
	// The host file: what the covering mount maps lib to, else lib itself
	// (a store path mounted nowhere, F2).
	hostLib, covered := ctr.HostPathOf(lib)
	if !covered {
		hostLib = lib
	}
	if !a.cache.exist(hostLib) {
		a.findings = append(a.findings, severityFor(f.Role, CodeUnresolvedLibrary, "%s %s names %s, which exists neither in the container nor on the host", f.Role, f.HostPath, lib))
		return
	}
	if !a.sharedObject(hostLib) {
		// A manifest decides what nodeprep mounts into every GPU container:
		// only a shared library may be mounted on its word.
		a.findings = append(a.findings, severityFor(f.Role, CodeBadManifest, "%s %s names %s, which is not an ELF shared library: not mounted", f.Role, f.HostPath, lib))
		return
	}
	// Where the lookup broke is where the file must appear: at the end of
	// the links the container follows (a link into /nix/store from a
	// mounted directory), else at lib.
	target := lib
	var de *ctrfs.DanglingError
	dangling := errors.As(err, &de) && len(de.Links) > 0 && !de.Loop
	if dangling {
		target = de.Unresolved
		a.claimed[target] = true
	}
	if !apply {
		if dangling {
			a.findings = append(a.findings, severityFor(f.Role, CodeDanglingInContainer, "%s %s names %s: %v, so the loader cannot open it; nodeprep cdi patch mounts %s at %s", f.Role, f.HostPath, lib, err, a.stableAlias(hostLib), target))
		} else {
			a.findings = append(a.findings, severityFor(f.Role, CodeUnresolvedLibrary, "%s %s names %s, which no mount puts in the container", f.Role, f.HostPath, lib))
		}
		return
	}
	a.addMount("library", a.stableAlias(hostLib), target)
}

// stableAlias returns the path under a library directory of the driver root
// that resolves to the same file as lib (a store path such as
// /nix/store/<h>-nvidia-x11/lib/libGLX_nvidia.so.0 →
// /run/opengl-driver/lib/libGLX_nvidia.so.0), so that the mount's hostPath
// survives a driver switch like every other hostPath nodeprep writes; lib
// itself when there is none.
func (a *analyzer) stableAlias(lib string) string {
	want := a.resolve(lib)
	for _, dir := range a.g.LibDirs {
		if p := path.Join(dir, path.Base(lib)); a.resolve(p) == want && a.cache.exist(p) {
			return p
		}
	}
	return lib
}

// sonameProvided reports whether the dynamic linker in the container finds
// soname: a mounted file of that name in a folder it searches, a versioned
// file carrying that DT_SONAME in a folder the ldcache hook covers (the
// hook's ldconfig makes the link), or an entry of a whole mounted folder the
// hook covers that resolves in the container.
func (a *analyzer) sonameProvided(soname string) bool {
	folders, _ := a.ldcacheFolders()
	for _, l := range SpecHooks(a.spec, false).Links {
		if path.Base(l.Link) == soname && a.libSearchDir(path.Dir(l.Link)) {
			if e, err := a.container().Resolve(l.Link); err == nil && !e.Dir {
				return true
			}
		}
	}
	for _, m := range a.effectiveMounts() {
		cp := path.Clean(m.ContainerPath)
		dir := path.Dir(cp)
		if path.Base(cp) == soname && a.libSearchDir(dir) {
			return true
		}
		if slices.Contains(folders, dir) && a.soname(m.HostPath) == soname {
			return true
		}
		if slices.Contains(folders, cp) {
			if e, err := a.container().Resolve(path.Join(cp, soname)); err == nil && !e.Dir {
				return true
			}
		}
	}
	return false
}

func (a *analyzer) sonameLibrary(f GraphicsFile, soname string, apply bool) {
	if a.sonameProvided(soname) {
		return
	}
	var hostLib string
	for _, dir := range a.g.LibDirs {
		if p := path.Join(dir, soname); a.cache.exist(p) && a.sharedObject(p) {
			hostLib = p
			break
		}
	}
	switch {
	case hostLib == "":
		a.findings = append(a.findings, severityFor(f.Role, CodeUnresolvedLibrary, "%s %s names %s, which no mounted folder provides and none of %s holds as a shared library", f.Role, f.HostPath, soname, strings.Join(a.g.LibDirs, ", ")))
	case !apply || a.libDir() == "":
		a.findings = append(a.findings, severityFor(f.Role, CodeUnresolvedLibrary, "%s %s names %s, which no mounted folder the dynamic linker searches provides", f.Role, f.HostPath, soname))
	default:
		a.addMount("library", hostLib, path.Join(a.libDir(), soname))
	}
}

// sharedObject reports whether the file at hostPath is an ELF shared
// object (ET_DYN), as every library a loader manifest names must be.
func (a *analyzer) sharedObject(hostPath string) bool {
	info := a.cache.elf(hostPath)
	return info != nil && info.shared
}

// soname returns the DT_SONAME of the ELF file at hostPath, or "" for a
// file that is not ELF or has none (then only an exact file name matches).
func (a *analyzer) soname(hostPath string) string {
	if s, ok := a.sonames[hostPath]; ok {
		return s
	}
	s := ""
	if p, err := a.host.Path(hostPath); err == nil {
		if ef, err := elf.Open(p); err == nil {
			if names, err := ef.DynString(elf.DT_SONAME); err == nil && len(names) > 0 {
				s = names[0]
			}
			ef.Close()
		}
	}
	a.sonames[hostPath] = s
	return s
}
