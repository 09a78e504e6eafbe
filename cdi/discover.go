package cdi

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/manifest"
)

// ContainerPaths are where the graphics files appear in the container: the
// paths FHS loaders search. DefaultContainerPaths gives the defaults.
type ContainerPaths struct {
	// ICD is the Vulkan ICD manifest's path ("/etc/vulkan/icd.d/nvidia_icd.json").
	ICD string `yaml:"icd" json:"icd"`
	// ImplicitLayer is the Vulkan implicit layer manifest's path.
	ImplicitLayer string `yaml:"implicitLayer" json:"implicitLayer"`
	// EGLVendor is the glvnd EGL vendor manifest's path.
	EGLVendor string `yaml:"eglVendor" json:"eglVendor"`
	// EGLExternalPlatformDir is the directory EGL external platform
	// manifests go to, under their own names.
	EGLExternalPlatformDir string `yaml:"eglExternalPlatformDir" json:"eglExternalPlatformDir"`
	// LibDir is the multiarch library directory ("/usr/lib/x86_64-linux-gnu")
	// the glvnd dispatch libraries, the GBM backend (in gbm/) and any library
	// a manifest names by soname go to.
	LibDir string `yaml:"libDir" json:"libDir"`
}

// DefaultContainerPaths returns the FHS container paths for a GOARCH
// ("amd64", "arm64"): Vulkan-Loader searches /etc/vulkan/icd.d, libglvnd
// /usr/share/glvnd/egl_vendor.d, Debian's multiarch tuple names the library
// directory.
func DefaultContainerPaths(arch string) ContainerPaths {
	return ContainerPaths{
		ICD:                    "/etc/vulkan/icd.d/nvidia_icd.json",
		ImplicitLayer:          "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
		EGLVendor:              "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
		EGLExternalPlatformDir: "/usr/share/egl/egl_external_platform.d",
		LibDir:                 "/usr/lib/" + MultiarchTuple(arch),
	}
}

// MultiarchTuple returns Debian's multiarch tuple for a GOARCH
// ("amd64" → "x86_64-linux-gnu", "arm64" → "aarch64-linux-gnu"); other
// architectures get "<arch>-linux-gnu".
func MultiarchTuple(arch string) string {
	return machine(arch) + "-linux-gnu"
}

// machine is the kernel's machine name (uname -m) for a GOARCH, which is
// what the ICD manifest file names use ("nvidia_icd.x86_64.json").
func machine(arch string) string {
	switch arch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	}
	return arch
}

// Role says what a graphics file is for.
type Role string

// Roles of graphics files.
const (
	RoleICD         Role = "vulkan-icd"            // the Vulkan ICD manifest
	RoleLayer       Role = "vulkan-implicit-layer" // the Vulkan implicit layer manifest
	RoleEGLVendor   Role = "egl-vendor"            // the glvnd EGL vendor manifest
	RoleEGLPlatform Role = "egl-external-platform" // an EGL external platform manifest
	RoleGBM         Role = "gbm-backend"           // the GBM backend library
	RoleGlvnd       Role = "glvnd-dispatch"        // one of the four glvnd dispatch libraries
)

// GlvndLibraries are glvnd's dispatch libraries, injected as one set (F5).
var GlvndLibraries = []string{"libEGL.so.1", "libGLX.so.0", "libOpenGL.so.0", "libGLdispatch.so.0"}

// GraphicsFile is one file found under the driver root and where it goes in
// the container.
type GraphicsFile struct {
	Role Role `json:"role" yaml:"role"` // what the file is for
	// HostPath is the stable host path under the driver root or glvnd
	// directory ("/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json"),
	// not the store path it links to, so the spec survives a driver switch.
	HostPath string `json:"hostPath" yaml:"hostPath"`
	// ContainerPath is where it goes in the container.
	ContainerPath string `json:"containerPath" yaml:"containerPath"`
	// Manifest is set for the four manifest roles.
	Manifest *manifest.Info `json:"manifest,omitempty" yaml:"manifest,omitempty"`
}

