package k3s

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultConfigPath is k3s's default config file (k3s --config, K3S_CONFIG_FILE).
const DefaultConfigPath = "/etc/rancher/k3s/config.yaml"

// The config keys (and command-line flags, without "--") whose lists nodeprep
// computes and writes.
const (
	KeyNodeLabel  = "node-label"  // k3s's node-label key (kubelet --node-labels)
	KeyNodeTaint  = "node-taint"  // k3s's node-taint key (kubelet --register-with-taints)
	KeyKubeletArg = "kubelet-arg" // k3s's kubelet-arg key: extra kubelet flags, applied after k3s's own
	KeyDataDir    = "data-dir"    // k3s's data-dir key (short -d): the agent's state is under <data-dir>/agent
	KeyConfig     = "config"      // k3s's --config flag (short -c): the config file
	// KeyContainerRuntimeEndpoint names an external CRI socket; k3s then
	// runs no containerd of its own.
	KeyContainerRuntimeEndpoint = "container-runtime-endpoint"
)

// listKeys are the repeatable keys Merge computes; scalarKeys the
// single-valued ones (the last value wins, k3s's command line last).
var (
	listKeys   = map[string]bool{KeyNodeLabel: true, KeyNodeTaint: true, KeyKubeletArg: true}
	scalarKeys = map[string]bool{KeyDataDir: true, KeyContainerRuntimeEndpoint: true}
	// shortFlags are k3s's one-letter aliases (k3s pkg/cli/cmds: "data-dir,d",
	// "config,c"); a config file key of one letter becomes "-k" (k3s
	// configfilearg readConfigFile).
	shortFlags = map[string]string{"d": KeyDataDir, "c": KeyConfig}
)

// ArgsSource is the Source of entries and changes that come from k3s
// command-line arguments rather than a file.
const ArgsSource = "k3s arguments"

// File is one k3s config file: its host path and its bytes.
type File struct {
	Path string // host path of the file
	Data []byte // its YAML
}

// DropInDir returns the drop-in directory of a k3s config file:
// "<configPath>.d" (k3s docs, "Configuration File": "When overriding the
// default config file name, the drop-in directory path is also modified").
func DropInDir(configPath string) string { return configPath + ".d" }

// CheckDropInName returns an error (unmarked: callers give it the kind)
// unless name is a plain file name k3s reads from the drop-in directory:
// no "/", not "." or "..", ending in .yaml or .yml (IsDropInName).
func CheckDropInName(name string) error {
	if name != path.Base(name) || name == "." || name == ".." || !IsDropInName(name) {
		return fmt.Errorf("drop-in name %q: want a plain file name (no /) ending in .yaml or .yml (k3s reads only those)", name)
	}
	return nil
}

// IsDropInName reports whether k3s reads a file of this name from the
// drop-in directory: names ending in .yaml or .yml, case-insensitively
// (k3s pkg/configfilearg dotDFiles, util.HasSuffixI).
func IsDropInName(name string) bool {
	l := strings.ToLower(name)
	return strings.HasSuffix(l, ".yaml") || strings.HasSuffix(l, ".yml")
}

// MaxConfigSize is the largest k3s config file or drop-in nodeprep reads:
// 1 MiB, far more than any real one (a few hundred bytes); a larger file
// is malformed input rather than a reason to hold it in memory.
const MaxConfigSize = 1 << 20

// ReadFiles reads the k3s config files in the order k3s reads them:
// configPath (when it exists), then the regular files in DropInDir(configPath)
// whose names IsDropInName accepts, sorted by name in byte order (k3s uses
// os.ReadDir, which sorts by name). Directories are skipped, as k3s does. A
// missing file or directory is not an error; an unreadable one is, marked
// fault.ErrUnavailable; a FIFO, device or socket where a file should be,
// or a file over MaxConfigSize, is marked fault.ErrMalformed (exit 65, as
// for the spec and the config file).
func ReadFiles(root *hostfs.Root, configPath string) ([]File, error) {
	var files []File
	data, err := root.ReadFileLimit(configPath, MaxConfigSize)
	switch {
	case err == nil:
		files = append(files, File{Path: configPath, Data: data})
	case errors.Is(err, hostfs.ErrNotRegular), errors.Is(err, hostfs.ErrTooLarge):
		return nil, fault.Malformed(fmt.Errorf("reading k3s config %q: %w", configPath, err))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fault.Unavailable(fmt.Errorf("reading k3s config %q: %w", configPath, err))
	}
	dir := DropInDir(configPath)
	entries, err := root.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return files, nil
	}
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("reading k3s drop-in directory %q: %w", dir, err))
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() || !IsDropInName(e.Name()) {
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		p := path.Join(dir, name)
		st, err := root.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a dangling link: k3s would fail to read it; nothing to merge
		}
		if err == nil && st.IsDir() {
			continue
		}
		data, err := root.ReadFileLimit(p, MaxConfigSize)
		if errors.Is(err, hostfs.ErrNotRegular) || errors.Is(err, hostfs.ErrTooLarge) {
			return nil, fault.Malformed(fmt.Errorf("reading k3s drop-in %q: %w", p, err))
		}
		if err != nil {
			return nil, fault.Unavailable(fmt.Errorf("reading k3s drop-in %q: %w", p, err))
		}
		files = append(files, File{Path: p, Data: data})
	}
	return files, nil
}

