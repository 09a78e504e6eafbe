// Package nvruntime reads the NVIDIA container runtime's own configuration
// (/etc/nvidia-container-runtime/config.toml) and decides, as the runtime
// does, how it hands a pod's GPU request to the container: in which mode,
// from which CDI spec directories, under which CDI kind. That decides
// whether a GPU pod started through a runtime handler that names the NVIDIA
// runtime gets the CDI spec nodeprep patched at all.
//
// Sources of the rules this package encodes (NVIDIA/nvidia-container-toolkit,
// read at v1.17.8 and v1.20.2):
//   - api/config/v1 (config.go, runtime.go): the file is
//     /etc/nvidia-container-runtime/config.toml (NVIDIA_CTK_CONFIG_FILE_PATH
//     or XDG_CONFIG_HOME in the runtime's environment move it); a missing
//     file means the defaults: mode "auto", modes.cdi.spec-dirs
//     ["/etc/cdi", "/var/run/cdi"], modes.cdi.default-kind "nvidia.com/gpu",
//     modes.cdi.annotation-prefixes ["cdi.k8s.io/"]; a value set in the file
//     replaces the default, an empty list included.
//   - internal/info/auto.go: mode "auto" resolves to "cdi" only when every
//     device the container requests is a fully-qualified CDI name
//     (vendor/class=name); otherwise to "jit-cdi" since v1.18 (a spec
//     generated in memory from the driver, kind runtime.nvidia.com/gpu) and
//     to "legacy" before (the nvidia-container-runtime-hook); neither reads
//     a spec file.
//   - internal/modifier/cdi.go: in "cdi" mode a request that is not a
//     qualified name (NVIDIA_VISIBLE_DEVICES=GPU-<uuid>, the device plugin's
//     envvar strategy) becomes <default-kind>=<id>, resolved against the
//     specs in spec-dirs.
//   - cmd/nvidia-container-runtime.cdi and .legacy: these two programs are
//     the same runtime with the mode forced to "cdi" and "legacy"; k3s
//     registers the former as the runtime handler "nvidia-cdi".
//
// The file is parsed with github.com/BurntSushi/toml; the host is read only
// through a *hostfs.Root.
package nvruntime

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultPath is where the NVIDIA container runtime reads its config.
const DefaultPath = "/etc/nvidia-container-runtime/config.toml"

// The runtime's modes (internal/info/auto.go).
const (
	ModeAuto   = "auto"
	ModeCDI    = "cdi"
	ModeJitCDI = "jit-cdi" // v1.18 and later
	ModeLegacy = "legacy"
	ModeCSV    = "csv" // Tegra
)

// The runtime's programs, as a runtime handler's BinaryName names them.
const (
	Program       = "nvidia-container-runtime"        // the mode comes from the config
	ProgramCDI    = "nvidia-container-runtime.cdi"    // mode forced to cdi (k3s's "nvidia-cdi" handler)
	ProgramLegacy = "nvidia-container-runtime.legacy" // mode forced to legacy
)

// Defaults of the config (api/config/v1 GetDefault).
var (
	DefaultSpecDirs           = []string{"/etc/cdi", "/var/run/cdi"}
	DefaultKind               = "nvidia.com/gpu"
	DefaultAnnotationPrefixes = []string{"cdi.k8s.io/"}
)

