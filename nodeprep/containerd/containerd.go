// Package containerd reads the containerd configuration k3s renders for its
// embedded containerd and judges whether a pod can reach the CDI spec
// nodeprep patched: CDI enabled in the CRI plugin, the spec's directory
// among cdi_spec_dirs, and any nvidia runtime handler pointing at the
// NVIDIA container runtime.
//
// Sources of the rules this package encodes:
//   - k3s docs, "Advanced Options / Configuring containerd": k3s writes
//     <data-dir>/agent/etc/containerd/config.toml at every start, from
//     config.toml.tmpl or config-v3.toml.tmpl in that directory when one
//     exists; with --container-runtime-endpoint k3s runs no containerd.
//   - containerd docs/cri/config.md and docs/PLUGINS.md: config version 2
//     (containerd 1.x) keeps the CRI settings under
//     plugins."io.containerd.grpc.v1.cri", version 3 (containerd 2.x) under
//     plugins."io.containerd.cri.v1.runtime"; enable_cdi defaults to false
//     in 1.7 and to true in 2.0; cdi_spec_dirs defaults to
//     ["/etc/cdi", "/var/run/cdi"]; a runtime handler's options.BinaryName
//     is the OCI runtime binary runc.v2 starts instead of runc.
//
// The file is parsed with github.com/BurntSushi/toml. The package reads the
// host only through a *hostfs.Root.
package containerd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// Finding codes (cdi.Finding.Code) of this package.
const (
	CodeNotWritten     = "containerd-config-not-written" // config.toml not yet written (first boot)
	CodeExternal       = "containerd-external"           // k3s uses an external CRI endpoint: not checked
	CodeBadConfig      = "containerd-bad-config"         // the file does not parse
	CodeCDIDisabled    = "containerd-cdi-disabled"       // enable_cdi false (or off by default)
	CodeSpecDirMissing = "containerd-spec-dir"           // a patched spec's directory is not in cdi_spec_dirs
	CodeRuntimeBinary  = "containerd-nvidia-runtime"     // an nvidia runtime handler's BinaryName is wrong
	CodeTemplate       = "containerd-template"           // about the template config.toml is rendered from
	CodeVersion        = "containerd-config-version"     // a config version newer than nodeprep knows
)

// The CRI plugin names per config version (containerd docs/PLUGINS.md).
const (
	pluginCRIv2 = "io.containerd.grpc.v1.cri"     // version 2: containerd 1.x
	pluginCRIv3 = "io.containerd.cri.v1.runtime"  // version 3: containerd 2.x
	configDir   = "agent/etc/containerd"          // under k3s's data-dir
	configFile  = "config.toml"                   // what containerd reads
	tmplV2      = "config.toml.tmpl"              // the user's template (k3s renders it)
	tmplV3      = "config-v3.toml.tmpl"           // the same for containerd 2.x (preferred when present)
	nvidiaRT    = "nvidia-container-runtime"      // the NVIDIA container runtime's binary name prefix
	driverPkgRe = `(^|/)[a-z0-9]{32}-nvidia-x11-` // a NixOS driver package store path
)

// DefaultSpecDirs are containerd's cdi_spec_dirs when the config sets none.
var DefaultSpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// Options are what Check needs to know about k3s and nodeprep.
type Options struct {
	// DataDir is k3s's effective data-dir (k3s.Result.DataDir).
	DataDir string
	// Endpoint is k3s's container-runtime-endpoint ("" = k3s's own containerd).
	Endpoint string
	// SpecPaths are the host paths of the CDI specs nodeprep patched: each
	// one's directory must be in cdi_spec_dirs.
	SpecPaths []string
	// DriverRoot is the driver root (NixOS /run/opengl-driver): a runtime
	// BinaryName under it is a path into the driver package.
	DriverRoot string
	// UnitPath are the directories of the k3s service's PATH, in order
	// (join.k3sUnitPath: the NixOS module passes them). When set and k3s
	// has not rendered config.toml yet, the handlers k3s will register
	// are predicted from where it looks (PredictRuntimes) and judged as
	// rendered ones; nil: unknown, nothing is predicted.
	UnitPath []string
	// K3sVersion is the version of k3s ("v1.33.4+k3s1"; "" for a current
	// one): where it looks for the NVIDIA runtimes (SearchesPath).
	K3sVersion string
	// ContainerdVersion is the version of the containerd k3s ships
	// ("2.0.5"), for when its binary cannot be read (a host tree
	// assembled from a configuration); "" when unknown.
	ContainerdVersion string
}

