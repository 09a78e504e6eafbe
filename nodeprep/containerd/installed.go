package containerd

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// Finding codes of the installed-version judgement.
const (
	CodeIgnoredKey = "containerd-ignored-key" // a key the installed containerd does not read (enable_cdi on 2.4+)
)

// BinaryPath returns the host path of the containerd binary k3s runs:
// k3s unpacks its bundled binaries into <data-dir>/data/<hash>/bin and
// points <data-dir>/data/current at the running release (k3s docs,
// "Advanced Options": the data-dir layout; pkg/data extraction).
func BinaryPath(dataDir string) string {
	return path.Join(dataDir, "data", "current", "bin", "containerd")
}

// Installed is the containerd a node runs, read from its binary.
type Installed struct {
	// Path is the host path of the binary read.
	Path string `json:"path" yaml:"path"`
	// Version is its version as built ("2.0.5-k3s1", "2.4.2"), without
	// the leading v.
	Version string `json:"version" yaml:"version"`
	// Major and Minor are the first two numbers of Version.
	Major int `json:"major" yaml:"major"`
	Minor int `json:"minor" yaml:"minor"`
}

// versionX matches the -X linker flag containerd's and k3s's builds set
// the version with (containerd Makefile: -X $(PKG)/version.Version=…).
var versionX = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`-X[= ]'?github\.com/(?:k3s-io|containerd)/containerd(?:/v2)?/version\.Version=v?([0-9][^ '"]*)`)
})

// ReadInstalled reads the version of the containerd binary at a host path
// from its Go build information (debug/buildinfo, no process is run): the
// version.Version its build set with -X, else the version of the
// github.com/containerd/containerd(/v2) module it was built from (the
// main module or a dependency, a replacement's version first, as k3s
// replaces it with its fork). Errors: the file is missing
// (fs.ErrNotExist), not a regular file (bounded.ErrNotRegular: a FIFO, a
// directory), not a Go binary, or names no containerd version.
func ReadInstalled(root *hostfs.Root, binary string) (*Installed, error) {
	// Opened without blocking and only when it is a regular file: a FIFO
	// in its place must not hang a boot.
	f, err := root.OpenRegular(binary)
	if err != nil {
		return nil, fmt.Errorf("reading containerd's version from %s: %w", binary, err)
	}
	defer f.Close()
	bi, err := buildinfo.Read(f)
	if err != nil {
		return nil, fmt.Errorf("reading containerd's version from %s: %w", binary, err)
	}
	v := ""
	for _, s := range bi.Settings {
		if s.Key == "-ldflags" {
			if m := versionX().FindStringSubmatch(s.Value); m != nil {
				v = m[1]
			}
		}
	}
	if v == "" {
		for _, m := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
			if m.Path != "github.com/containerd/containerd/v2" && m.Path != "github.com/containerd/containerd" {
				continue
			}
			v = m.Version
			if m.Replace != nil && m.Replace.Version != "" {
				v = m.Replace.Version
			}
			break
		}
	}
	return installedOf(binary, v)
}

// installedOf is the containerd at binary of version v ("v2.0.5-k3s1"),
// its major and minor parsed. Errors: v names no version.
func installedOf(binary, v string) (*Installed, error) {
	v = strings.TrimPrefix(v, "v")
	in := &Installed{Path: binary, Version: v}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return nil, fmt.Errorf("reading containerd's version from %s: its build information names no containerd version (%q)", binary, v)
	}
	var err error
	if in.Major, err = strconv.Atoi(parts[0]); err == nil {
		in.Minor, err = strconv.Atoi(leadingDigits(parts[1]))
	}
	if err != nil {
		return nil, fmt.Errorf("reading containerd's version from %s: %q is not a version", binary, v)
	}
	return in, nil
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// alwaysCDI reports whether this containerd has CDI on whatever the
// config says: containerd 2.4.2 reads no enable_cdi key (its CRI config
// has only cdi_spec_dirs; a version-3 file's key is logged "Ignoring
// unknown key in TOML", a version-2 file's is dropped by the migration,
// plugins/cri/runtime/plugin.go: "CDI is always enabled"), as the real
// containerd test shows. For 2.0 to 2.3 nodeprep does not assume it.
func (in *Installed) alwaysCDI() bool { return in.Major > 2 || in.Major == 2 && in.Minor >= 4 }

