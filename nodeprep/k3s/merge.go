package k3s

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"syscall"
	"time"

	yaml2 "go.yaml.in/yaml/v2"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
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

// shortFlags are k3s's one-letter aliases of the keys nodeprep reads (k3s
// pkg/cli/cmds: "data-dir, d", "config, c"); a one-letter config file key
// becomes "-k=value" (k3s configfilearg readConfigFile).
var shortFlags = map[string]string{"d": KeyDataDir, "c": KeyConfig}

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

// ErrK3sWouldNotStart marks (with fault.ErrMalformed, exit 65) a k3s
// configuration k3s refuses: it exits at start, so nodeprep's drop-in
// would never reach the node.
var ErrK3sWouldNotStart = errors.New("k3s would not start")

// ErrK3sIgnoresConfig marks (with fault.ErrMalformed, exit 65) a k3s
// configuration k3s reads as "no config file at all": it starts with none
// of its files, nodeprep's drop-in included.
var ErrK3sIgnoresConfig = errors.New("k3s would ignore every config file")

func wouldNotStart(err error) error {
	return fault.Malformed(fmt.Errorf("%w: %w", ErrK3sWouldNotStart, err))
}

// ReadFiles reads the k3s config files as k3s does (k3s pkg/configfilearg
// dotDFiles and readConfigFile):
//
//   - the drop-ins are the entries of DropInDir(configPath) whose names
//     IsDropInName accepts, in byte order (os.ReadDir sorts by name),
//     except directories, which k3s skips — but only real ones: a symlink
//     to a directory is listed as a link, read, and fails;
//   - configPath comes first when it exists (a dangling link does not);
//     with neither it nor a drop-in, there are no files and no error.
//
// Errors, naming the file:
//   - ErrK3sIgnoresConfig (fault.ErrMalformed): a listed drop-in that
//     cannot be read because it does not exist — a dangling symlink, or a
//     file removed since: k3s's agent (configfilearg Parse) takes that
//     read error for "no config" and runs with none of the files, and
//     the k3s binary's wrapper (cmd/k3s findDataDir, FindString) stops
//     on it — either way nodeprep's drop-in does not count;
//   - ErrK3sWouldNotStart (fault.ErrMalformed): the drop-in directory is
//     not a directory, or a file is a directory (through a link), a FIFO,
//     a device or a socket (k3s fails to read it, or blocks on a FIFO), or
//     a file is over bounded.MaxK3sConfig (which nodeprep does not read);
//   - fault.ErrUnavailable: another read error, such as permission denied.
func ReadFiles(root *hostfs.Root, configPath string) ([]File, error) {
	dir := DropInDir(configPath)
	entries, err := root.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, readError("k3s drop-in directory", dir, err)
	}
	var paths []string
	for _, e := range entries { // sorted by name, as k3s lists them
		if e.IsDir() || !IsDropInName(e.Name()) {
			continue
		}
		paths = append(paths, path.Join(dir, e.Name()))
	}
	if _, err := root.Stat(configPath); err == nil {
		paths = append([]string{configPath}, paths...)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, readError("k3s config", configPath, err)
	}
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		data, err := root.ReadFile(p, bounded.MaxK3sConfig)
		if errors.Is(err, fs.ErrNotExist) {
			what := "does not exist (a dangling symlink?)"
			if st, lerr := root.Lstat(p); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
				what = "is a symlink to nothing"
			}
			return nil, fault.Malformed(fmt.Errorf("%w: k3s drop-in %q %s: k3s lists it and cannot read it; its agent takes that read error for \"no config file\" and would run with none of %s and its drop-ins, nodeprep's included (and the k3s binary's start-up, which looks for data-dir in the same files, stops on it); remove the link or restore its target", ErrK3sIgnoresConfig, p, what, configPath))
		}
		if err != nil {
			return nil, readError("k3s config", p, err)
		}
		files = append(files, File{Path: p, Data: data})
	}
	return files, nil
}

