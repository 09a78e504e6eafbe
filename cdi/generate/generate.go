package generate

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// Spec returns the CDI spec `nvidia-ctk cdi generate ARGS` of toolkit
// version toolkitVersion ("1.17.8", "1.20.2") writes on the host whose
// files are under root and whose GPUs and device nodes are host: the spec
// as the generator prints it, before anything (NixOS's module, nodeprep)
// adds to it. Errors: ParseToolkit's and ParseArgs's (ErrNotModelled,
// ErrRejected); a host the model does not cover (ErrNotModelled: a GPU in
// MIG mode, no GPU, no driver version, the driver's graphics configuration
// under /etc or /usr/share, a running daemon's IPC socket); what the
// generator itself fails on, no versioned driver library in the search
// path (ErrRejected, naming the directories) — these are marked
// fault.Malformed —, and an error reading the tree, wrapped as it is.
// Reading the tree only reads: nothing is written.
func Spec(root *hostfs.Root, host Host, toolkitVersion string, args []string) (*specs.Spec, error) {
	tk, err := ParseToolkit(toolkitVersion)
	if err != nil {
		return nil, err
	}
	o, err := ParseArgs(tk, args)
	if err != nil {
		return nil, err
	}
	if host.DriverVersion == "" {
		return nil, fault.Malformed(fmt.Errorf("host: no driver version: %w", ErrNotModelled))
	}
	g := &gen{root: root, host: host, tk: tk, o: o, ver: host.DriverVersion}
	s, err := g.spec()
	if err != nil {
		err = fmt.Errorf("predicting nvidia-ctk %s cdi generate under %s: %w", toolkitVersion, root.Dir(), err)
		if errors.Is(err, ErrNotModelled) || errors.Is(err, ErrRejected) {
			err = fault.Malformed(err)
		}
		return nil, err
	}
	return s, nil
}

type gen struct {
	root *hostfs.Root
	host Host
	tk   Toolkit
	o    Options
	ver  string
}

// hook builds a hook as the toolkit's hook creator does
// (internal/discover/hooks.go): nil when disabled; createRuntime for
// apply-cuda-memory-limits, createContainer otherwise; arguments led by
// the program's base name and, for nvidia-ctk, "hook".
func (g *gen) hook(name string, args ...string) *specs.Hook {
	if g.disabled(name, args) {
		return nil
	}
	base := path.Base(g.o.HookPath)
	full := []string{base}
	if base == "nvidia-ctk" {
		full = append(full, "hook")
	}
	full = append(full, name)
	switch name {
	case "create-symlinks":
		for _, a := range args {
			full = append(full, "--link", a)
		}
	case "chmod":
		full = append(full, "--mode", "755")
		for _, a := range args {
			full = append(full, "--path", a)
		}
	case "update-ldcache":
		if g.o.LdconfigPath != "" {
			full = append(full, "--ldconfig-path", g.o.LdconfigPath)
		}
		for _, a := range args {
			full = append(full, "--folder", a)
		}
	case "apply-cuda-memory-limits":
		full = append(full, "--driver-root", args[0])
		for _, a := range args[1:] {
			full = append(full, "--gpu-id", a)
		}
	default:
		full = append(full, args...)
	}
	kind := "createContainer"
	if name == "apply-cuda-memory-limits" {
		kind = "createRuntime"
	}
	return &specs.Hook{HookName: kind, Path: g.o.HookPath, Args: full, Env: []string{"NVIDIA_CTK_DEBUG=false"}}
}

