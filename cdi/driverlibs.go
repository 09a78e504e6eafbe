package cdi

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// VulkanCompanions are the libraries the NVIDIA Vulkan driver
// (libGLX_nvidia) opens itself with dlopen, by file name with the driver
// version appended: they are in no DT_NEEDED, so only knowing them gets them
// into the container. Without them vkCreateDevice fails inside with
// "unable to open libnvidia-glvkspirv.so.<ver>" (the SPIR-V compiler) or the
// shader compiler's equivalent (libnvidia-gpucomp, drivers since 530).
var VulkanCompanions = []string{"libnvidia-glvkspirv.so.", "libnvidia-gpucomp.so."}

// GraphicsCoreLibraries are the NVIDIA driver's OpenGL and EGL core
// libraries, by file name with the driver version appended: libnvidia-eglcore
// and libnvidia-glsi (EGL and OpenGL ES), libnvidia-glcore (OpenGL and the
// Vulkan driver in libGLX_nvidia) and libnvidia-tls (their thread-local
// storage). The vendor libraries (GraphicsVendorLibraries) load them, but a
// driver build need not name them in DT_NEEDED, so only knowing them gets
// them into the container. NVIDIA's toolkit mounts them as libraries of the
// driver's version (nvidia-container-toolkit pkg/nvcdi/driver-nvml.go,
// getVersionLibs); a spec that misses them (nvidia-container-toolkit#1908:
// the generator looked only in libcuda.so's folder) leaves EGL to fall back
// to Mesa without an error. Each one is required only when the driver root
// has it at the driver's version: a driver that does not ship one does not
// need it.
var GraphicsCoreLibraries = []string{"libnvidia-eglcore.so.", "libnvidia-glcore.so.", "libnvidia-glsi.so.", "libnvidia-tls.so."}

// GraphicsVendorLibraries are the file name prefixes of the NVIDIA driver's
// vendor libraries that libglvnd and the Vulkan loader open (EGL, GLX and
// Vulkan, OpenGL ES): a spec that mounts one of them needs the
// GraphicsCoreLibraries too.
var GraphicsVendorLibraries = []string{"libEGL_nvidia.so.", "libGLX_nvidia.so.", "libGLESv2_nvidia.so.", "libGLESv1_CM_nvidia.so."}