// Config is what the runtime reads from its config file, defaults filled
// in.
type Config struct {
	// Path is the host path read.
	Path string `json:"path" yaml:"path"`
	// Present is false when the file does not exist (the defaults apply).
	Present bool `json:"present" yaml:"present"`
	// Mode is nvidia-container-runtime.mode ("auto" by default).
	Mode string `json:"mode" yaml:"mode"`
	// SpecDirs is nvidia-container-runtime.modes.cdi.spec-dirs: where the
	// runtime's cdi mode looks for specs.
	SpecDirs []string `json:"specDirs" yaml:"specDirs"`
	// DefaultKind is modes.cdi.default-kind: the kind an unqualified
	// device id is given in cdi mode.
	DefaultKind string `json:"defaultKind" yaml:"defaultKind"`
	// AnnotationPrefixes is modes.cdi.annotation-prefixes: the pod
	// annotation prefixes whose CDI device names cdi mode applies.
	AnnotationPrefixes []string `json:"annotationPrefixes" yaml:"annotationPrefixes"`
	// AcceptEnvvarUnprivileged is
	// accept-nvidia-visible-devices-envvar-when-unprivileged (true by
	// default): without it an unprivileged pod's NVIDIA_VISIBLE_DEVICES is
	// ignored, so the envvar strategy gives it no GPU.
	AcceptEnvvarUnprivileged bool `json:"acceptEnvvarUnprivileged" yaml:"acceptEnvvarUnprivileged"`
}

// Defaults returns the config the runtime uses when its file is missing.
func Defaults(p string) *Config {
	return &Config{
		Path: p, Mode: ModeAuto, SpecDirs: slices.Clone(DefaultSpecDirs), DefaultKind: DefaultKind,
		AnnotationPrefixes: slices.Clone(DefaultAnnotationPrefixes), AcceptEnvvarUnprivileged: true,
	}
}

// Parse decodes the runtime's config file (TOML) over the defaults. name is
// the host path, for errors and Config.Path. Errors: malformed TOML or a
// value of the wrong type (the runtime then fails every container), marked
// fault.ErrMalformed.
func Parse(name string, data []byte) (*Config, error) {
	var raw struct {
		AcceptEnvvar *bool `toml:"accept-nvidia-visible-devices-envvar-when-unprivileged"`
		Runtime      struct {
			Mode  *string `toml:"mode"`
			Modes struct {
				CDI struct {
					SpecDirs           *[]string `toml:"spec-dirs"`
					DefaultKind        *string   `toml:"default-kind"`
					AnnotationPrefixes *[]string `toml:"annotation-prefixes"`
				} `toml:"cdi"`
			} `toml:"modes"`
		} `toml:"nvidia-container-runtime"`
	}
	if err := bounded.CheckTOML(data); err != nil { // before the decoder, which would overflow the stack
		return nil, fault.Malformed(fmt.Errorf("reading NVIDIA container runtime config %q: %w", name, err))
	}
	if _, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&raw); err != nil {
		return nil, fault.Malformed(fmt.Errorf("reading NVIDIA container runtime config %q: %w", name, err))
	}
	c := Defaults(name)
	c.Present = true
	if raw.AcceptEnvvar != nil {
		c.AcceptEnvvarUnprivileged = *raw.AcceptEnvvar
	}
	if m := raw.Runtime.Mode; m != nil {
		c.Mode = *m
	}
	cdi := raw.Runtime.Modes.CDI
	if cdi.SpecDirs != nil {
		c.SpecDirs = *cdi.SpecDirs
	}
	if cdi.DefaultKind != nil {
		c.DefaultKind = *cdi.DefaultKind
	}
	if cdi.AnnotationPrefixes != nil {
		c.AnnotationPrefixes = *cdi.AnnotationPrefixes
	}
	return c, nil
}

// Load reads the config at p under root: Defaults(p) when it does not
// exist. Errors: larger than bounded.MaxNVRuntimeConfig (refused by its
// size before it is read) or not a regular file (fault.ErrMalformed),
// otherwise unreadable (fault.ErrUnavailable), or Parse's.
func Load(root *hostfs.Root, p string) (*Config, error) {
	if p == "" {
		p = DefaultPath
	}
	data, err := root.ReadFile(p, bounded.MaxNVRuntimeConfig)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Defaults(p), nil
	case errors.Is(err, bounded.ErrTooLarge), errors.Is(err, bounded.ErrNotRegular):
		return nil, fault.Malformed(fmt.Errorf("reading NVIDIA container runtime config %q: %w", p, err))
	case err != nil:
		return nil, fault.Unavailable(fmt.Errorf("reading NVIDIA container runtime config %q: %w", p, err))
	}
	return Parse(p, data)
}