// Runtime is one nvidia runtime handler of the CRI plugin.
type Runtime struct {
	Name       string `json:"name" yaml:"name"`             // the handler ("nvidia", "nvidia-cdi", …)
	BinaryName string `json:"binaryName" yaml:"binaryName"` // options.BinaryName ("" = runc)
}

// Config is the part of a containerd config this package reads.
type Config struct {
	// Path is the host path of the file parsed.
	Path string `json:"path" yaml:"path"`
	// Version is the config's version field (1 when absent, as containerd
	// reads it); 2 means containerd 1.x, 3 containerd 2.x.
	Version int64 `json:"version" yaml:"version"`
	// EnableCDI is enable_cdi, or nil when the file does not set it.
	EnableCDI *bool `json:"enableCDI,omitempty" yaml:"enableCDI,omitempty"`
	// SpecDirs is cdi_spec_dirs as written (nil when unset).
	SpecDirs []string `json:"cdiSpecDirs,omitempty" yaml:"cdiSpecDirs,omitempty"`
	// Runtimes are the runtime handlers whose name starts with "nvidia",
	// sorted by name.
	Runtimes []Runtime `json:"runtimes,omitempty" yaml:"runtimes,omitempty"`
	// MisplacedRuntimes are the runtime handlers, any name, written under
	// the CRI plugin of the other config version (a version 2 table in a
	// version 3 file, or the reverse), which the containerd of this version
	// does not read; sorted by name. Not in Runtimes.
	MisplacedRuntimes []Runtime `json:"misplacedRuntimes,omitempty" yaml:"misplacedRuntimes,omitempty"`
	// Predicted is true for a config k3s has not rendered and that has no
	// template of the user's: only the handlers k3s would find
	// (Prediction) and the default spec directories are known.
	Predicted bool `json:"predicted,omitempty" yaml:"predicted,omitempty"`
	// Prediction is where k3s would look for the NVIDIA runtimes and what
	// it would find, when Runtimes hold handlers k3s's base template adds
	// (PredictRuntimes); nil for a rendered config.
	Prediction *Prediction `json:"prediction,omitempty" yaml:"prediction,omitempty"`
}

// CDIEnabled reports whether CDI is on: enable_cdi when set, else the
// default of the containerd the version implies (on for 3, off before).
func (c *Config) CDIEnabled() bool {
	if c.EnableCDI != nil {
		return *c.EnableCDI
	}
	return c.Version >= 3
}

// CDISpecDirs returns the directories containerd loads CDI specs from:
// cdi_spec_dirs, or DefaultSpecDirs when unset. This is the runtime's
// view of where specs live (a CDI cache over the runtime's spec dirs
// starts from it).
func (c *Config) CDISpecDirs() []string {
	if c.SpecDirs != nil {
		return slices.Clone(c.SpecDirs)
	}
	return slices.Clone(DefaultSpecDirs)
}

// Parse decodes a containerd config (TOML). name is the host path, for
// errors and Config.Path. Errors: malformed TOML or a field of the wrong
// type, marked fault.ErrMalformed.
func Parse(name string, data []byte) (*Config, error) {
	var raw struct {
		Version int64                     `toml:"version"`
		Plugins map[string]toml.Primitive `toml:"plugins"`
	}
	if err := bounded.CheckTOML(data); err != nil { // before the decoder, which would overflow the stack
		return nil, fault.Malformed(fmt.Errorf("reading containerd config %q: %w", name, err))
	}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&raw)
	if err != nil {
		return nil, fault.Malformed(fmt.Errorf("reading containerd config %q: %w", name, err))
	}
	c := &Config{Path: name, Version: raw.Version}
	if c.Version == 0 {
		c.Version = 1
	}
	plugin := pluginCRIv2
	if c.Version >= 3 {
		plugin = pluginCRIv3
	}
	c.MisplacedRuntimes = misplacedRuntimes(c, md, raw.Plugins)
	prim, ok := raw.Plugins[plugin]
	if !ok {
		return c, nil
	}
	var cri struct {
		EnableCDI  *bool    `toml:"enable_cdi"`
		SpecDirs   []string `toml:"cdi_spec_dirs"`
		Containerd struct {
			Runtimes map[string]struct {
				Options struct {
					BinaryName string `toml:"BinaryName"`
				} `toml:"options"`
			} `toml:"runtimes"`
		} `toml:"containerd"`
	}
	if err := md.PrimitiveDecode(prim, &cri); err != nil {
		return nil, fault.Malformed(fmt.Errorf("reading containerd config %q: plugins.%q: %w", name, plugin, err))
	}
	c.EnableCDI, c.SpecDirs = cri.EnableCDI, cri.SpecDirs
	for name, rt := range cri.Containerd.Runtimes {
		if strings.HasPrefix(name, "nvidia") {
			c.Runtimes = append(c.Runtimes, Runtime{Name: name, BinaryName: rt.Options.BinaryName})
		}
	}
	sortRuntimes(c.Runtimes)
	return c, nil
}