// driverVersionSuffix matches a driver library's version suffix
// (".so.550.54.15").
var driverVersionSuffix = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\.so\.(\d+\.\d+(?:\.\d+)?)$`) })

// requirement is a library a mounted driver library needs in the
// container, by file name.
type requirement struct {
	name string // file name, also its soname ("libnvidia-glvkspirv.so.550.54.15")
	by   string // container path of the library that needs it
	why  string // "DT_NEEDED", "dlopen" or "graphics core"
}

// whyCore is requirement.why for the GraphicsCoreLibraries.
const whyCore = "graphics core"

// driverLibs reports and (with apply) mounts every library a mounted driver
// library needs that the container lacks: each DT_NEEDED that lives in the
// driver root's lib directory, the Vulkan driver's companions, and, for a
// mounted vendor library (GraphicsVendorLibraries), each of the
// GraphicsCoreLibraries the driver root has at the driver's version. A
// mounted driver library is a mount whose host file the driver root's lib
// directory holds under its name or the name of the file it resolves to. Each missing one goes next to the library
// that needs it when the dynamic linker searches that folder, else to the
// container library directory.
func (a *analyzer) driverLibs(apply bool) {
	if len(a.g.LibDirs) == 0 {
		return
	}
	driverLib := a.g.LibDirs[0]
	var reqs []requirement
	seen := map[string]bool{}
	add := func(r requirement) {
		if !seen[r.name] {
			seen[r.name] = true
			reqs = append(reqs, r)
		}
	}
	vulkan := a.vulkanDriver(driverLib)
	for _, m := range a.effectiveMounts() {
		if _, ok := a.driverName(driverLib, m.HostPath); !ok {
			continue
		}
		for _, n := range a.needed(m.HostPath) {
			if a.cache.exist(path.Join(driverLib, n)) {
				add(requirement{name: n, by: path.Clean(m.ContainerPath), why: "DT_NEEDED"})
			}
		}
		if vulkan.real != "" && a.resolve(m.HostPath) == vulkan.real && vulkan.version != "" && vulkan.nvidia {
			for _, c := range VulkanCompanions {
				add(requirement{name: c + vulkan.version, by: path.Clean(m.ContainerPath), why: "dlopen"})
			}
		}
		if v := a.vendorLibVersion(m.HostPath); v != "" {
			for _, c := range GraphicsCoreLibraries {
				// Only what this driver ships: the set has changed
				// between driver releases.
				if a.cache.exist(path.Join(driverLib, c+v)) {
					add(requirement{name: c + v, by: path.Clean(m.ContainerPath), why: whyCore})
				}
			}
		}
	}
	for _, r := range reqs {
		if a.sonameProvided(r.name) {
			continue
		}
		hostLib := path.Join(driverLib, r.name)
		if !a.cache.exist(hostLib) {
			a.findings = append(a.findings, errorf(CodeMissingDriverLibrary, "%s opens %s (%s), which %s does not have: the driver fails inside the container", r.by, r.name, r.why, driverLib))
			continue
		}
		if !apply {
			if r.why == whyCore {
				a.findings = append(a.findings, errorf(CodeMissingDriverLibrary, "%s needs %s, one of the driver's OpenGL/EGL core libraries, which no mount puts where the dynamic linker looks in the container: EGL then falls back to Mesa without an error (nvidia-container-toolkit#1908); nodeprep cdi patch mounts %s", r.by, r.name, hostLib))
				continue
			}
			a.findings = append(a.findings, errorf(CodeMissingDriverLibrary, "%s opens %s (%s), which no mount puts where the dynamic linker looks in the container", r.by, r.name, r.why))
			continue
		}
		dir := path.Dir(r.by)
		if !a.libSearchDir(dir) {
			dir = a.libDir()
		}
		a.addMount("driver-library", hostLib, path.Join(dir, r.name))
	}
}

// vendorLibVersion returns the driver version whose GraphicsCoreLibraries
// the library at hostPath needs: for one of the GraphicsVendorLibraries (by
// its own name or that of the file it resolves to),
// Graphics.DriverVersion (NVML's), else the version suffix of its file;
// "" for any other library.
func (a *analyzer) vendorLibVersion(hostPath string) string {
	real := a.resolve(hostPath)
	vendor := false
	for _, name := range []string{path.Base(hostPath), path.Base(real)} {
		vendor = vendor || slices.ContainsFunc(GraphicsVendorLibraries, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	if !vendor {
		return ""
	}
	if a.g.DriverVersion != "" {
		return a.g.DriverVersion
	}
	if m := driverLibVersion().FindStringSubmatch(path.Base(real)); m != nil {
		return m[1]
	}
	return ""
}

// vulkanLib is the Vulkan driver library's file (the host path it finally
// resolves to), the driver version, and whether it is NVIDIA's (its file is
// libGLX_nvidia.so.*: only NVIDIA's driver opens the companions).
type vulkanLib struct {
	real, version string
	nvidia        bool
}

// driverName returns the name under which driverLib holds the file
// hostPath names (its own name, or that of the file it resolves to), and
// false when the driver root's lib directory does not hold it.
func (a *analyzer) driverName(driverLib, hostPath string) (string, bool) {
	names := a.cache.list(driverLib)
	real := a.resolve(hostPath)
	for _, name := range []string{path.Base(hostPath), path.Base(real)} {
		if names[name] && a.resolve(path.Join(driverLib, name)) == real {
			return name, true
		}
	}
	return "", false
}

// vulkanDriver finds the library the ICD manifest names among the driver
// root's libraries, and the driver version: Graphics.DriverVersion
// (NVML's), else the version suffix of the file it resolves to.
func (a *analyzer) vulkanDriver(driverLib string) vulkanLib {
	for _, f := range a.g.Files {
		if f.Role != RoleICD || f.Manifest == nil || len(f.Manifest.Libraries) == 0 {
			continue
		}
		lib := f.Manifest.Libraries[0]
		host := lib
		if !path.IsAbs(lib) {
			host = path.Join(a.g.LibDirs[0], path.Base(lib))
		}
		real := a.resolve(host)
		if _, ok := a.driverName(driverLib, host); !ok {
			return vulkanLib{}
		}
		v := a.g.DriverVersion
		if v == "" {
			if m := driverVersionSuffix().FindStringSubmatch(path.Base(real)); m != nil {
				v = m[1]
			}
		}
		return vulkanLib{real: real, version: v, nvidia: strings.HasPrefix(path.Base(real), "libGLX_nvidia.so")}
	}
	return vulkanLib{}
}

// needed returns the DT_NEEDED entries of the ELF file at hostPath (none
// for a file that is not ELF).
func (a *analyzer) needed(hostPath string) []string {
	if info := a.cache.elf(hostPath); info != nil {
		return info.needed
	}
	return nil
}

// ModesetNode is the device node of nvidia-modeset.ko, which the NVIDIA
// Vulkan driver opens also without a display: without it in the container
// vkCreateInstance finds no NVIDIA physical device.
const ModesetNode = "/dev/nvidia-modeset"

// deviceNodes makes sure every container with a GPU gets the device nodes
// the graphics driver opens besides the GPU's own: /dev/nvidia-modeset
// when Vulkan is to be used (an ICD manifest was found). On the host but
// not in the spec: added to the top-level deviceNodes (with apply) or
// reported; on neither: reported.
func (a *analyzer) deviceNodes(apply bool) {
	if !slices.ContainsFunc(a.g.Files, func(f GraphicsFile) bool { return f.Role == RoleICD }) {
		return
	}
	if a.hasDeviceNode(ModesetNode) {
		return
	}
	switch {
	case !a.cache.exist(ModesetNode):
		a.findings = append(a.findings, errorf(CodeMissingDeviceNode, "%s is neither in the spec nor on the host: the Vulkan driver opens it (also without a display); load nvidia-modeset (NixOS: hardware.nvidia.modesetting.enable)", ModesetNode))
	case !apply:
		a.findings = append(a.findings, errorf(CodeMissingDeviceNode, "%s is on the host but not in the spec: the Vulkan driver opens it (also without a display)", ModesetNode))
	default:
		a.spec.ContainerEdits.DeviceNodes = append(a.spec.ContainerEdits.DeviceNodes, &specs.DeviceNode{Path: ModesetNode})
		a.changes = append(a.changes, Change{Action: "add", Role: "device-node", HostPath: ModesetNode, ContainerPath: ModesetNode})
	}
}

// hasDeviceNode reports whether every container with any of the spec's
// devices gets the device node p: in the top-level edits or in every
// device's.
func (a *analyzer) hasDeviceNode(p string) bool {
	has := func(e specs.ContainerEdits) bool {
		return slices.ContainsFunc(e.DeviceNodes, func(d *specs.DeviceNode) bool { return d.Path == p })
	}
	if has(a.spec.ContainerEdits) {
		return true
	}
	if len(a.spec.Devices) == 0 {
		return false
	}
	for _, d := range a.spec.Devices {
		if !has(d.ContainerEdits) {
			return false
		}
	}
	return true
}

// driverLibVersion matches the version suffix of a library of the NVIDIA
// driver itself (".so.550.54.15", ".so.580.95.05"): a major of three or
// more digits, which no library bundled with the driver under its own
// version (libnvidia-egl-wayland.so.1.1.13) has.
var driverLibVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\.so\.(\d{3,}\.\d+(?:\.\d+)?)$`) })