// Graphics is what Discover found: the files to mount, the host directories
// that may provide a library a manifest names by soname, and host problems.
type Graphics struct {
	DriverRoot string         `json:"driverRoot" yaml:"driverRoot"` // host path the files were found under
	Files      []GraphicsFile `json:"files" yaml:"files"`           // the files to mount, in discovery order
	// LibDirs are host directories searched for a manifest's bare soname:
	// <driver root>/lib, then the glvnd directories.
	LibDirs []string `json:"libDirs" yaml:"libDirs"`
	// ContainerLibDir is the container library directory
	// (ContainerPaths.LibDir) a library named by bare soname goes to when
	// no folder the dynamic linker searches provides it.
	ContainerLibDir string `json:"containerLibDir" yaml:"containerLibDir"`
	// DriverVersion is DiscoverOptions.DriverVersion.
	DriverVersion string `json:"driverVersion,omitempty" yaml:"driverVersion,omitempty"`

	// cache is what the host said while checking specs against these
	// files: several specs checked in one run ask the same questions.
	cache *hostCache
	// Findings are problems on the host (no ICD, dangling link, partial
	// glvnd set, unreadable manifest).
	Findings Findings `json:"findings,omitempty" yaml:"findings,omitempty"`
}

// DiscoverOptions say where to look.
type DiscoverOptions struct {
	// DriverRoot is the host directory of the driver's graphics files
	// ("/run/opengl-driver"). Required.
	DriverRoot string
	// GlvndDirs are host directories searched in order for the four glvnd
	// dispatch libraries; empty means <DriverRoot>/lib.
	GlvndDirs []string
	// Arch is the host GOARCH; it picks the ICD manifest
	// (nvidia_icd.<machine>.json) and the default library directory.
	Arch string
	// Paths are the container paths; zero fields take
	// DefaultContainerPaths(Arch).
	Paths ContainerPaths
	// DriverVersion is the driver version NVML reports ("550.54.15"); empty
	// means the version the Vulkan driver library's file name carries.
	DriverVersion string
}

// Discover finds the graphics files under the driver root, by glob,
// following symlinks inside the host root (FIELD-REPORTS F3):
//
//	share/vulkan/icd.d/nvidia_icd*.json          the one for Arch, else nvidia_icd.json
//	share/vulkan/implicit_layer.d/nvidia_layers.json
//	share/glvnd/egl_vendor.d/*nvidia*.json        the first in byte order
//	share/egl/egl_external_platform.d/*nvidia*.json
//	lib/gbm/nvidia-drm_gbm.so
//	libEGL.so.1 libGLX.so.0 libOpenGL.so.0 libGLdispatch.so.0, all four from one directory
//
// A missing driver root is an error marked fault.ErrUnavailable; every
// other problem is a Finding in the result.
func Discover(host *hostfs.Root, opts DiscoverOptions) (*Graphics, error) {
	if opts.DriverRoot == "" || !path.IsAbs(opts.DriverRoot) {
		return nil, fault.Usage(fmt.Errorf("driver root %q must be an absolute host path", opts.DriverRoot))
	}
	st, err := host.Stat(opts.DriverRoot)
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("driver root %q: %w (is the NVIDIA driver installed, hardware.graphics enabled?)", opts.DriverRoot, err))
	}
	if !st.IsDir() {
		return nil, fault.Unavailable(fmt.Errorf("driver root %q is not a directory", opts.DriverRoot))
	}
	paths := opts.Paths.withDefaults(opts.Arch)
	d := &discoverer{host: host, g: &Graphics{DriverRoot: opts.DriverRoot}}
	libDir := path.Join(opts.DriverRoot, "lib")
	glvndDirs := opts.GlvndDirs
	if len(glvndDirs) == 0 {
		glvndDirs = []string{libDir}
	}
	d.g.LibDirs = uniq(append([]string{libDir}, glvndDirs...))
	d.g.ContainerLibDir = paths.LibDir
	d.g.DriverVersion = opts.DriverVersion
	d.g.cache = newHostCache(host)

	d.icd(opts.DriverRoot, opts.Arch, paths.ICD)
	d.manifests(RoleLayer, manifest.KindImplicitLayer, path.Join(opts.DriverRoot, "share/vulkan/implicit_layer.d/nvidia_layers.json"), func(string) string { return paths.ImplicitLayer }, true)
	d.manifests(RoleEGLVendor, manifest.KindEGLVendor, path.Join(opts.DriverRoot, "share/glvnd/egl_vendor.d/*nvidia*.json"), func(string) string { return paths.EGLVendor }, true)
	if !slices.ContainsFunc(d.g.Files, func(f GraphicsFile) bool { return f.Role == RoleEGLVendor }) {
		d.g.Findings = append(d.g.Findings, warnf(CodeMissingEGLVendor, "no NVIDIA EGL vendor manifest under %s: EGL will not find the driver in containers", path.Join(opts.DriverRoot, "share/glvnd/egl_vendor.d")))
	}
	d.manifests(RoleEGLPlatform, manifest.KindEGLPlatform, path.Join(opts.DriverRoot, "share/egl/egl_external_platform.d/*nvidia*.json"), func(name string) string { return path.Join(paths.EGLExternalPlatformDir, name) }, false)
	if gbm := path.Join(libDir, "gbm/nvidia-drm_gbm.so"); d.present(gbm) {
		d.add(GraphicsFile{Role: RoleGBM, HostPath: gbm, ContainerPath: path.Join(paths.LibDir, "gbm/nvidia-drm_gbm.so")})
	}
	d.glvnd(glvndDirs, paths.LibDir)
	return d.g, nil
}