// disabled says whether the hook creator leaves hook name out: in 1.17
// nothing is disabled but a symlink or chmod hook without arguments; in
// 1.20 --disable-hook (with chmod disabled by default and "all" for every
// hook), --enable-hook overriding it, and the hooks that need arguments.
func (g *gen) disabled(name string, args []string) bool {
	if g.tk == V117 {
		return (name == "create-symlinks" || name == "chmod") && len(args) == 0
	}
	dis := map[string]bool{"chmod": true}
	for _, h := range g.o.DisabledHooks {
		dis[h] = true
	}
	if dis["all"] && len(g.o.EnabledHooks) == 0 {
		return true
	}
	for _, h := range g.o.EnabledHooks {
		dis[h] = false
	}
	if d, ok := dis[name]; ok {
		return d
	}
	if dis["all"] {
		return true
	}
	switch name {
	case "create-symlinks", "chmod", "apply-cuda-memory-limits":
		return len(args) == 0
	}
	return false
}

// edits collects one discoverer's output in order.
type edits struct {
	nodes  []*specs.DeviceNode
	mounts []*specs.Mount
	hooks  []*specs.Hook
	env    []string
}

func (e *edits) addHook(h *specs.Hook) {
	if h != nil {
		e.hooks = append(e.hooks, h)
	}
}

func (g *gen) spec() (*specs.Spec, error) {
	if len(g.host.Devices) == 0 {
		return nil, notModelled("a host without GPUs")
	}
	common, err := g.common()
	if err != nil {
		return nil, err
	}
	var devices []specs.Device
	for _, d := range g.host.Devices {
		if d.MIG {
			return nil, notModelled("GPU %d (%s) in MIG mode", d.Index, d.UUID)
		}
		e := g.device(d)
		for _, strategy := range g.o.NameStrategies {
			devices = append(devices, specs.Device{Name: deviceName(strategy, d), ContainerEdits: e.containerEdits()})
		}
	}
	// The written spec lists its devices by name, and the "all" device
	// merges them in that order.
	slices.SortStableFunc(devices, func(a, b specs.Device) int { return strings.Compare(a.Name, b.Name) })
	if !g.o.NoAllDevice && !slices.ContainsFunc(devices, func(d specs.Device) bool { return d.Name == "all" }) {
		devices = append(devices, specs.Device{Name: "all", ContainerEdits: mergeAll(devices)})
		slices.SortStableFunc(devices, func(a, b specs.Device) int { return strings.Compare(a.Name, b.Name) })
	}
	for i := range devices {
		sortNodes(devices[i].ContainerEdits.DeviceNodes)
	}
	s := &specs.Spec{
		Kind:           g.o.Vendor + "/" + g.o.Class,
		Devices:        devices,
		ContainerEdits: common.containerEdits(),
	}
	sortNodes(s.ContainerEdits.DeviceNodes)
	// The toolkit saves the spec with the lowest cdiVersion that can hold
	// it (pkg/nvcdi/spec: setMinimumRequiredVersion).
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, err
	}
	s.Version = v
	return s, nil
}

// deviceName is a device's name under one strategy (pkg/nvcdi/namer.go).
func deviceName(strategy string, d Device) string {
	switch strategy {
	case "uuid":
		return d.UUID
	case "type-index":
		return fmt.Sprintf("gpu%d", d.Index)
	}
	return fmt.Sprint(d.Index)
}

func (e edits) containerEdits() specs.ContainerEdits {
	return specs.ContainerEdits{Env: e.env, DeviceNodes: e.nodes, Mounts: e.mounts, Hooks: e.hooks}
}

// mergeAll is the "all" device: every device's edits, in name order, each
// device node and hook once (pkg/nvcdi/transform/merged-device.go).
func mergeAll(devices []specs.Device) specs.ContainerEdits {
	var all edits
	seenNode := map[string]bool{}
	for _, d := range devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			if !seenNode[n.Path] {
				seenNode[n.Path] = true
				all.nodes = append(all.nodes, n)
			}
		}
		for _, h := range d.ContainerEdits.Hooks {
			if !slices.ContainsFunc(all.hooks, func(x *specs.Hook) bool { return sameHook(x, h) }) {
				all.hooks = append(all.hooks, h)
			}
		}
	}
	return all.containerEdits()
}