// ProgramOf returns which of the runtime's programs a runtime handler's
// BinaryName names (Program, ProgramCDI, ProgramLegacy), from its base
// name, a Nix wrapper's ".<name>-wrapped" included; "" for anything else.
func ProgramOf(binaryName string) string {
	base := path.Base(binaryName)
	if strings.HasPrefix(base, ".") && strings.HasSuffix(base, "-wrapped") {
		base = strings.TrimSuffix(strings.TrimPrefix(base, "."), "-wrapped")
	}
	switch base {
	case Program, ProgramCDI, ProgramLegacy:
		return base
	}
	return ""
}

// Version is a toolkit version, major.minor.patch.
type Version struct{ Major, Minor, Patch int }

// String is "1.17.8", or "" for the zero Version (unknown).
func (v Version) String() string {
	if v == (Version{}) {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// storeVersion finds the toolkit's version in a NixOS store path
// (/nix/store/<hash>-nvidia-container-toolkit-1.17.8/bin/…, also the
// -container-toolkit- package of older NixOS).
var storeVersion = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`container-toolkit-(\d+)\.(\d+)\.(\d+)`)
})

// VersionOf returns the toolkit version a path names (a NixOS store path
// carries it), or the zero Version when it names none.
func VersionOf(p string) Version {
	m := storeVersion().FindStringSubmatch(p)
	if m == nil {
		return Version{}
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	v.Patch, _ = strconv.Atoi(m[3])
	return v
}

// Request is how a pod asks the NVIDIA runtime for devices.
type Request int

const (
	// RequestIDs is NVIDIA_VISIBLE_DEVICES (or the volume-mount list) with
	// device ids such as GPU-<uuid> or 0: the device plugin's envvar and
	// volume-mounts strategies.
	RequestIDs Request = iota
	// RequestQualified is NVIDIA_VISIBLE_DEVICES with fully-qualified CDI
	// names only (nvidia.com/gpu=GPU-<uuid>).
	RequestQualified
)

// Decision is how the runtime handles one kind of request.
type Decision struct {
	// Mode is the mode the runtime resolves; for mode auto with ids it is
	// ModeJitCDI from v1.18, ModeLegacy before, and "jit-cdi or legacy"
	// when the version is unknown.
	Mode string `json:"mode" yaml:"mode"`
	// Auto is true when Mode came from resolving "auto".
	Auto bool `json:"auto,omitempty" yaml:"auto,omitempty"`
	// ReadsSpecs is true when the runtime resolves the request against the
	// CDI specs in SpecDirs (mode cdi); false for jit-cdi, legacy and csv,
	// which build the container's edits themselves.
	ReadsSpecs bool `json:"readsSpecs" yaml:"readsSpecs"`
	// Kind is the CDI kind the request's ids are looked up under (mode cdi
	// with RequestIDs: DefaultKind).
	Kind string `json:"kind,omitempty" yaml:"kind,omitempty"`
}

// Decide says how the runtime program (ProgramOf of a BinaryName; "" counts
// as Program) of toolkit version v (zero: unknown) handles a request of
// kind req under c.
func (c *Config) Decide(program string, v Version, req Request) Decision {
	mode := c.Mode
	switch program {
	case ProgramCDI:
		mode = ModeCDI
	case ProgramLegacy:
		mode = ModeLegacy
	}
	d := Decision{Mode: mode}
	if mode == ModeAuto {
		d.Auto = true
		switch {
		case req == RequestQualified:
			d.Mode = ModeCDI
		case v == Version{}:
			d.Mode = ModeJitCDI + " or " + ModeLegacy
		case v.Major > 1 || v.Major == 1 && v.Minor >= 18:
			d.Mode = ModeJitCDI
		default:
			d.Mode = ModeLegacy
		}
	}
	if d.Mode == ModeCDI {
		d.ReadsSpecs = true
		if req == RequestIDs {
			d.Kind = c.DefaultKind
		}
	}
	return d
}
