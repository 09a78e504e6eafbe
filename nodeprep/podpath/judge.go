package podpath

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nvruntime"
)

// Finding codes of the pod-path check (Judge).
const (
	// CodeBypass: pods of one runtime handler get GPUs without the
	// patched spec (the NVIDIA runtime in jit-cdi or legacy mode, a
	// spec-dirs or default-kind that miss it).
	CodeBypass = "pod-path-bypass"
	// CodeNone: no runtime handler of the node gives a pod of the
	// device plugin's envvar strategy the patched spec.
	CodeNone = "pod-path-none"
	// CodeNVRuntimeConfig: the NVIDIA runtime's config.toml cannot be read
	// or parsed (the runtime then fails every container it starts).
	CodeNVRuntimeConfig = "nvidia-runtime-config"
	// CodeWrapper: a runtime handler's program is a wrapper script
	// nodeprep cannot read (too large, a NUL byte): which config file the
	// runtime reads is not known.
	CodeWrapper = "nvidia-runtime-wrapper"
	// CodeEnvvarRefused: a handler that gives pods the patched spec runs
	// the NVIDIA runtime with
	// accept-nvidia-visible-devices-envvar-when-unprivileged = false, so
	// an unprivileged pod of the device plugin's envvar strategy gets no
	// GPU at all (the CDI strategies still work).
	CodeEnvvarRefused = "nvidia-runtime-envvar-refused"
)

// PatchedClass is the runtime class that gives a pod of the device plugin's
// envvar strategy the patched spec on a k3s node whatever the NVIDIA
// runtime's mode: k3s registers it for nvidia-container-runtime.cdi, which
// forces the runtime's cdi mode (nvruntime.ProgramCDI). `cluster render`
// emits it.
const PatchedClass = "nvidia-cdi"

// Path is how a GPU pod started through one runtime handler of the
// node's containerd gets its devices, for the device plugin's envvar (and
// volume-mounts) strategy: NVIDIA_VISIBLE_DEVICES=<id>.
type Path struct {
	// Handler is the runtime handler (a RuntimeClass's handler).
	Handler string `json:"handler" yaml:"handler"`
	// BinaryName is the handler's options.BinaryName.
	BinaryName string `json:"binaryName" yaml:"binaryName"`
	// Program is the NVIDIA runtime program it names (nvruntime.ProgramOf;
	// "" when it names none).
	Program string `json:"program,omitempty" yaml:"program,omitempty"`
	// Toolkit is the toolkit version its path names ("" when unknown).
	Toolkit string `json:"toolkit,omitempty" yaml:"toolkit,omitempty"`
	// Config is the NVIDIA runtime config file the handler's program
	// reads: nvruntime.DefaultPath, or the one a wrapper script's
	// environment points it at (nvruntime.Wrapper.ConfigPath).
	Config string `json:"config,omitempty" yaml:"config,omitempty"`
	// ConfigFrom says which wrapper setting chose Config ("" for the
	// default).
	ConfigFrom string `json:"configFrom,omitempty" yaml:"configFrom,omitempty"`
	// Decision is the runtime's mode and CDI kind for such a request.
	Decision nvruntime.Decision `json:"decision" yaml:"decision"`
	// PatchedSpec is true when such a pod gets the edits of the patched
	// spec.
	PatchedSpec bool `json:"patchedSpec" yaml:"patchedSpec"`
	// Why says why not ("" when PatchedSpec).
	Why string `json:"why,omitempty" yaml:"why,omitempty"`
}

// Report is what Judge found.
type Report struct {
	// Runtime is the NVIDIA runtime's config as read (defaults when the
	// file does not exist; nil when it cannot be read).
	Runtime *nvruntime.Config `json:"nvidiaRuntime,omitempty" yaml:"nvidiaRuntime,omitempty"`
	// Paths are the nvidia* runtime handlers, sorted by name.
	Paths []Path `json:"paths,omitempty" yaml:"paths,omitempty"`
	// Findings are the problems, errors first.
	Findings cdi.Findings `json:"findings,omitempty" yaml:"findings,omitempty"`
}