// sortNodes puts device nodes in the written spec's order: shallower
// paths first, then by path (pkg/nvcdi/transform/sorter.go's rule, which
// the merged "all" device shows).
func sortNodes(nodes []*specs.DeviceNode) {
	slices.SortStableFunc(nodes, func(a, b *specs.DeviceNode) int {
		if da, db := strings.Count(path.Clean(a.Path), "/"), strings.Count(path.Clean(b.Path), "/"); da != db {
			return da - db
		}
		return strings.Compare(a.Path, b.Path)
	})
}

func sameHook(a, b *specs.Hook) bool {
	return a.HookName == b.HookName && a.Path == b.Path && slices.Equal(a.Args, b.Args) && slices.Equal(a.Env, b.Env)
}

// deviceNode is a char device as the generator writes it: 1.17 names the
// path only; 1.20 adds the numbers and mode stat reports and "rwm". A node
// absent from the host is left out.
func (g *gen) deviceNode(p string) *specs.DeviceNode {
	n, ok := g.host.node(p)
	if !ok {
		return nil
	}
	if g.tk == V117 {
		return &specs.DeviceNode{Path: p}
	}
	mode := n.Mode.Perm()
	return &specs.DeviceNode{Path: p, Major: n.Major, Minor: n.Minor, FileMode: &mode, Permissions: "rwm"}
}

// device is one GPU's edits (pkg/nvcdi/full-gpu-nvml.go,
// internal/platform-support/dgpu): its /dev/nvidia<minor> and DRM nodes,
// the by-path symlinks of those DRM nodes, the /dev/dri chmod hook (1.17;
// disabled by default in 1.20) and, in 1.20, apply-cuda-memory-limits.
func (g *gen) device(d Device) edits {
	var e edits
	paths := []string{fmt.Sprintf("/dev/nvidia%d", d.Minor)}
	drm := slices.Clone(d.DRM)
	slices.Sort(drm)
	for _, n := range drm {
		paths = append(paths, "/dev/dri/"+n)
	}
	var present []string
	for _, p := range paths {
		if n := g.deviceNode(p); n != nil {
			e.nodes = append(e.nodes, n)
			present = append(present, p)
		}
	}
	var links []string
	byPath := slices.Clone(g.host.ByPath)
	slices.SortFunc(byPath, func(a, b Link) int { return strings.Compare(a.Path, b.Path) })
	for _, l := range byPath {
		if !strings.HasPrefix(l.Path, "/dev/dri/by-path/pci-") {
			continue
		}
		for _, p := range present[1:] {
			if path.Base(l.Target) == path.Base(p) {
				links = append(links, l.Target+"::"+l.Path)
				break
			}
		}
	}
	e.addHook(g.hook("create-symlinks", links...))
	var folders []string
	for _, p := range present {
		if dir := path.Dir(p); dir == "/dev/dri" || dir == "/dev/nvidia-caps" {
			if !slices.Contains(folders, dir) {
				folders = append(folders, dir)
			}
		}
	}
	e.addHook(g.hook("chmod", folders...))
	if g.tk == V120 {
		e.addHook(g.hook("apply-cuda-memory-limits", g.o.DriverRoot, d.UUID))
	}
	return e
}