// readError classifies a read error: what k3s fails on as well is
// ErrK3sWouldNotStart, anything else (permission denied) unavailable.
func readError(what, p string, err error) error {
	switch {
	case errors.Is(err, bounded.ErrNotRegular), errors.Is(err, syscall.EISDIR):
		return wouldNotStart(fmt.Errorf("reading %s %q: %w: k3s reads every *.yaml and *.yml entry and fails on one it cannot read", what, p, err))
	case errors.Is(err, bounded.ErrTooLarge):
		return wouldNotStart(fmt.Errorf("reading %s %q: %w", what, p, err))
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP):
		return wouldNotStart(fmt.Errorf("reading %s %q: %w: k3s fails on it at start", what, p, err))
	}
	return fault.Unavailable(fmt.Errorf("reading %s %q: %w", what, p, err))
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
	// Role is the k3s subcommand the flags are parsed for: RoleAgent, or
	// RoleServer when the k3s arguments start with "server".
	Role string `json:"role" yaml:"role"`
	// IgnoredArgs are the k3s arguments from the first positional one on,
	// which k3s never parses as flags.
	IgnoredArgs []string `json:"ignoredArgs,omitempty" yaml:"ignoredArgs,omitempty"`
	// Warnings are what k3s would log and get past (a `k3s server` key it
	// skips, ignored arguments).
	Warnings []string `json:"-" yaml:"-"`
}

// Merge replays how k3s turns its config files and command line into the
// flags `k3s agent` (or `k3s server`) runs with, and returns the
// effective node-label, node-taint and kubelet-arg lists and the
// data-dir and container-runtime-endpoint.
//
// The files (k3s pkg/configfilearg readConfigFile), in the order given
// (ReadFiles' order):
//   - a file whose first document expands, aliases expanded, past
//     yamlbound.MaxK3sConfig is refused before it is decoded, and so is
//     the file whose aliases take the files read so far past it together
//     (a yamlbound.Budget);
//   - each is read as k3s reads it: YAML 1.1 with gopkg.in/yaml.v2
//     (go.yaml.in/yaml/v2 here, the same code) into an ordered map; only
//     the first document counts, a key may repeat (the later wins), and a
//     file yaml.v2 refuses stops k3s (ErrK3sWouldNotStart);
//   - keys and values are turned into strings as k3s does
//     (wrangler convert.ToString): YAML 1.1 scalars as Go prints them
//     (1e3 → 1000, 0x1F → 31, 010 → 8, yes/on → true, ~ → ""), trimmed of
//     white space; a list item that is itself a list gives its first item;
//   - a plain key replaces the value so far, "key+" appends to it (a
//     scalar counts as a one-item list, null as none); keys keep the order
//     in which they first appeared;
//   - each key becomes flags: one "--key=value" for each list item, or one
//     for a scalar, so a null value is one empty value ("node-taint:" is
//     --node-taint=); a one-letter key becomes "-k=value".
//
// These flags go right after the subcommand, before the command line
// (args; each string is split at white space, so a whole command line in
// one string works too). A first word "agent" or "server" names the
// subcommand (default: agent). For `k3s server`, file keys the server
// does not define are dropped with a warning (k3s stripInvalidFlags);
// `k3s agent` has no such step. Then parseArgs replays urfave/cli's
// parsing: command-line values of node-label, node-taint and kubelet-arg
// append to the files' (k3s's docs say the command line overwrites the
// files; its code appends, and the code is what reaches the kubelet).
//
// Errors name the file and key, or ArgsSource, and are marked
// fault.ErrMalformed and ErrK3sWouldNotStart: YAML k3s cannot parse, a
// file that is not a mapping, a key `k3s agent` does not define, one flag
// under two names, a flag without its value. A misspelt node-label or
// node-taint key for `k3s server` (which would drop it) is malformed too.
func Merge(files []File, args []string) (*Effective, error) {
	eff := &Effective{Role: RoleAgent}
	var cli []argWord
	for _, a := range args {
		for _, w := range strings.Fields(a) {
			cli = append(cli, argWord{text: w, source: ArgsSource})
		}
	}
	if len(cli) > 0 && (cli[0].text == RoleAgent || cli[0].text == RoleServer) {
		eff.Role = cli[0].text
		cli = cli[1:]
	}
	fileWords, err := eff.readFiles(files)
	if err != nil {
		return nil, err
	}
	if eff.Role == RoleServer {
		kept := fileWords[:0]
		for _, w := range fileWords {
			name, _, _ := strings.Cut(strings.TrimLeft(w.text, "-"), "=")
			if _, ok := serverFlags()[name]; ok {
				kept = append(kept, w)
				continue
			}
			if meant, ok := misspelt(name); ok {
				return nil, fault.Malformed(fmt.Errorf("k3s config %q: key %q is not a k3s option (did you mean %q?): `k3s server` skips it, so its entries would never reach the node", w.source, w.key, meant))
			}
			eff.Warnings = append(eff.Warnings, fmt.Sprintf("k3s config %q: key %q is not a `k3s server` option nodeprep knows; k3s server logs \"Unknown flag\" and skips it", w.source, w.key))
		}
		fileWords = kept
	}
	p, err := parseArgs(eff.Role, append(fileWords, cli...))
	if err != nil {
		return nil, wouldNotStart(err)
	}
	eff.Warnings = append(eff.Warnings, p.warnings...)
	eff.NodeLabels = p.lists[KeyNodeLabel]
	eff.NodeTaints = p.lists[KeyNodeTaint]
	eff.KubeletArgs = p.lists[KeyKubeletArg]
	if v, ok := p.strings[KeyDataDir]; ok {
		eff.DataDir = &v
	}
	if v, ok := p.strings[KeyContainerRuntimeEndpoint]; ok {
		eff.ContainerRuntimeEndpoint = &v
	}
	for _, name := range []string{KeyNodeLabel, KeyNodeTaint} {
		var values []string
		for _, w := range cli {
			if v, ok := cliValue(w.text, name); ok {
				values = append(values, v)
			}
		}
		if len(values) > 0 {
			eff.Changes = append(eff.Changes, Change{Source: ArgsSource, Key: name, Append: true, Values: values})
		}
	}
	if len(p.ignored) > 0 {
		eff.IgnoredArgs = p.ignored
		eff.Warnings = append(eff.Warnings, fmt.Sprintf("k3s arguments from %q on are positional: k3s (urfave/cli v2) parses no flag after the first word that is not one, so %d words are ignored", firstWord(p.ignored), len(p.ignored)))
	}
	return eff, nil
}