// sortRuntimes sorts runtime handlers by name.
func sortRuntimes(rts []Runtime) {
	sort.Slice(rts, func(i, j int) bool { return rts[i].Name < rts[j].Name })
}

// templateAction matches a Go template action; Load drops them to read a
// template that has not been rendered yet.
// Actions and comments may span lines (text/template, since Go 1.16).
var templateAction = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?s)\{\{.*?\}\}`) })

// Report is what Check found.
type Report struct {
	// Config is the configuration read (nil when none was: external
	// endpoint, not yet written, unreadable).
	Config *Config `json:"config,omitempty" yaml:"config,omitempty"`
	// Template is the host path of the template k3s renders config.toml
	// from, when there is one.
	Template string `json:"template,omitempty" yaml:"template,omitempty"`
	// Installed is the containerd k3s runs, read from its binary (nil
	// when it could not be read: then the config's version decides).
	Installed *Installed `json:"installed,omitempty" yaml:"installed,omitempty"`
	// Checked is false when nothing could be judged (external endpoint,
	// first boot).
	Checked bool `json:"checked" yaml:"checked"`
	// Findings are the problems, errors first.
	Findings cdi.Findings `json:"findings" yaml:"findings"`
}

// ConfigPath returns the host path of the containerd config k3s writes
// under dataDir: <dataDir>/agent/etc/containerd/config.toml.
func ConfigPath(dataDir string) string { return path.Join(dataDir, configDir, configFile) }

// Load reads the containerd config k3s uses under opts.DataDir. It returns
// (nil, "", nil) when k3s runs no containerd of its own (opts.Endpoint) or
// when neither config.toml nor a template exists. When config.toml is
// missing but a template exists, the template is read with its template
// actions removed. The second result is the template's host path, if any.
//
// With opts.UnitPath set and no config.toml, the handlers k3s's base
// template will add are predicted (PredictRuntimes) and added to the
// template's config when it is built on {{ template "base" . }}, or make
// up the config (Config.Predicted) when there is no template.
// Errors: unreadable (fault.ErrUnavailable) or malformed, also larger
// than bounded.MaxContainerdConfig (fault.ErrMalformed).
func Load(root *hostfs.Root, opts Options) (*Config, string, error) {
	if opts.Endpoint != "" {
		return nil, "", nil
	}
	dir := path.Join(opts.DataDir, configDir)
	tmpl := ""
	for _, name := range []string{tmplV3, tmplV2} {
		if root.Exists(path.Join(dir, name)) {
			tmpl = path.Join(dir, name)
			break
		}
	}
	p := path.Join(dir, configFile)
	data, err := root.ReadFile(p, bounded.MaxContainerdConfig)
	based := false // a template built on k3s's base, which adds the handlers it finds
	if errors.Is(err, fs.ErrNotExist) && tmpl != "" {
		p = tmpl
		data, err = root.ReadFile(p, bounded.MaxContainerdConfig)
		based = err == nil && baseTemplate().Match(data)
		data = templateVersion(p, data)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && opts.UnitPath != nil:
		pred := PredictRuntimes(root, opts.UnitPath, opts.K3sVersion)
		c := predicted(opts.DataDir, pred, opts.ContainerdVersion)
		c.Prediction = &pred
		return c, tmpl, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, tmpl, nil
	case errors.Is(err, bounded.ErrTooLarge):
		return nil, tmpl, fault.Malformed(fmt.Errorf("reading containerd config %q: %w", p, err))
	case err != nil:
		return nil, tmpl, fault.Unavailable(fmt.Errorf("reading containerd config %q: %w", p, err))
	}
	c, err := Parse(p, data)
	if err == nil && based && opts.UnitPath != nil {
		pred := PredictRuntimes(root, opts.UnitPath, opts.K3sVersion)
		addPredicted(c, pred)
		c.Prediction = &pred
	}
	return c, tmpl, err
}

// Check loads the containerd config k3s uses and judges it:
//   - k3s with an external endpoint: a warning, not checked;
//   - no config.toml yet (first boot, k3s writes it when it starts): a
//     warning "containerd config not yet written; checked on next boot";
//   - CDI disabled (enable_cdi = false, or unset where containerd 1.x
//     defaults it off): an error;
//   - a spec's directory (after symlinks, under root) not among
//     CDISpecDirs: an error;
//   - a runtime handler written under the other config version's CRI
//     plugin, which the containerd reading the file ignores
//     (CodeMisplacedRuntime: an error for an nvidia* handler);
//   - an nvidia* runtime handler whose BinaryName is empty (plain runc),
//     missing under root, not an executable regular file, not named
//     nvidia-container-runtime*, or a path into the driver package: an
//     error; a relative BinaryName (found through containerd's PATH): a
//     warning.
//
// It returns an error only when the file cannot be read or parsed.
func Check(root *hostfs.Root, opts Options) (*Report, error) {
	r := &Report{}
	if opts.Endpoint != "" {
		r.Findings = append(r.Findings, warnf(CodeExternal, "k3s uses the external container runtime at %s (container-runtime-endpoint): its CDI configuration is not checked", opts.Endpoint))
		return r, nil
	}
	c, tmpl, err := Load(root, opts)
	r.Template = tmpl
	if err != nil {
		return r, err
	}
	if c == nil {
		r.Findings = append(r.Findings, warnf(CodeNotWritten, "containerd config not yet written (%s); checked on next boot", ConfigPath(opts.DataDir)))
		return r, nil
	}
	r.Config, r.Checked = c, true
	if c.Version > 3 {
		r.Findings = append(r.Findings, warnf(CodeVersion, "%s: config version %d is newer than the versions nodeprep knows (2: containerd 1.7, 3: containerd 2.x); checked as version 3", c.Path, c.Version))
	}
	if tmpl != "" && c.Path != tmpl {
		r.Findings = append(r.Findings, warnf(CodeTemplate, "%s is rendered from %s at each k3s start: fix problems in the template", c.Path, tmpl))
	}
	if c.Prediction != nil && !slices.ContainsFunc(c.Runtimes, func(rt Runtime) bool { return rt.BinaryName != "" }) {
		r.Findings = append(r.Findings, noHandler(*c.Prediction, opts.DataDir))
	}
	if !c.Predicted { // k3s's own defaults are not known: nothing to judge
		cdiFs, installed := cdiFindings(root, opts, c)
		r.Installed = installed
		r.Findings = append(r.Findings, cdiFs...)
		r.Findings = append(r.Findings, misplacedFindings(c, installed)...)
	}
	r.Findings = append(r.Findings, checkSpecDirs(root, c, opts.SpecPaths)...)
	for _, rt := range c.Runtimes {
		r.Findings = append(r.Findings, checkRuntime(root, c, rt, opts.DriverRoot)...)
	}
	sort.SliceStable(r.Findings, func(i, j int) bool {
		return r.Findings[i].Severity == cdi.SeverityError && r.Findings[j].Severity != cdi.SeverityError
	})
	return r, nil
}

func criPlugin(version int64) string {
	if version >= 3 {
		return pluginCRIv3
	}
	return pluginCRIv2
}

func checkSpecDirs(root *hostfs.Root, c *Config, specs []string) cdi.Findings {
	resolved := map[string]bool{}
	for _, d := range c.CDISpecDirs() {
		if r, err := root.Resolve(d); err == nil {
			resolved[r] = true
		}
	}
	var out cdi.Findings
	for _, s := range specs {
		dir := path.Dir(s)
		r, err := root.Resolve(dir)
		if err == nil && resolved[r] {
			continue
		}
		out = append(out, errorf(CodeSpecDirMissing, "%s: cdi_spec_dirs %q does not include %s, the directory of %s: containerd never loads the patched spec; add %s to cdi_spec_dirs under [plugins.%q] %s, or move the spec into one of those directories", c.Path, c.CDISpecDirs(), dir, s, dir, criPlugin(c.Version), whereToSet(c)))
	}
	return out
}

// whereToSet says where a setting of c goes: in c itself when it is the
// template k3s renders, else in that template beside it (k3s rewrites
// the file it renders at each start), named for c's version.
func whereToSet(c *Config) string {
	if strings.HasSuffix(c.Path, ".tmpl") {
		return "in it"
	}
	tmpl := tmplV2
	if c.Version >= 3 {
		tmpl = tmplV3
	}
	return fmt.Sprintf("in %s beside it (k3s rewrites %s at each start)", tmpl, path.Base(c.Path))
}

var driverPkg = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(driverPkgRe) })

func checkRuntime(root *hostfs.Root, c *Config, rt Runtime, driverRoot string) cdi.Findings {
	bin := rt.BinaryName
	where := fmt.Sprintf("%s: runtime handler %q", c.Path, rt.Name)
	if bin == "" {
		return cdi.Findings{errorf(CodeRuntimeBinary, "%s has no options.BinaryName: it runs plain runc, not the NVIDIA container runtime", where)}
	}
	if !path.IsAbs(bin) {
		return cdi.Findings{warnf(CodeRuntimeBinary, "%s: BinaryName %q is found through containerd's PATH: not checked", where, bin)}
	}
	resolved, err := root.Resolve(bin)
	if err != nil {
		resolved = bin
	}
	inDriver := driverPkg().MatchString(bin) || driverPkg().MatchString(resolved)
	// An FHS driver root (/usr) also holds the toolkit; only a driver root
	// of its own (NixOS /run/opengl-driver) is the driver package.
	fhs := driverRoot == "/" || driverRoot == "/usr" || driverRoot == "/usr/local"
	if driverRoot != "" && !fhs && (bin == driverRoot || strings.HasPrefix(bin, strings.TrimSuffix(driverRoot, "/")+"/")) {
		inDriver = true
	}
	if inDriver {
		return cdi.Findings{errorf(CodeRuntimeBinary, "%s: BinaryName %s (→ %s) is a path into the driver package, which ships no container runtime: point it at the NVIDIA Container Toolkit's nvidia-container-runtime", where, bin, resolved)}
	}
	st, err := root.Stat(bin)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return cdi.Findings{errorf(CodeRuntimeBinary, "%s: BinaryName %s does not exist: pods with this runtime class fail to start", where, bin)}
	case err != nil:
		return cdi.Findings{errorf(CodeRuntimeBinary, "%s: BinaryName %s: %v", where, bin, err)}
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return cdi.Findings{errorf(CodeRuntimeBinary, "%s: BinaryName %s (→ %s) is not an executable file (%s)", where, bin, resolved, st.Mode())}
	}
	if !strings.HasPrefix(path.Base(bin), nvidiaRT) && !strings.HasPrefix(path.Base(resolved), nvidiaRT) {
		return cdi.Findings{errorf(CodeRuntimeBinary, "%s: BinaryName %s (→ %s) is not the NVIDIA container runtime (%s*)", where, bin, resolved, nvidiaRT)}
	}
	return nil
}

func errorf(code, format string, args ...any) cdi.Finding {
	return cdi.Finding{Severity: cdi.SeverityError, Code: code, Message: fmt.Sprintf(format, args...)}
}

func warnf(code, format string, args ...any) cdi.Finding {
	return cdi.Finding{Severity: cdi.SeverityWarning, Code: code, Message: fmt.Sprintf(format, args...)}
}

// SpecDirs returns the directories the containerd k3s uses loads CDI specs
// from: Config.CDISpecDirs of the config Load finds, or DefaultSpecDirs
// when k3s has not written one yet. known is false when k3s uses an
// external runtime (opts.Endpoint), whose directories this package cannot
// see. Errors are Load's. This is the runtime's list of spec directories
// for a CDI cache that should see what containerd sees.
func SpecDirs(root *hostfs.Root, opts Options) (dirs []string, known bool, err error) {
	if opts.Endpoint != "" {
		return nil, false, nil
	}
	c, _, err := Load(root, opts)
	if err != nil {
		return nil, false, err
	}
	if c == nil {
		return slices.Clone(DefaultSpecDirs), true, nil
	}
	return c.CDISpecDirs(), true, nil
}