// Judge judges, for every nvidia* runtime handler of the containerd
// config c (containerd.Load), whether a pod started through it with the
// device plugin's envvar strategy gets the CDI spec at specPath: the
// program the handler's BinaryName names, the mode the NVIDIA runtime
// resolves for NVIDIA_VISIBLE_DEVICES=<id> under its config at nvConfig
// (nvruntime.DefaultPath when ""), and in cdi mode whether modes.cdi.spec-dirs
// holds the spec's directory (compared after links, under host) and
// default-kind is the spec's kind.
//
// Findings: for each handler that bypasses the spec, CodeBypass
// naming the handler, what the pods get instead and the fix — a warning
// when another handler serves the spec, else an error, with a
// CodeNone error. A handler whose binary is missing or not the
// NVIDIA runtime is containerd.Check's finding, not repeated here; so is a
// handler written under the other config version's CRI plugin
// (containerd.CodeMisplacedRuntime), but a fix that would send pods to
// PatchedClass says to move that handler's table when it is misplaced. c nil
// (no containerd config yet, an external runtime): nothing is judged.
func Judge(host *hostfs.Root, c *containerd.Config, nvConfig, specPath string) *Report {
	r := &Report{}
	if c == nil {
		return r
	}
	nv, err := nvruntime.Load(host, nvConfig)
	if err != nil {
		r.Findings = append(r.Findings, cdi.Finding{Severity: cdi.SeverityError, Code: CodeNVRuntimeConfig,
			Message: fmt.Sprintf("%v: the NVIDIA runtime fails every container it starts; fix the file", err)})
		return r
	}
	r.Runtime = nv
	configs := map[string]*nvruntime.Config{nv.Path: nv}
	kind := nvruntime.DefaultKind
	if _, spec, err := cdi.Load(host, specPath); err == nil && spec.Kind != "" {
		kind = spec.Kind
	}
	specDir := resolvedDir(host, path.Dir(specPath))
	var bypass []cdi.Finding
	served := []string{}
	for _, rt := range c.Runtimes {
		p := Path{Handler: rt.Name, BinaryName: rt.BinaryName, Program: nvruntime.ProgramOf(rt.BinaryName)}
		if p.Program == "" || !host.Exists(rt.BinaryName) {
			continue // containerd.Check reports the binary
		}
		resolved, err := host.Resolve(rt.BinaryName)
		if err != nil {
			resolved = rt.BinaryName
		}
		v := nvruntime.VersionOf(rt.BinaryName)
		if v == (nvruntime.Version{}) {
			v = nvruntime.VersionOf(resolved)
		}
		p.Toolkit = v.String()
		hnv, from, f := handlerConfig(host, rt.BinaryName, v, nv, configs)
		if f != nil {
			r.Findings = append(r.Findings, *f)
			if hnv == nil {
				continue
			}
		}
		p.Config, p.ConfigFrom = hnv.Path, from
		p.Decision = hnv.Decide(p.Program, v, nvruntime.RequestIDs)
		p.Why, p.PatchedSpec = podPathWhy(host, hnv, p, kind, specDir, specPath)
		if p.ConfigFrom != "" && !p.PatchedSpec {
			p.Why += fmt.Sprintf(" (the runtime reads %s, set by %s, not %s)", hnv.Path, p.ConfigFrom, nv.Path)
		}
		r.Paths = append(r.Paths, p)
		if p.PatchedSpec {
			served = append(served, p.Handler)
			continue
		}
		bypass = append(bypass, cdi.Finding{Code: CodeBypass, Message: fmt.Sprintf(
			"%s: pods with runtimeClassName %s and the device plugin's envvar strategy (NVIDIA_VISIBLE_DEVICES=GPU-…) do not get the patched spec %s: %s; fix: %s",
			c.Path, p.Handler, specPath, p.Why, podPathFix(c, configs[p.Config], p, specPath))})
	}
	r.Findings = append(r.Findings, envvarRefused(c, r.Paths, configs)...)
	sev := cdi.SeverityWarning
	if len(served) == 0 && len(r.Paths) > 0 {
		sev = cdi.SeverityError
	}
	for _, f := range bypass {
		f.Severity = sev
		r.Findings = append(r.Findings, f)
	}
	if len(served) == 0 && len(r.Paths) > 0 {
		fix := fmt.Sprintf("give pods runtimeClassName %s (k3s registers it when it finds nvidia-container-runtime.cdi; nodeprep cluster render emits it)", PatchedClass)
		if hint := c.MisplacedHint(PatchedClass); hint != "" {
			// The class the user believes in has no handler containerd
			// reads: say where its table went, not to use it.
			fix = hint
		}
		r.Findings = append(r.Findings, cdi.Finding{Severity: cdi.SeverityError, Code: CodeNone, Message: fmt.Sprintf(
			"%s: no runtime handler gives GPU pods the patched spec %s, so what nodeprep proved is not what pods get; %s, or set mode = \"cdi\" in %s",
			c.Path, specPath, fix, nv.Path)})
	}
	return r
}

