package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// Schema is the facts file's schema field.
const Schema = "nodeprep.dev/node-facts/v1"

// MaxFacts is the largest facts file ParseFacts reads: 16 MiB. A facts
// file holds a handful of configuration texts of a few KiB each.
const MaxFacts = 16 << 20

// MaxUnitPath bounds the k3s unit's PATH directories: 512. A unit's PATH
// holds a few dozen (NixOS: its packages' bin and sbin); each directory is
// looked in for the NVIDIA runtimes and named in what the check says.
const MaxUnitPath = 512

// DefaultSimulate is the simulated inventory when the facts name none.
const DefaultSimulate = "dgx-h200"

// Facts are what one node configuration says about the node, as the
// NixOS side evaluates them (docs/nixos.md, "In your fleet's CI"). A
// pointer field is nil when the configuration does not set it; every
// path is absolute.
type Facts struct {
	// Schema is Schema.
	Schema string `json:"schema"`
	// Name is the node configuration's name (its nixosConfigurations
	// attribute); it prefixes every finding.
	Name     string       `json:"name"`
	Nodeprep NodeprepFact `json:"nodeprep"`
	K3s      K3sFact      `json:"k3s"`
	Toolkit  ToolkitFact  `json:"toolkit"`
	Driver   DriverFact   `json:"driver"`
	// Simulate is the simulated server to judge against (gpu.Simulate;
	// "" for DefaultSimulate).
	Simulate string `json:"simulate"`
}

// NodeprepFact is nodeprep's own configuration.
type NodeprepFact struct {
	// ConfigYAML is /etc/nodeprep/config.yaml as the module renders it.
	ConfigYAML string `json:"configYaml"`
	// ExecStart is nodeprep.service's ExecStart.
	ExecStart string `json:"execStart"`
}

// K3sFact is k3s's configuration and service.
type K3sFact struct {
	Role    string `json:"role"`    // "agent" or "server"
	Version string `json:"version"` // k3s's version, "1.33.4+k3s1"
	// DataDir is k3s's data-dir ("" for k3s's default).
	DataDir string `json:"dataDir"`
	// ConfigPath is the config file k3s reads (nil: k3s's default) and
	// ConfigYAML its text when the configuration writes it.
	ConfigPath *string `json:"configPath"`
	ConfigYAML *string `json:"configYaml"` // see ConfigPath
	// DropIns are the files of <configPath>.d the configuration writes,
	// by file name.
	DropIns map[string]string `json:"dropIns"`
	// Args are the k3s service's arguments after the binary, in order,
	// token arguments removed.
	Args []string `json:"args"`
	// KubeletConfig is the text of the file --kubelet-arg=config= names.
	KubeletConfig *string `json:"kubeletConfig"`
	// UnitPath are the k3s service's PATH directories, in order.
	UnitPath []string `json:"unitPath"`
	// ContainerdConfigTemplate is services.k3s.containerdConfigTemplate.
	ContainerdConfigTemplate *string `json:"containerdConfigTemplate"`
	// AutoDeployManifests are the manifests the configuration has k3s
	// deploy (server), by file name.
	AutoDeployManifests map[string]string `json:"autoDeployManifests"`
}

// ToolkitFact is the NVIDIA Container Toolkit's configuration.
type ToolkitFact struct {
	Enable  bool   `json:"enable"`
	Version string `json:"version"`
	// GeneratorArgs are the arguments of `nvidia-ctk cdi generate` as the
	// generator unit passes them.
	GeneratorArgs []string `json:"generatorArgs"`
	// Mounts are hardware.nvidia-container-toolkit.mounts.
	Mounts []MountFact `json:"mounts"`
	// RuntimeConfigTOML is /etc/nvidia-container-runtime/config.toml.
	RuntimeConfigTOML *string `json:"runtimeConfigToml"`
}

// MountFact is one extra mount of the toolkit's CDI spec.
type MountFact struct {
	HostPath      string `json:"hostPath"`
	ContainerPath string `json:"containerPath"`
}

// DriverFact is the NVIDIA driver package.
type DriverFact struct {
	Version string `json:"version"` // "580.95.05"
	// Package is hardware.nvidia.package's store path.
	Package string `json:"package"`
}

// ParseFacts reads a facts file (name is its path, for errors): JSON of
// schema Schema, at most MaxFacts bytes, one object, every field known
// (an unknown field is refused, naming it, so that facts from a newer
// NixOS side fail loudly on an older nodeprep). It checks what Assemble
// relies on: the schema, a printable name, absolute clean paths, drop-in
// and manifest names that are plain file names, a driver package in the
// store, versions that look like versions, files that do not take the
// place of the tree's own paths ("/", /var/run, /run/opengl-driver), a
// known role and simulated server. Errors are marked fault.ErrMalformed.
func ParseFacts(name string, data []byte) (*Facts, error) {
	bad := func(format string, args ...any) error {
		return fault.Malformed(fmt.Errorf("reading facts %q: %s", name, fmt.Sprintf(format, args...)))
	}
	if len(data) > MaxFacts {
		return nil, bad("%d bytes, more than the %d a facts file may have", len(data), MaxFacts)
	}
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return nil, bad("empty: want the facts object")
	case !utf8.Valid(data):
		return nil, bad("not UTF-8: builtins.toJSON writes UTF-8")
	}
	if err := noDuplicateKeys(data); err != nil {
		return nil, bad("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f Facts
	if err := dec.Decode(&f); err != nil {
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bad("data after the facts object")
	}
	if err := f.validate(); err != nil {
		return nil, bad("%v", err)
	}
	return &f, nil
}

// noDuplicateKeys refuses JSON with an object that has a key twice:
// encoding/json keeps the last, so the same facts would say two things
// (builtins.toJSON never writes one). Nesting is bounded by the decoder.
func noDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		keys   map[string]bool
		object bool
		key    bool // the next string is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return nil // the decoder that follows says what is wrong
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if k, ok := tok.(string); ok && top != nil && top.object && top.key {
			if top.keys[k] {
				return fmt.Errorf("key %q twice in one object", k)
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true // a value ended: a key follows
		}
	}
}