// common is the edits every device shares (pkg/nvcdi/common-nvml.go,
// driver-nvml.go, wrapper.go): the control nodes, the graphics libraries,
// the driver's versioned libraries with their symlinks, the CUDA compat
// and ldcache hooks (and, in 1.20, disable-device-node-modification,
// NVIDIA_CTK_LIBCUDA_DIR and update-application-profile), then
// NVIDIA_VISIBLE_DEVICES=void (and, in 1.20, the void mount).
func (g *gen) common() (edits, error) {
	var e edits
	for _, p := range []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"} {
		if n := g.deviceNode(p); n != nil {
			e.nodes = append(e.nodes, n)
		}
	}
	if err := g.noGraphicsConfigs(); err != nil {
		return e, err
	}
	dirs, err := g.libraryDirs()
	if err != nil {
		return e, err
	}
	opts := []string{"ro", "nosuid", "nodev", "bind"}
	if g.tk == V120 {
		opts = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
	}
	mount := func(p string) *specs.Mount {
		return &specs.Mount{HostPath: p, ContainerPath: p, Options: slices.Clone(opts)}
	}

	// Graphics libraries (internal/discover/graphics.go): the EGL platform
	// libraries by X.Y.Z pattern, libnvidia-allocator (a gbm link, not a
	// mount) and libnvidia-vulkan-producer, the X.Org modules.
	gpat := []string{"libnvidia-egl-gbm.so.*.*", "libnvidia-egl-wayland.so.*.*"}
	if g.tk == V120 {
		gpat = append(gpat, "libnvidia-egl-wayland2.so.*.*", "libnvidia-egl-xcb.so.*.*", "libnvidia-egl-xlib.so.*.*")
	}
	gpat = append(gpat, "libnvidia-allocator.so."+g.ver, "libnvidia-vulkan-producer.so."+g.ver)
	graphics, err := g.locate(g.o.LibrarySearchPaths, gpat, 0)
	if err != nil {
		return e, err
	}
	xorg, err := g.locate(xorgPaths(dirs), []string{"nvidia_drv.so", "libglxserver_nvidia.so." + g.ver}, 1)
	if err != nil {
		return e, err
	}
	graphics = append(graphics, xorg...)
	var glinks []string
	for _, p := range graphics {
		dir, file := path.Split(p)
		switch file {
		case "libnvidia-allocator.so." + g.ver:
			glinks = append(glinks, "../libnvidia-allocator.so.1::"+path.Join(dir, "gbm", "nvidia-drm_gbm.so"))
			continue
		case "libnvidia-vulkan-producer.so." + g.ver:
			glinks = append(glinks, file+"::"+path.Join(dir, "libnvidia-vulkan-producer.so"))
		case "libglxserver_nvidia.so." + g.ver:
			glinks = append(glinks, file+"::"+path.Join(dir, "libglxserver_nvidia.so"))
		}
		e.mounts = append(e.mounts, mount(p))
	}
	e.addHook(g.hook("create-symlinks", glinks...))

	// The driver's versioned libraries (driver-nvml.go: *.so.<version> in
	// the driver library directories and their vdpau folder, and the legacy
	// libnvidia-nvvm70).
	var search []string
	for _, d := range dirs {
		search = append(search, d, path.Join(d, "vdpau"))
	}
	libs, err := g.locate(search, []string{"*.so." + g.ver}, 0)
	if err != nil {
		return e, err
	}
	if g.tk == V120 {
		nvvm, err := g.locate(dirs, []string{"libnvidia-nvvm70.so.*"}, 0)
		if err != nil {
			return e, err
		}
		libs = appendNew(libs, nvvm...)
	}
	for _, p := range libs {
		e.mounts = append(e.mounts, mount(p))
	}
	links, err := g.driverLinks(libs)
	if err != nil {
		return e, err
	}
	e.addHook(g.hook("create-symlinks", links...))
	e.addHook(g.hook("enable-cuda-compat", "--host-driver-version="+g.ver))
	var folders []string
	for _, p := range libs {
		folders = appendNew(folders, path.Dir(p))
	}
	e.addHook(g.hook("update-ldcache", folders...))
	if g.tk == V120 {
		e.addHook(g.hook("disable-device-node-modification"))
		e.env = append(e.env, "NVIDIA_CTK_LIBCUDA_DIR="+strings.Join(dirs, ":"))
		e.addHook(g.hook("update-application-profile"))
	}
	e.env = append(e.env, "NVIDIA_VISIBLE_DEVICES=void")
	if g.tk == V120 {
		e.mounts = append(e.mounts, &specs.Mount{HostPath: "/dev/null", ContainerPath: "/var/run/nvidia-container-devices/void", Options: []string{"ro", "nosuid", "nodev", "bind"}})
	}
	// The written spec has its mounts in host-path order, each once.
	slices.SortStableFunc(e.mounts, func(a, b *specs.Mount) int { return strings.Compare(a.HostPath, b.HostPath) })
	e.mounts = slices.CompactFunc(e.mounts, func(a, b *specs.Mount) bool { return a.HostPath == b.HostPath && a.ContainerPath == b.ContainerPath })
	return e, nil
}

