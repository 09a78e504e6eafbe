package containerd

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"

	"github.com/nodeprep/nodeprep/cdi"
)

// CodeMisplacedRuntime: a runtime handler's table is under the CRI plugin
// of the other config version, where the containerd that reads the file
// does not look.
const CodeMisplacedRuntime = "containerd-misplaced-runtime"

// misplacedRuntimes reads the runtime handlers (any name) written under the
// CRI plugin of the config version c does not have (a version 2 table,
// plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<name>, in a
// version 3 file, or a version 3 table in a version 2 file), sorted by
// name. A handler also written in its place is not misplaced (containerd
// reads that one). Read leniently: containerd itself only warns about such
// keys, so a table of an unexpected shape there is no reason to call the
// file malformed; a value that is not a table is left out, a BinaryName
// that is not a string is "".
func misplacedRuntimes(c *Config, md toml.MetaData, plugins map[string]toml.Primitive) []Runtime {
	var other string
	switch c.Version {
	case 2:
		other = pluginCRIv3
	case 3:
		other = pluginCRIv2
	default:
		return nil
	}
	misplaced := runtimeTables(md, plugins, other)
	inPlace := runtimeTables(md, plugins, criPlugin(c.Version))
	var out []Runtime
	for name, v := range misplaced {
		t, ok := v.(map[string]any)
		if _, dup := inPlace[name]; !ok || dup {
			// A copy beside the one containerd reads is harmless.
			continue
		}
		rt := Runtime{Name: name}
		if opts, ok := t["options"].(map[string]any); ok {
			rt.BinaryName, _ = opts["BinaryName"].(string)
		}
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// runtimeTables returns the containerd.runtimes table of the CRI plugin
// plugin, each handler's value as decoded (nil when there is none or it is
// not a table of tables).
func runtimeTables(md toml.MetaData, plugins map[string]toml.Primitive, plugin string) map[string]any {
	prim, ok := plugins[plugin]
	if !ok {
		return nil
	}
	var cri struct {
		Containerd struct {
			Runtimes map[string]any `toml:"runtimes"`
		} `toml:"containerd"`
	}
	if err := md.PrimitiveDecode(prim, &cri); err != nil {
		return nil
	}
	return cri.Containerd.Runtimes
}

// bareKey matches a TOML bare key (toml.io, "Keys").
var bareKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+$`) })

// runtimeTable is the TOML table of the runtime handler name under the CRI
// plugin plugin, as containerd's docs write it
// (plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi).
func runtimeTable(plugin, name string) string {
	if !bareKey().MatchString(name) {
		name = fmt.Sprintf("%q", name)
	}
	return fmt.Sprintf("plugins.%q.containerd.runtimes.%s", plugin, name)
}

// Misplaced returns the handler name's table as c misplaces it (under the
// other config version's CRI plugin) and where it belongs, and whether c
// misplaces it at all. The pod-path hints use it: a runtime class whose
// handler is misplaced does not exist for containerd.
func (c *Config) Misplaced(name string) (Runtime, bool) {
	for _, rt := range c.MisplacedRuntimes {
		if rt.Name == name {
			return rt, true
		}
	}
	return Runtime{}, false
}

// MisplacedHint says where the handler name's table is and where it
// belongs, for a handler c misplaces ("" for any other): "the handler
// nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes,
// which containerd 2.x (config version 3) ignores; move it to
// plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi in
// config-v3.toml.tmpl beside it (…)".
func (c *Config) MisplacedHint(name string) string {
	is, move := c.misplacement(name)
	if is == "" {
		return ""
	}
	return is + "; " + move
}

// misplacement is MisplacedHint in two parts: where the table is and who
// ignores it, and where to move it.
func (c *Config) misplacement(name string) (is, move string) {
	if _, ok := c.Misplaced(name); !ok {
		return "", ""
	}
	from, to, reader := pluginCRIv2, pluginCRIv3, "containerd 2.x (config version 3)"
	if c.Version < 3 {
		from, to, reader = pluginCRIv3, pluginCRIv2, "containerd 1.x (config version 2)"
	}
	return fmt.Sprintf("the handler %s is under plugins.%q.containerd.runtimes, which %s ignores", name, from, reader),
		fmt.Sprintf("move it to %s %s", runtimeTable(to, name), whereToSet(c))
}

// misplacedFindings judges c's misplaced handlers (Config.MisplacedRuntimes) for
// the containerd installed (nil: unknown):
//   - in a version 3 file containerd 2.x reads only
//     plugins."io.containerd.cri.v1.runtime"; a handler under
//     plugins."io.containerd.grpc.v1.cri" is logged "Ignoring unknown key in
//     TOML for plugin" (containerd cmd/containerd/server/config/config.go,
//     Config.Decode) and a pod of its runtime class fails with "no runtime
//     for … is configured" (internal/cri/config/config.go);
//   - in a version 2 file containerd 1.x reads only
//     plugins."io.containerd.grpc.v1.cri"; containerd 2.x migrates the file
//     to version 3 and keeps the version 3 runtimes table whole when there
//     is one, so every handler written the version 2 way is dropped
//     (plugins/cri/runtime/plugin.go, migrateConfig): a warning there.
//
// A handler named nvidia* is an error (GPU pods name it), any other a
// warning.
func misplacedFindings(c *Config, installed *Installed) cdi.Findings {
	var out cdi.Findings
	for _, rt := range c.MisplacedRuntimes {
		sev := cdi.SeverityWarning
		if strings.HasPrefix(rt.Name, "nvidia") {
			sev = cdi.SeverityError
		}
		is, move := c.misplacement(rt.Name)
		msg := fmt.Sprintf("%s: %s, so pods with runtimeClassName %s fail with `no runtime for %q is configured`; %s", c.Path, is, rt.Name, rt.Name, move)
		if c.Version < 3 && installed != nil && installed.Major >= 2 {
			sev = cdi.SeverityWarning
			msg = fmt.Sprintf("%s: the handler %s is under plugins.%q.containerd.runtimes in a version %d file: containerd %s reads it only because it migrates the file to version 3, and then drops every handler written under plugins.%q.containerd.runtimes; containerd 1.x ignores it: write the config as version 3 (k3s: %s) with every handler under plugins.%q.containerd.runtimes", c.Path, rt.Name, pluginCRIv3, c.Version, installed.Version, pluginCRIv2, tmplV3, pluginCRIv3)
		}
		out = append(out, cdi.Finding{Severity: sev, Code: CodeMisplacedRuntime, Message: msg})
	}
	return out
}