// handlerConfig is the NVIDIA runtime config the program binaryName (of
// toolkit version v, zero when unknown) reads, and which wrapper setting
// chose it ("" for def, the default):
// def, or the file a wrapper script points it at, loaded once into
// configs by path. A wrapper or config that cannot be read is a finding
// (CodeWrapper, CodeNVRuntimeConfig), with a nil config when the handler
// cannot be judged.
func handlerConfig(host *hostfs.Root, binaryName string, v nvruntime.Version, def *nvruntime.Config, configs map[string]*nvruntime.Config) (*nvruntime.Config, string, *cdi.Finding) {
	w, err := nvruntime.ReadWrapper(host, binaryName)
	if err != nil {
		return def, "", &cdi.Finding{Severity: cdi.SeverityWarning, Code: CodeWrapper, Message: fmt.Sprintf(
			"%v: which config file the runtime reads is not known, %s is judged; fix the script", err, def.Path)}
	}
	p, from := w.ConfigPathFor(v)
	if c, ok := configs[p]; ok {
		return c, from, nil
	}
	c, err := nvruntime.Load(host, p)
	if err != nil {
		return nil, from, &cdi.Finding{Severity: cdi.SeverityError, Code: CodeNVRuntimeConfig, Message: fmt.Sprintf(
			"%v (the config %s makes the runtime read, by %s): the NVIDIA runtime fails every container it starts; fix the file", err, binaryName, from)}
	}
	configs[p] = c
	return c, from, nil
}

// envvarRefused is a CodeEnvvarRefused warning for each config file, read
// by handlers of paths that give pods the patched spec, that sets
// accept-nvidia-visible-devices-envvar-when-unprivileged = false: the
// runtime then drops NVIDIA_VISIBLE_DEVICES from an unprivileged
// container's request (nvidia-container-toolkit
// internal/config/image/cuda_image.go, VisibleDevices, in every mode), and
// the device plugin's pods are unprivileged. A warning: the cdi-cri and
// cdi-annotations strategies do not use the variable (containerd injects
// the devices named in the CRI request or the pod's annotation on every
// handler, docs/pod-path.md), and which one the cluster uses is not the
// node's to know.
func envvarRefused(c *containerd.Config, paths []Path, configs map[string]*nvruntime.Config) cdi.Findings {
	byConfig := map[string][]string{}
	var order []string
	for _, p := range paths {
		nv := configs[p.Config]
		if !p.PatchedSpec || nv == nil || nv.AcceptEnvvarUnprivileged {
			continue
		}
		if _, ok := byConfig[p.Config]; !ok {
			order = append(order, p.Config)
		}
		byConfig[p.Config] = append(byConfig[p.Config], p.Handler)
	}
	var out cdi.Findings
	for _, cfg := range order {
		out = append(out, cdi.Finding{Severity: cdi.SeverityWarning, Code: CodeEnvvarRefused, Message: fmt.Sprintf(
			"%s: accept-nvidia-visible-devices-envvar-when-unprivileged = false in %s, which the runtime of handler %s reads: it ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers, so a pod of the device plugin's envvar strategy (nodeprep cluster render's default) gets no GPU at all; fix: remove the key from %s, or set deviceListStrategy: cdi-cri in the device plugin's values (containerd then injects the devices from the plugin's own spec, which nodeprep's re-patch keeps patched; cluster check warns of that window)",
			c.Path, cfg, strings.Join(byConfig[cfg], ", "), cfg)})
	}
	return out
}