// graphicsConfigs are the driver's configuration files the generator
// mounts when it finds them under /etc, /usr/local/share or /usr/share
// (internal/discover/graphics.go: newGraphicsConfigsDiscoverer,
// newVulkanConfigsDiscover). A NixOS host keeps them in the driver package
// and /run/opengl-driver, where the generator does not look; the model
// covers only that case.
var graphicsConfigs = []string{
	"glvnd/egl_vendor.d/10_nvidia.json",
	"egl/egl_external_platform.d/15_nvidia_gbm.json",
	"egl/egl_external_platform.d/10_nvidia_wayland.json",
	"egl/egl_external_platform.d/09_nvidia_wayland2.json",
	"egl/egl_external_platform.d/20_nvidia_xcb.json",
	"egl/egl_external_platform.d/20_nvidia_xlib.json",
	"nvidia/nvoptix.bin",
	"X11/xorg.conf.d/10-nvidia.conf",
	"X11/xorg.conf.d/nvidia-drm-outputclass.conf",
	"OpenCL/vendors/nvidia.icd",
	"vulkan/icd.d/nvidia_icd.json",
	"vulkan/icd.d/nvidia_icd.x86_64.json",
	"vulkan/icd.d/nvidia_icd.aarch64.json",
	"vulkan/icd.d/nvidia_layers.json",
	"vulkan/implicit_layer.d/nvidia_layers.json",
}

// noGraphicsConfigs refuses a host that has one of graphicsConfigs where
// the generator looks, or an IPC socket (ErrNotModelled).
func (g *gen) noGraphicsConfigs() error {
	// The IPC sockets and the MPS directory a running node may have
	// (internal/discover/ipc.go) exist only at run time; the model covers
	// a host without them.
	for _, p := range []string{"/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket",
		"/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps"} {
		if _, err := g.root.Lstat(p); err == nil {
			return notModelled("%s (a running daemon's socket, which the generator would mount)", p)
		}
	}
	for _, dir := range []string{"/etc", "/usr/local/share", "/usr/share"} {
		for _, c := range graphicsConfigs {
			if p := path.Join(dir, c); g.root.Exists(p) {
				return notModelled("%s (driver configuration where the generator looks for it; a NixOS host has none)", p)
			}
		}
	}
	return nil
}

// libraryDirs are the directories of the lib*.so.<version> files the
// search path holds (internal/lookup/root/root.go: updateInfo), each once,
// in search order. None is the generator's own failure: it cannot find
// the driver.
func (g *gen) libraryDirs() ([]string, error) {
	found, err := g.locate(g.o.LibrarySearchPaths, []string{"lib*.so." + g.ver}, 0)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, p := range found {
		dirs = appendNew(dirs, path.Dir(p))
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%w: no lib*.so.%s in %s: the generator fails to find the driver libraries", ErrRejected, g.ver, strings.Join(g.o.LibrarySearchPaths, ", "))
	}
	return dirs, nil
}