func (p ContainerPaths) withDefaults(arch string) ContainerPaths {
	def := DefaultContainerPaths(arch)
	set := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	set(&p.ICD, def.ICD)
	set(&p.ImplicitLayer, def.ImplicitLayer)
	set(&p.EGLVendor, def.EGLVendor)
	set(&p.EGLExternalPlatformDir, def.EGLExternalPlatformDir)
	set(&p.LibDir, def.LibDir)
	return p
}

type discoverer struct {
	host *hostfs.Root
	g    *Graphics
}

func (d *discoverer) add(f GraphicsFile) { d.g.Files = append(d.g.Files, f) }

// danglingFix is what to do about a graphics file under the driver root
// that links into a driver package no longer there: the driver root is
// older than the store (on NixOS /run/opengl-driver is made when a system
// is activated), and so, most likely, is the generated spec, which names
// the same package's files.
const danglingFix = "switch to (nixos-rebuild switch) or reboot into the system whose driver is installed, so that the driver root points at it, regenerate the CDI spec (nvidia-container-toolkit-cdi-generator.service on NixOS, else nvidia-ctk cdi generate), then run nodeprep up again"

// present reports whether hostPath resolves to a file; a dangling link is
// recorded as a finding.
func (d *discoverer) present(hostPath string) bool {
	if _, err := d.host.Stat(hostPath); err == nil {
		return true
	}
	if st, err := d.host.Lstat(hostPath); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		target, err := d.host.Resolve(hostPath)
		if err != nil {
			d.g.Findings = append(d.g.Findings, errorf(CodeDanglingHostFile, "%s is a link that does not resolve: %v", hostPath, err))
		} else {
			d.g.Findings = append(d.g.Findings, errorf(CodeDanglingHostFile, "%s is a dangling link (to %s): the driver package it points into is gone (the driver changed or was garbage-collected since the driver root was made); %s", hostPath, target, danglingFix))
		}
	}
	return false
}