// Entry is one value of an effective list with the file (or ArgsSource)
// that contributed it.
type Entry struct {
	Value  string `json:"value" yaml:"value"`   // the label or taint as written
	Source string `json:"source" yaml:"source"` // host path of the file, or ArgsSource
}

// Change is one write to a list key: a plain key (Append false) replaces the
// list so far, "key+" (Append true) appends to it.
type Change struct {
	Source string   `json:"source" yaml:"source"` // host path of the file, or ArgsSource
	Key    string   `json:"key" yaml:"key"`       // KeyNodeLabel or KeyNodeTaint, without "+"
	Append bool     `json:"append" yaml:"append"` // written as "key+"
	Values []string `json:"values" yaml:"values"` // the values written
}

// KeyRef names a key found in a file.
type KeyRef struct {
	Source string `json:"source" yaml:"source"` // host path of the file
	Key    string `json:"key" yaml:"key"`       // the top-level key, without "+"
}

// Effective is the merged k3s configuration as far as nodeprep cares: the
// effective node-label and node-taint lists with where each entry came from,
// every change made to them in order, and every key seen.
type Effective struct {
	// Files are the host paths of the files merged, in order.
	Files []string `json:"files" yaml:"files"`
	// NodeLabels and NodeTaints are the lists k3s passes to the kubelet
	// (--node-labels, --register-with-taints), in order.
	NodeLabels []Entry `json:"nodeLabels" yaml:"nodeLabels"`
	NodeTaints []Entry `json:"nodeTaints" yaml:"nodeTaints"` // see NodeLabels
	// KubeletArgs are the extra kubelet flags (kubelet-arg), in order, as
	// written ("register-with-taints=a:NoSchedule", "--v=2").
	KubeletArgs []Entry `json:"kubeletArgs,omitempty" yaml:"kubeletArgs,omitempty"`
	// DataDir and ContainerRuntimeEndpoint are the last data-dir and
	// container-runtime-endpoint set by a file or an argument (nil: not set).
	DataDir                  *Entry `json:"dataDir,omitempty" yaml:"dataDir,omitempty"`
	ContainerRuntimeEndpoint *Entry `json:"containerRuntimeEndpoint,omitempty" yaml:"containerRuntimeEndpoint,omitempty"` // see DataDir
	// Changes are the writes to node-label and node-taint, in the order
	// k3s applies them.
	Changes []Change `json:"changes,omitempty" yaml:"changes,omitempty"`
	// Keys are the top-level keys of every file, "+" removed, in order.
	Keys []KeyRef `json:"-" yaml:"-"`
}