// podPathWhy says why a pod of p does not get the spec, or ("", true).
func podPathWhy(host *hostfs.Root, nv *nvruntime.Config, p Path, kind, specDir, specPath string) (string, bool) {
	d := p.Decision
	switch {
	case !d.ReadsSpecs && d.Auto:
		var by string
		switch d.Mode {
		case nvruntime.ModeLegacy:
			by = "toolkit " + p.Toolkit + ", before 1.18"
		case nvruntime.ModeJitCDI:
			by = "toolkit " + p.Toolkit
		default:
			by = "jit-cdi from toolkit 1.18, legacy before"
		}
		return fmt.Sprintf("%s runs the NVIDIA runtime in mode auto (%s), which picks cdi only when every requested device is a qualified CDI name; for a device id it picks %s (%s), which builds the container's edits from the driver itself and never reads a spec file", p.BinaryName, nv.Path, d.Mode, by), false
	case !d.ReadsSpecs:
		return fmt.Sprintf("%s runs the NVIDIA runtime in mode %s, which never reads a spec file", p.BinaryName, d.Mode), false
	case d.Kind != kind:
		return fmt.Sprintf("the NVIDIA runtime's cdi mode turns a device id into %s=<id> (modes.cdi.default-kind in %s), but the spec's kind is %s", d.Kind, nv.Path, kind), false
	}
	for _, dir := range nv.SpecDirs {
		if resolvedDir(host, dir) == specDir {
			return "", true
		}
	}
	return fmt.Sprintf("the NVIDIA runtime's cdi mode reads specs from %q (modes.cdi.spec-dirs in %s), which does not include %s", nv.SpecDirs, nv.Path, path.Dir(specPath)), false
}

// podPathFix is the fix for a handler of c that bypasses the spec. Where
// it would send pods to PatchedClass and c misplaces that handler's table
// (containerd.Config.MisplacedHint), it says to move the table first.
func podPathFix(c *containerd.Config, nv *nvruntime.Config, p Path, specPath string) string {
	d := p.Decision
	switch {
	case !d.ReadsSpecs && p.Handler != PatchedClass:
		if hint := c.MisplacedHint(PatchedClass); hint != "" {
			return fmt.Sprintf("%s, then use runtimeClassName %s for GPU pods; or set mode = \"cdi\" under [nvidia-container-runtime] in %s", hint, PatchedClass, nv.Path)
		}
		return fmt.Sprintf("use runtimeClassName %s for GPU pods (nodeprep cluster render), or set mode = \"cdi\" under [nvidia-container-runtime] in %s", PatchedClass, nv.Path)
	case !d.ReadsSpecs:
		return fmt.Sprintf("point the %s handler's BinaryName at %s", p.Handler, strings.TrimSuffix(p.BinaryName, path.Base(p.BinaryName))+nvruntime.ProgramCDI)
	case d.Kind != nvruntime.DefaultKind:
		return fmt.Sprintf("remove default-kind from [nvidia-container-runtime.modes.cdi] in %s (default %s)", nv.Path, nvruntime.DefaultKind)
	}
	return fmt.Sprintf("add %q to spec-dirs under [nvidia-container-runtime.modes.cdi] in %s", path.Dir(specPath), nv.Path)
}

func resolvedDir(host *hostfs.Root, dir string) string {
	if r, err := host.Resolve(dir); err == nil {
		return r
	}
	return path.Clean(dir)
}

// podPathFindings adds Judge' findings for the containerd report rep to
// findings (nothing when rep has no config).
func podPathFindings(host *hostfs.Root, rep *containerd.Report, specPath string) cdi.Findings {
	if rep == nil || rep.Config == nil {
		return nil
	}
	out := Judge(host, rep.Config, "", specPath).Findings
	slices.SortStableFunc(out, func(a, b cdi.Finding) int {
		if a.Severity == b.Severity {
			return 0
		}
		if a.Severity == cdi.SeverityError {
			return -1
		}
		return 1
	})
	return out
}

// RuntimeFindings runs containerd.Check and Judge for the k3s located
// by opts, as `cdi check` judges the node: errors are errors. Errors:
// containerd.Check's.
func RuntimeFindings(host *hostfs.Root, opts containerd.Options) (cdi.Findings, error) {
	rep, err := containerd.Check(host, opts)
	if err != nil {
		return nil, err
	}
	spec := ""
	if len(opts.SpecPaths) > 0 {
		spec = opts.SpecPaths[0]
	}
	return append(rep.Findings, podPathFindings(host, rep, spec)...), nil
}
