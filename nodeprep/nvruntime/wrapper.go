package nvruntime

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// The environment that moves the runtime's config file
// (api/config/v1/config.go GetConfigFilePath, read at v1.20.2): the
// runtime reads NVIDIA_CTK_CONFIG_FILE_PATH when it is set and not empty,
// else $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml when
// XDG_CONFIG_HOME is set and not empty, else DefaultPath.
const (
	EnvConfigFile = "NVIDIA_CTK_CONFIG_FILE_PATH"
	EnvConfigHome = "XDG_CONFIG_HOME"
	relConfig     = "nvidia-container-runtime/config.toml"
)

// MaxWrapper is the most of a runtime handler's program Wrapper reads: the
// GPU Operator's wrappers are a few hundred bytes; a script longer than
// this is refused, not read in part.
const MaxWrapper = 64 << 10

// Wrapper is what a shell script in a runtime handler's BinaryName sets
// for the runtime it execs. The GPU Operator's toolkit installs
// /usr/local/nvidia/toolkit/nvidia-container-runtime{,.cdi,.legacy} as
// such scripts (nvidia-container-toolkit
// cmd/nvidia-ctk-installer/toolkit/installer/executables.go: "KEY=VALUE \"
// lines before the .real binary, NVIDIA_CTK_CONFIG_FILE_PATH pointing at
// /usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml;
// before v1.18, tools/container/toolkit/runtime.go set XDG_CONFIG_HOME to
// /usr/local/nvidia/toolkit/.config), and nixpkgs' makeWrapper writes
// "export KEY=VALUE" lines.
type Wrapper struct {
	// Script is the host path of the script read.
	Script string `json:"script" yaml:"script"`
	// Env holds EnvConfigFile and EnvConfigHome where the script sets them
	// to a literal value ("" when set empty).
	Env map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	// Unresolved names those the script sets to a value nodeprep does not
	// expand (a variable, a command substitution).
	Unresolved []string `json:"unresolved,omitempty" yaml:"unresolved,omitempty"`
}

// assignment is one NAME=VALUE word of a shell line.
var assignment = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)
})

// ParseWrapper reads the environment a wrapper script (data, from the host
// path name) sets for EnvConfigFile and EnvConfigHome. It is not a shell:
// it reads each line's leading NAME=VALUE words (after "export", and
// before the command they prefix), a value in single or double quotes or
// bare, and makeWrapper's "${NAME-'v'}" and "${NAME:-'v'}" defaults as v;
// any other value with $ or ` is Unresolved. A later line's setting
// replaces an earlier one. Errors: data is not a script (no "#!"), holds a
// NUL or is larger than MaxWrapper, marked fault.ErrMalformed.
func ParseWrapper(name string, data []byte) (*Wrapper, error) {
	switch {
	case len(data) > MaxWrapper:
		return nil, fault.Malformed(fmt.Errorf("reading the runtime wrapper %q: larger than %d KiB", name, MaxWrapper>>10))
	case !bytes.HasPrefix(data, []byte("#!")):
		return nil, fault.Malformed(fmt.Errorf("reading the runtime wrapper %q: not a script (no #!)", name))
	case bytes.IndexByte(data, 0) >= 0:
		return nil, fault.Malformed(fmt.Errorf("reading the runtime wrapper %q: a NUL byte: not a shell script", name))
	}
	w := &Wrapper{Script: name}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), `\`))
		if strings.HasPrefix(line, "#") {
			continue
		}
		words := strings.Fields(line)
		if len(words) > 0 && words[0] == "export" {
			words = words[1:]
		}
		for _, word := range words {
			m := assignment().FindStringSubmatch(word)
			if m == nil {
				break // the command the assignments prefix
			}
			if m[1] != EnvConfigFile && m[1] != EnvConfigHome {
				continue
			}
			v, ok := literal(m[1], m[2])
			if !ok {
				w.Unresolved = append(w.Unresolved, m[1])
				delete(w.Env, m[1])
				continue
			}
			if w.Env == nil {
				w.Env = map[string]string{}
			}
			w.Env[m[1]] = v
		}
	}
	return w, nil
}

// literal is the value a shell word's right-hand side v gives the variable
// name, when nodeprep can tell without running the shell.
func literal(name, v string) (string, bool) {
	for _, pre := range []string{"${" + name + ":-", "${" + name + "-"} {
		if strings.HasPrefix(v, pre) && strings.HasSuffix(v, "}") {
			v = strings.TrimSuffix(strings.TrimPrefix(v, pre), "}")
			break
		}
	}
	if len(v) >= 2 && (v[0] == '\'' && v[len(v)-1] == '\'' || v[0] == '"' && v[len(v)-1] == '"') {
		q := v[0]
		v = v[1 : len(v)-1]
		if q == '\'' {
			return v, !strings.ContainsRune(v, '\'')
		}
	}
	return v, !strings.ContainsAny(v, "$`'\"\\")
}

// ReadWrapper reads the program a runtime handler's BinaryName names under
// root: nil and no error when it is not a script (the runtime's own
// binary) or does not exist. Errors: a script larger than MaxWrapper or
// otherwise ParseWrapper's (fault.ErrMalformed); an unreadable file,
// marked fault.ErrUnavailable.
func ReadWrapper(root *hostfs.Root, binaryName string) (*Wrapper, error) {
	f, err := root.OpenRegular(binaryName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("reading the runtime program %q: %w", binaryName, err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxWrapper+1))
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("reading the runtime program %q: %w", binaryName, err))
	}
	if !bytes.HasPrefix(data, []byte("#!")) {
		return nil, nil
	}
	return ParseWrapper(binaryName, data)
}

// ConfigPath is the config file the runtime a wrapper w execs reads, and
// why: DefaultPath with "" for a nil w or one that sets neither variable.
// A variable w leaves Unresolved counts as not set (the default). It is
// ConfigPathFor an unknown version.
func (w *Wrapper) ConfigPath() (p, from string) { return w.ConfigPathFor(Version{}) }

// ConfigPathFor is ConfigPath for the runtime of toolkit version v (zero:
// unknown, counted as current): before v1.18 the runtime reads
// XDG_CONFIG_HOME only (v1.17.8 internal/config/config.go), so
// NVIDIA_CTK_CONFIG_FILE_PATH moves nothing.
func (w *Wrapper) ConfigPathFor(v Version) (p, from string) {
	if w == nil {
		return DefaultPath, ""
	}
	old := v != (Version{}) && (v.Major < 1 || v.Major == 1 && v.Minor < 18)
	if v := w.Env[EnvConfigFile]; v != "" && !old {
		return v, fmt.Sprintf("%s in %s", EnvConfigFile, w.Script)
	}
	if v := w.Env[EnvConfigHome]; v != "" {
		return path.Join(v, relConfig), fmt.Sprintf("%s in %s", EnvConfigHome, w.Script)
	}
	return DefaultPath, ""
}