func firstWord(ws []string) string {
	if len(ws) == 0 {
		return ""
	}
	return ws[0]
}

// cliValue returns the value of "--name=v" (or "-name=v") for reporting
// command-line changes; the space form is reported by parseArgs alone.
func cliValue(w, name string) (string, bool) {
	n, v, ok := strings.Cut(strings.TrimLeft(w, "-"), "=")
	return v, ok && n == name && strings.HasPrefix(w, "-")
}

// yamlValue is one config key's value as k3s keeps it while it merges
// the files: the value as yaml.v2 decoded it (list false), or a list of
// items (list true: a YAML sequence, or the result of "key+"), each with
// the file it came from.
type yamlValue struct {
	list  bool
	items []yamlItem
}

type yamlItem struct {
	raw    any
	source string
}

// toSlice is k3s's toSlice: a string is a one-item list (kept as is), a
// list stays, anything else is its string form, or nothing when empty.
func (v yamlValue) toSlice() []yamlItem {
	if v.list {
		return v.items
	}
	it := v.items[0]
	if _, ok := it.raw.(string); ok {
		return []yamlItem{it}
	}
	if s := toString(it.raw); s != "" {
		return []yamlItem{{raw: s, source: it.source}}
	}
	return nil
}

// toString is wrangler's convert.ToString, which k3s uses for every key
// and value: a list gives its first item (an empty list nothing), a
// time its RFC 3339 form, anything else what fmt.Sprint prints, trimmed
// of white space.
func toString(v any) string {
	switch x := v.(type) {
	case []any:
		if len(x) == 0 {
			return ""
		}
		v = x[0]
	case []string:
		if len(x) == 0 {
			return ""
		}
		v = x[0]
	}
	if t, ok := v.(time.Time); ok {
		return t.Format(time.RFC3339)
	}
	if v == nil {
		return ""
	}
	return strings.TrimSpace(fmt.Sprint(v))
}