// cdiFindings judges CDI for the containerd installed (ReadInstalled on
// BinaryPath) and the config k3s renders:
//   - containerd 2.4 and later: CDI is on; an enable_cdi = false in the
//     file is a warning (the key is ignored), never an error;
//   - containerd 2.0 to 2.3: enable_cdi defaults to true (containerd PR
//     9621); an explicit false is an error;
//   - containerd 1.x: enable_cdi defaults to false; unset or false is an
//     error, and so is a version-3 config (1.x reads versions 1 and 2);
//   - the binary cannot be read: the config's version decides as before
//     (3: containerd 2.x, on by default; 2: 1.x, off), and an error says
//     the binary could not be read.
func cdiFindings(root *hostfs.Root, opts Options, c *Config) (cdi.Findings, *Installed) {
	dataDir := opts.DataDir
	in, err := ReadInstalled(root, BinaryPath(dataDir))
	if err != nil && opts.ContainerdVersion != "" {
		if known, kerr := installedOf(BinaryPath(dataDir)+" (as k3s ships it)", opts.ContainerdVersion); kerr == nil {
			in, err = known, nil
		}
	}
	var out cdi.Findings
	off := func(why string) cdi.Finding {
		return errorf(CodeCDIDisabled, "%s: %s: pods asking for nvidia.com/gpu CDI devices never get the patched spec; set enable_cdi = true under [plugins.%q]", c.Path, why, criPlugin(c.Version))
	}
	switch {
	case err != nil:
		// The config's version decides, as a guess: said only where it
		// leads to an error.
		if !c.CDIEnabled() {
			unread := "it does not exist"
			if !errors.Is(err, fs.ErrNotExist) {
				unread = err.Error()
			}
			why := "enable_cdi = false"
			if c.EnableCDI == nil {
				why = fmt.Sprintf("enable_cdi is not set and containerd 1.x (config version %d) defaults it to false (the containerd k3s runs, %s, could not be read: %s; containerd 2.x has CDI on)", c.Version, BinaryPath(dataDir), unread)
			}
			out = append(out, off(why))
		}
		return out, nil
	case in.alwaysCDI():
		if c.EnableCDI != nil && !*c.EnableCDI {
			out = append(out, warnf(CodeIgnoredKey, "%s: enable_cdi = false is ignored by containerd %s, which always has CDI on (remove the key)", c.Path, in.Version))
		}
	case in.Major == 2:
		if c.EnableCDI != nil && !*c.EnableCDI {
			out = append(out, off(fmt.Sprintf("enable_cdi = false (containerd %s)", in.Version)))
		}
	default:
		if c.Version >= 3 {
			out = append(out, errorf(CodeBadConfig, "%s: config version %d, which containerd %s does not read (1.x reads versions 1 and 2)", c.Path, c.Version, in.Version))
		} else if !c.CDIEnabled() {
			why := "enable_cdi = false"
			if c.EnableCDI == nil {
				why = fmt.Sprintf("enable_cdi is not set and containerd %s defaults it to false", in.Version)
			}
			out = append(out, off(why))
		}
	}
	return out, in
}

// baseTemplate matches the call of k3s's own template that a user's
// template extends (k3s docs, "Configuring containerd": a template may
// start with {{ template "base" . }} and add to it).
var baseTemplate = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{\{-?\s*template\s+"base"\s+\.\s*-?\}\}`) })

// topVersion matches a top-level version key.
var topVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^\s*version\s*=`) })

// templateVersion returns a template's text, as Load reads it before k3s
// has rendered it, with the version line k3s's base template brings: a
// template built on {{ template "base" . }} has no version of its own,
// and the base is version 3 for config-v3.toml.tmpl (containerd 2.x)
// and version 2 for config.toml.tmpl. The template's actions are
// removed; tmplPath is its host path.
func templateVersion(tmplPath string, tmpl []byte) []byte {
	out := templateAction().ReplaceAll(tmpl, nil)
	if !baseTemplate().Match(tmpl) || topVersion().Match(out) {
		return out
	}
	v := "2"
	if path.Base(tmplPath) == tmplV3 {
		v = "3"
	}
	return append([]byte("version = "+v+"\n"), out...)
}