// driverVersions reports a spec that mounts driver libraries of more than
// one driver version (an old store path left after an upgrade), or of a
// version other than the driver's (Graphics.DriverVersion, from NVML): the
// libraries of one driver only work with each other and with its kernel
// module. It looks at every mount of the spec, top level and per device.
func (a *analyzer) driverVersions() {
	byVersion := map[string][]string{}
	var versions []string
	edits := []specs.ContainerEdits{a.spec.ContainerEdits}
	for _, d := range a.spec.Devices {
		edits = append(edits, d.ContainerEdits)
	}
	for _, e := range edits {
		for _, m := range e.Mounts {
			v := driverLibVersion().FindStringSubmatch(path.Base(m.HostPath))
			if v == nil || slices.Contains(byVersion[v[1]], m.HostPath) {
				continue
			}
			if len(byVersion[v[1]]) == 0 {
				versions = append(versions, v[1])
			}
			byVersion[v[1]] = append(byVersion[v[1]], m.HostPath)
		}
	}
	slices.Sort(versions)
	want := a.g.DriverVersion
	switch {
	case len(versions) > 1:
		var parts []string
		for _, v := range versions {
			parts = append(parts, fmt.Sprintf("%s (%d, e.g. %s)", v, len(byVersion[v]), byVersion[v][0]))
		}
		a.findings = append(a.findings, errorf(CodeMixedDriverVersion, "the spec mounts driver libraries of %d versions: %s; one driver's libraries work only together (regenerate the spec after the upgrade)", len(versions), strings.Join(parts, "; ")))
	case len(versions) == 1 && want != "" && versions[0] != want:
		a.findings = append(a.findings, errorf(CodeMixedDriverVersion, "the spec mounts driver libraries of %s (e.g. %s) but the driver is %s: regenerate the spec", versions[0], byVersion[versions[0]][0], want))
	}
}