// locate finds the files matching patterns in each directory in turn, as
// the toolkit's symlink locator does: every match, links followed to the
// file (inside the root), each file once; count > 0 stops after that many.
func (g *gen) locate(dirs, patterns []string, count int) ([]string, error) {
	var out []string
	for _, dir := range dirs {
		for _, pat := range patterns {
			matches, err := g.root.Glob(path.Join(dir, pat))
			if err != nil {
				return nil, fmt.Errorf("searching %s for %s: %w", dir, pat, err)
			}
			for _, m := range matches {
				resolved, err := g.root.Resolve(m)
				if err != nil {
					continue
				}
				if fi, err := g.root.Stat(resolved); err != nil || !fi.Mode().IsRegular() {
					continue
				}
				out = appendNew(out, resolved)
				if count > 0 && len(out) >= count {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// xorgPaths are the X.Org module directories the generator searches
// (graphics.go: buildXOrgSearchPaths).
func xorgPaths(libDirs []string) []string {
	var out []string
	for _, d := range libDirs {
		out = append(out, path.Join(d, "nvidia/xorg"), path.Join(d, "xorg/modules/drivers"), path.Join(d, "xorg/modules/extensions"),
			path.Join(d, "xorg/modules/updates/drivers"), path.Join(d, "xorg/modules/updates/extensions"))
	}
	for _, r := range []string{"/usr/lib/xorg/modules", "/usr/lib64/xorg/modules", "/usr/X11R6/lib/modules", "/usr/X11R6/lib64/modules"} {
		out = append(out, path.Join(r, "drivers"), path.Join(r, "extensions"), path.Join(r, "updates/drivers"), path.Join(r, "updates/extensions"))
	}
	return out
}

// driverLinks are the create-symlinks links for the versioned libraries
// (internal/discover/symlinks.go): libcuda.so, libGLX_indirect.so.0 and
// libnvidia-opticalflow.so for both lines; in 1.20 also each library's
// SONAME link and its .so link, where the host's library directory has
// them.
func (g *gen) driverLinks(libs []string) ([]string, error) {
	var links []string
	for _, p := range libs {
		dir, file := path.Split(p)
		var l []string
		switch file {
		case "libcuda.so." + g.ver:
			l = append(l, "libcuda.so.1::"+path.Join(dir, "libcuda.so"))
		case "libGLX_nvidia.so." + g.ver:
			l = append(l, file+"::"+path.Join(dir, "libGLX_indirect.so.0"))
		case "libnvidia-opticalflow.so." + g.ver:
			l = append(l, "libnvidia-opticalflow.so.1::"+path.Join(dir, "libnvidia-opticalflow.so"))
		}
		if g.tk == V120 {
			so, err := g.soLinks(p)
			if err != nil {
				return nil, err
			}
			l = append(l, so...)
		}
		links = appendNew(links, l...)
	}
	return links, nil
}

// soLinks are the 1.20 links of one library: SONAME -> file when the
// SONAME differs from the file name and a link of that name exists beside
// it, and <name>.so -> SONAME when that link exists.
func (g *gen) soLinks(p string) ([]string, error) {
	dir, file := path.Split(p)
	soname, err := g.soname(p)
	if err != nil {
		return nil, err
	}
	var out []string
	if soname != "" && soname != file && g.isLink(path.Join(dir, soname)) {
		out = append(out, file+"::"+path.Join(dir, soname))
	}
	target := soname
	if target == "" {
		target = file
	}
	if so := soLink(target); so != target && g.isLink(path.Join(dir, so)) {
		out = append(out, target+"::"+path.Join(dir, so))
	}
	return out, nil
}

// soLink is a library name cut after ".so" (libcuda.so.1 -> libcuda.so).
func soLink(name string) string {
	if i := strings.Index(name, ".so"); i >= 0 {
		return name[:i+3]
	}
	return name
}

func (g *gen) isLink(p string) bool {
	fi, err := g.root.Lstat(p)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// soname reads the library's DT_SONAME ("" when it has none or is not
// ELF, as the toolkit's getSoname then gives no link).
func (g *gen) soname(p string) (string, error) {
	f, err := g.root.OpenRegular(p)
	if err != nil {
		return "", fmt.Errorf("reading the SONAME of %s: %w", p, err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return "", nil
	}
	defer ef.Close()
	names, err := ef.DynString(elf.DT_SONAME)
	if err != nil || len(names) == 0 {
		return "", nil
	}
	return names[0], nil
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}