// readFiles merges the files as k3s readConfigFile does and returns the
// flags it builds, in key order.
func (e *Effective) readFiles(files []File) ([]argWord, error) {
	values := map[string]*yamlValue{}
	var order []string
	lastKey := map[string]string{} // key → the key as last written, "+" included
	// What every file's aliases expand it to, together, is what one file
	// may expand to: each is bounded on its own too, but 50 drop-ins of
	// 12 KB, each 7.6 MB expanded, took 1 GiB.
	budget := yamlbound.NewBudget(yamlbound.MaxK3sConfig)
	for _, f := range files {
		e.Files = append(e.Files, f.Path)
		// Before yaml.v2, which would expand every alias (a 212 KB file
		// of one 200 KB string aliased 4,000 times took 1 GiB); only the
		// first document, the one yaml.v2 and k3s read.
		if err := budget.CheckFirst(f.Data, yamlbound.MaxK3sConfig); err != nil {
			return nil, fault.Malformed(fmt.Errorf("k3s config %q: %w", f.Path, err))
		}
		var doc yaml2.MapSlice
		if err := yaml2.Unmarshal(f.Data, &doc); err != nil {
			return nil, wouldNotStart(fmt.Errorf("k3s config %q: %s: k3s reads it with a YAML 1.1 parser (gopkg.in/yaml.v2) into a mapping of options and stops on this", f.Path, redactYAMLError(err)))
		}
		for _, item := range doc {
			k := toString(item.Key)
			name, isAppend := strings.CutSuffix(k, "+")
			if _, ok := values[name]; !ok {
				order = append(order, name)
			}
			lastKey[name] = k
			canon := name
			if long, ok := shortFlags[name]; ok {
				canon = long
			}
			e.Keys = append(e.Keys, KeyRef{Source: f.Path, Key: canon})
			v := yamlValue{}
			if l, ok := item.Value.([]any); ok {
				v.list = true
				for _, x := range l {
					v.items = append(v.items, yamlItem{raw: x, source: f.Path})
				}
			} else {
				v.items = []yamlItem{{raw: item.Value, source: f.Path}}
			}
			if canon == KeyNodeLabel || canon == KeyNodeTaint {
				c := Change{Source: f.Path, Key: canon, Append: isAppend}
				for _, it := range v.toSliceForChange() {
					c.Values = append(c.Values, toString(it.raw))
				}
				e.Changes = append(e.Changes, c)
			}
			if old, ok := values[name]; ok && isAppend {
				// Appended in place: the list so far is this map's alone
				// (no other value shares its items), and a copy per
				// "key+" made n drop-ins cost n² (100,000 of them took
				// minutes).
				v = yamlValue{list: true, items: append(old.toSlice(), v.toSlice()...)}
			}
			values[name] = &v
		}
	}
	var words []argWord
	for _, name := range order {
		v := values[name]
		prefix := "--"
		if len(name) == 1 {
			prefix = "-"
		}
		w := argWord{key: lastKey[name]}
		if v.list {
			for _, it := range v.items {
				w.text, w.source = prefix+name+"="+toString(it.raw), it.source
				words = append(words, w)
			}
			continue
		}
		w.text, w.source = prefix+name+"="+toString(v.items[0].raw), v.items[0].source
		words = append(words, w)
	}
	return words, nil
}

// toSliceForChange lists what a key wrote, for Effective.Changes: a list's
// items, a scalar as one value (null as none).
func (v yamlValue) toSliceForChange() []yamlItem {
	if v.list {
		return v.items
	}
	if v.items[0].raw == nil {
		return nil
	}
	return v.items
}

// redactYAMLError drops the quoted document text yaml.v2 puts in its
// errors ("cannot unmarshal !!str `K10…` into …"): a token pasted into a
// config file must not reach a log.
func redactYAMLError(err error) string {
	return yamlQuoted.ReplaceAllString(err.Error(), "`…`")
}

var yamlQuoted = regexp.MustCompile("`[^`]*`")

// Values returns the values of entries, in order.
func Values(entries []Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Value
	}
	return out
}