// UVMNodes are the device nodes of the nvidia-uvm module, which the CUDA
// driver opens in every process that uses CUDA: without them in the
// container cuInit fails ("no CUDA-capable device is detected") although
// the GPU's own node is there. Vulkan and EGL do not open them.
var UVMNodes = []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// gpuNode matches a GPU's own device node, /dev/nvidia<minor>.
var gpuNode = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// uvmNodes reports the UVMNodes that a container with any of the spec's
// GPU devices (those whose edits, or the spec's top-level edits, carry a
// /dev/nvidia<minor> or a MIG capability node) does not get. The generator
// adds them only when they exist as it runs: a spec generated before
// nvidia-uvm was loaded lacks them (nvidia-container-toolkit PRs #1979 and
// #1982, nixpkgs#286028). nodeprep does not add them itself: the spec is
// the generator's knowledge of the host, and a spec generated at the wrong
// moment has to be generated again. The finding says whether the host has
// the nodes now (regenerate) or not (the module is not loaded).
func (a *analyzer) uvmNodes() {
	carriesGPU := func(e specs.ContainerEdits) bool {
		return slices.ContainsFunc(e.DeviceNodes, func(d *specs.DeviceNode) bool {
			return gpuNode.MatchString(d.Path) || strings.HasPrefix(d.Path, MIGCapsDir+"/")
		})
	}
	has := func(e specs.ContainerEdits, p string) bool {
		return slices.ContainsFunc(e.DeviceNodes, func(d *specs.DeviceNode) bool { return d.Path == p })
	}
	allGPU := carriesGPU(a.spec.ContainerEdits)
	var missing []string
	for _, n := range UVMNodes {
		if has(a.spec.ContainerEdits, n) {
			continue
		}
		var lacking []string
		for _, d := range a.spec.Devices {
			if (allGPU || carriesGPU(d.ContainerEdits)) && !has(d.ContainerEdits, n) {
				lacking = append(lacking, d.Name)
			}
		}
		if len(lacking) > 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return
	}
	var absent []string
	for _, n := range missing {
		if !a.cache.exist(n) {
			absent = append(absent, n)
		}
	}
	what := fmt.Sprintf("the spec gives the GPU devices no %s: every CUDA call in the container fails (\"no CUDA-capable device is detected\") while Vulkan and EGL work", strings.Join(missing, " or "))
	if len(absent) > 0 {
		a.findings = append(a.findings, errorf(CodeMissingUVMNode, "%s, and the host has no %s either: the nvidia-uvm module is not loaded; load it at boot (NixOS: boot.kernelModules = [ \"nvidia_uvm\" ] beside hardware.nvidia; elsewhere nvidia-modprobe -u -c0), then regenerate the spec (nvidia-ctk cdi generate; NixOS: systemctl restart nvidia-container-toolkit-cdi-generator)", what, strings.Join(absent, " or ")))
		return
	}
	a.findings = append(a.findings, errorf(CodeMissingUVMNode, "%s; the host has them now, so the generator ran before nvidia-uvm was loaded (nvidia-container-toolkit #1979, #1982; nixpkgs#286028): load nvidia-uvm before the generator and regenerate the spec (nvidia-ctk cdi generate; NixOS: systemctl restart nvidia-container-toolkit-cdi-generator)", what))
}