// Merge applies the k3s merge rules to files (in the order given, as
// ReadFiles returns them) and then to the k3s command-line arguments args.
//
// The rules (k3s docs, "Configuration File" / "Multiple Config Files", and
// k3s pkg/configfilearg/parser.go readConfigFile):
//   - keys are applied in file order and, within a file, in document order;
//   - a plain key replaces the value so far, lists included;
//   - "key+" appends to the value so far (a scalar counts as a one-element
//     list; with no value so far it just sets it);
//   - so a plain key in a later file wipes what earlier "key+" appended.
//
// The same rules give kubelet-arg (a list) and the scalars data-dir (alias
// d) and container-runtime-endpoint, whose last value wins.
//
// Command-line arguments apply last (k3s inserts the files' values before
// the command line's, so a scalar flag on the command line wins). For
// repeatable flags such as --node-label the k3s docs say "the CLI arguments
// will overwrite all values in the list", so any --node-label
// (--node-taint, --kubelet-arg) in args replaces the whole list from the
// files. Recognised forms: "--node-label=v", "--node-label v" and the
// single-dash forms Go's flag package (under urfave/cli) also accepts, "-d"
// for --data-dir; other arguments are ignored.
// Each argument is first split at white space, so a whole command line in
// one string (NixOS services.k3s.extraFlags is often one) works too; no
// label or taint contains white space.
//
// A file that is not a YAML mapping, or a node-label/node-taint value that is
// neither a string, a list of strings nor null, gives an error naming the
// file, marked fault.ErrMalformed: k3s would refuse to start.
func Merge(files []File, args []string) (*Effective, error) {
	eff := &Effective{}
	for _, f := range files {
		eff.Files = append(eff.Files, f.Path)
		if err := eff.mergeFile(f); err != nil {
			return nil, err
		}
	}
	var words []string
	for _, a := range args {
		words = append(words, strings.Fields(a)...)
	}
	args = words
	argValues := map[string][]string{}
	var argOrder []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if long, ok := shortFlags[name]; ok && !strings.HasPrefix(a, "--") {
			name = long
		}
		if !strings.HasPrefix(a, "-") || !(listKeys[name] || scalarKeys[name]) {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fault.Malformed(fmt.Errorf("k3s argument %q: missing value", a))
			}
			i++
			value = args[i]
		}
		if scalarKeys[name] {
			eff.setScalar(name, Entry{Value: value, Source: ArgsSource})
			continue
		}
		if _, ok := argValues[name]; !ok {
			argOrder = append(argOrder, name)
		}
		argValues[name] = append(argValues[name], value)
	}
	for _, name := range argOrder {
		eff.apply(Change{Source: ArgsSource, Key: name, Values: argValues[name]})
	}
	return eff, nil
}

func (e *Effective) mergeFile(f File) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file
		}
		return fault.Malformed(fmt.Errorf("reading k3s config %q: %w", f.Path, err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("more than one YAML document")
		}
		return fault.Malformed(fmt.Errorf("reading k3s config %q: %w", f.Path, err))
	}
	if len(doc.Content) == 0 {
		return nil
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return nil
	}
	if m.Kind != yaml.MappingNode {
		return fault.Malformed(fmt.Errorf("reading k3s config %q: line %d: want a mapping of k3s options", f.Path, m.Line))
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fault.Malformed(fmt.Errorf("reading k3s config %q: line %d: a key must be a string", f.Path, k.Line))
		}
		name, appendKey := strings.CutSuffix(k.Value, "+")
		if long, ok := shortFlags[name]; ok {
			name = long
		}
		e.Keys = append(e.Keys, KeyRef{Source: f.Path, Key: name})
		if scalarKeys[name] {
			values, err := stringList(v)
			if err != nil || len(values) == 0 {
				continue // k3s turns it into a flag the CLI parser judges; not ours to guess
			}
			// "key+" on a scalar gives k3s one flag per value; the last wins.
			e.setScalar(name, Entry{Value: values[len(values)-1], Source: f.Path})
			continue
		}
		if !listKeys[name] {
			continue
		}
		values, err := stringList(v)
		if err != nil {
			return fault.Malformed(fmt.Errorf("reading k3s config %q: line %d: %s: %w", f.Path, v.Line, k.Value, err))
		}
		e.apply(Change{Source: f.Path, Key: name, Append: appendKey, Values: values})
	}
	return nil
}

// stringList converts a node-label/node-taint value as k3s does (toSlice):
// a list of scalars, a scalar (one element) or null (no elements).
func stringList(v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.AliasNode:
		return stringList(v.Alias)
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, nil
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		out := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			if item.Kind == yaml.AliasNode {
				item = item.Alias
			}
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return nil, fmt.Errorf("want a list of strings")
			}
			out = append(out, item.Value)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a string or a list of strings")
}

func (e *Effective) setScalar(key string, v Entry) {
	switch key {
	case KeyDataDir:
		e.DataDir = &v
	case KeyContainerRuntimeEndpoint:
		e.ContainerRuntimeEndpoint = &v
	}
}

func (e *Effective) apply(c Change) {
	list := &e.NodeLabels
	switch c.Key {
	case KeyNodeTaint:
		list = &e.NodeTaints
	case KeyKubeletArg:
		list = &e.KubeletArgs
	}
	if c.Key != KeyKubeletArg {
		e.Changes = append(e.Changes, c)
	}
	if !c.Append {
		*list = nil
	}
	for _, v := range c.Values {
		*list = append(*list, Entry{Value: v, Source: c.Source})
	}
}

// Values returns the values of entries, in order.
func Values(entries []Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Value
	}
	return out
}