// icd picks exactly one ICD manifest: the one for the host's machine
// ("nvidia_icd.x86_64.json", drivers since about 510), else the plain
// "nvidia_icd.json"; manifests for other machines are ignored.
func (d *discoverer) icd(driverRoot, arch, containerPath string) {
	dir := path.Join(driverRoot, "share/vulkan/icd.d")
	want := []string{"nvidia_icd." + machine(arch) + ".json", "nvidia_icd.json"}
	for _, name := range want {
		p := path.Join(dir, name)
		if _, err := d.host.Lstat(p); err != nil {
			continue
		}
		if !d.present(p) {
			return // reported as dangling
		}
		if info := d.readManifest(manifest.KindICD, p); info != nil {
			d.add(GraphicsFile{Role: RoleICD, HostPath: p, ContainerPath: containerPath, Manifest: info})
		}
		return // a bad manifest is reported as such, not as missing
	}
	d.g.Findings = append(d.g.Findings, errorf(CodeNoICDOnHost, "no Vulkan ICD manifest for %s under %s (looked for %s): containers get no Vulkan driver; install the NVIDIA driver with its graphics files (NixOS: hardware.graphics.enable = true, which makes /run/opengl-driver), or point --driver-root (cdi.driverRoot) at the root that has them", machine(arch), dir, strings.Join(want, ", ")))
}

// manifests adds the manifests matching pattern; with one set, only the
// first (byte order) is taken because they share one container path.
func (d *discoverer) manifests(role Role, kind manifest.Kind, pattern string, containerPath func(name string) string, one bool) {
	matches, err := d.host.Glob(pattern)
	if err != nil {
		d.g.Findings = append(d.g.Findings, warnf(CodeBadManifest, "listing %s: %v", pattern, err))
		return
	}
	taken := 0
	for _, p := range matches {
		if !d.present(p) {
			continue
		}
		if one && taken == 1 {
			d.g.Findings = append(d.g.Findings, warnf(CodeBadManifest, "%s ignored: only one %s manifest can be mounted", p, kind))
			continue
		}
		info := d.readManifest(kind, p)
		if info == nil {
			continue
		}
		d.add(GraphicsFile{Role: role, HostPath: p, ContainerPath: containerPath(path.Base(p)), Manifest: info})
		taken++
	}
}

func (d *discoverer) readManifest(kind manifest.Kind, hostPath string) *manifest.Info {
	data, err := d.host.ReadFile(hostPath, bounded.MaxManifest)
	if err == nil {
		var info *manifest.Info
		if info, err = manifest.Parse(kind, data); err == nil {
			return info
		}
	}
	d.g.Findings = append(d.g.Findings, errorf(CodeBadManifest, "reading %s manifest %s: %v", kind, hostPath, err))
	return nil
}

// glvnd takes the four dispatch libraries from the first directory that has
// all four, resolving to one directory (one libglvnd build); a subset is
// never taken (F5).
func (d *discoverer) glvnd(dirs []string, libDir string) {
	var partial []string
	for _, dir := range dirs {
		var have, missing []string
		builds := map[string]bool{}
		for _, name := range GlvndLibraries {
			p := path.Join(dir, name)
			if !d.present(p) {
				missing = append(missing, name)
				continue
			}
			have = append(have, p)
			if r, err := d.host.Resolve(p); err == nil {
				builds[path.Dir(r)] = true
			}
		}
		switch {
		case len(missing) == 0 && len(builds) == 1:
			for _, p := range have {
				d.add(GraphicsFile{Role: RoleGlvnd, HostPath: p, ContainerPath: path.Join(libDir, path.Base(p))})
			}
			return
		case len(missing) == 0:
			partial = append(partial, fmt.Sprintf("%s (its libraries come from %d different builds)", dir, len(builds)))
		case len(have) > 0:
			partial = append(partial, fmt.Sprintf("%s (missing %s)", dir, strings.Join(missing, ", ")))
		}
	}
	if len(partial) > 0 {
		d.g.Findings = append(d.g.Findings, warnf(CodePartialGlvnd, "no complete glvnd dispatch set from one build, none injected: %s", strings.Join(partial, "; ")))
		return
	}
	d.g.Findings = append(d.g.Findings, warnf(CodeMissingGlvnd, "glvnd dispatch libraries not found in %s: images must bring their own libEGL.so.1", strings.Join(dirs, ", ")))
}

func uniq(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