func (f *Facts) validate() error {
	if f.Schema != Schema {
		return fmt.Errorf("schema %q: want %q", f.Schema, Schema)
	}
	if f.Name == "" || len(f.Name) > 253 || strings.ContainsFunc(f.Name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) {
		return fmt.Errorf("name %q: want the node configuration's name, printable, without spaces", f.Name)
	}
	switch f.K3s.Role {
	case "agent", "server":
	default:
		return fmt.Errorf("k3s.role %q: want agent or server", f.K3s.Role)
	}
	if f.Simulate != "" && !slices.Contains(gpu.SimulatedNames(), f.Simulate) {
		return fmt.Errorf("simulate %q: want one of %s", f.Simulate, strings.Join(gpu.SimulatedNames(), ", "))
	}
	if len(f.K3s.UnitPath) > MaxUnitPath {
		return fmt.Errorf("k3s.unitPath: %d directories, more than the %d a unit's PATH may have here", len(f.K3s.UnitPath), MaxUnitPath)
	}
	paths := map[string]string{"k3s.dataDir": f.K3s.DataDir, "driver.package": f.Driver.Package}
	if f.K3s.ConfigPath != nil {
		paths["k3s.configPath"] = *f.K3s.ConfigPath
	}
	for i, d := range f.K3s.UnitPath {
		paths[fmt.Sprintf("k3s.unitPath[%d]", i)] = d
	}
	for i, m := range f.Toolkit.Mounts {
		paths[fmt.Sprintf("toolkit.mounts[%d].hostPath", i)] = m.HostPath
		paths[fmt.Sprintf("toolkit.mounts[%d].containerPath", i)] = m.ContainerPath
	}
	for _, k := range slices.Sorted(maps.Keys(paths)) {
		p := paths[k]
		if p == "" && (k == "k3s.dataDir" || k == "driver.package") {
			continue // not configured
		}
		if err := checkPath(p); err != nil {
			return fmt.Errorf("%s %q: %w", k, p, err)
		}
	}
	if p := f.Driver.Package; p != "" && !IsStorePath(p) {
		return fmt.Errorf("driver.package %q: want hardware.nvidia.package's store path, under %s/", p, StoreDir)
	}
	for _, v := range []struct{ field, value string }{
		{"k3s.version", f.K3s.Version}, {"toolkit.version", f.Toolkit.Version}, {"driver.version", f.Driver.Version},
	} {
		if v.value != "" && !versionRE().MatchString(v.value) {
			return fmt.Errorf("%s %q: want the package's version, as nixpkgs' version attribute gives it (1.33.4+k3s1, 580.95.05)", v.field, v.value)
		}
	}
	// The files the facts place in the tree may not take the place of a
	// directory, or of a path the tree has for itself.
	written := map[string]string{}
	if f.K3s.ConfigPath != nil {
		written["k3s.configPath"] = *f.K3s.ConfigPath
	}
	if p := KubeletConfigPath(f.K3s.Args); p != "" && f.K3s.KubeletConfig != nil {
		written["k3s.args' --kubelet-arg=config="] = p
	}
	for _, k := range slices.Sorted(maps.Keys(written)) {
		p := written[k]
		if p == "/" {
			return fmt.Errorf("%s %q: the root directory, not a file", k, p)
		}
		for _, own := range []string{ConfigPath, RuntimeConfigPath, DriverRoot, "/var/run/cdi", "/run/cdi"} {
			if p == own || strings.HasPrefix(own, p+"/") {
				return fmt.Errorf("%s %q: the tree has %s there (want the file's own path)", k, p, own)
			}
		}
		if strings.HasPrefix(p, DriverRoot+"/") {
			return fmt.Errorf("%s %q: under %s, which is the driver package", k, p, DriverRoot)
		}
	}
	for what, m := range map[string]map[string]string{"k3s.dropIns": f.K3s.DropIns, "k3s.autoDeployManifests": f.K3s.AutoDeployManifests} {
		for n := range m {
			if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
				return fmt.Errorf("%s: %q is not a plain file name", what, n)
			}
		}
	}
	return nil
}

// StoreDir is the Nix store: every path Assemble reads is under it.
const StoreDir = "/nix/store"

// IsStorePath says whether p (absolute, clean) is a store path or a path
// inside one: /nix/store/<hash>-<name>[/…].
func IsStorePath(p string) bool {
	rest, ok := strings.CutPrefix(p, StoreDir+"/")
	return ok && rest != "" && !strings.HasPrefix(rest, ".")
}

// versionRE matches a package version as nixpkgs' version attributes
// give them: dotted numbers, then an optional suffix (+k3s1, -rc1).
var versionRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^v?[0-9]+(\.[0-9]+)+([-+~][0-9A-Za-z.+~-]*)?$`)
})

// checkPath refuses a path that is not absolute and clean, or that holds
// a NUL.
func checkPath(p string) error {
	switch {
	case !path.IsAbs(p):
		return errors.New("want an absolute path")
	case path.Clean(p) != p:
		return fmt.Errorf("want it clean (%s)", path.Clean(p))
	case strings.ContainsRune(p, 0):
		return errors.New("holds a NUL byte")
	}
	return nil
}

// SimulatedServer is the simulated server the facts name, or
// DefaultSimulate.
func (f *Facts) SimulatedServer() string {
	if f.Simulate == "" {
		return DefaultSimulate
	}
	return f.Simulate
}
