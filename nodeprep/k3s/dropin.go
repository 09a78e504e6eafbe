package k3s

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultDropIn is the file nodeprep writes in the drop-in directory. "50-"
// leaves room for files that must sort before (defaults) or after (site
// overrides) it.
const DefaultDropIn = "50-nodeprep.yaml"

// DefaultDataDir is k3s's state directory (k3s --data-dir).
const DefaultDataDir = "/var/lib/rancher/k3s"

// DropInMode is the mode of the drop-in: k3s config files can hold the join
// token, so drop-ins are kept private to root like config.yaml should be.
const DropInMode fs.FileMode = 0o600

// dropInHeader opens every drop-in nodeprep writes.
const dropInHeader = `# Written by nodeprep (nodeprep join). Do not edit: nodeprep rewrites it.
# k3s appends these lists ("key+") to node-label and node-taint from config.yaml
# and the drop-ins before this one. Taints apply only when the node registers.
`

// Options are the inputs of Plan. The zero value of a field means its
// default.
type Options struct {
	// ConfigPath is the host path of k3s's config.yaml when nothing in
	// Env or K3sArgs names one (default DefaultConfigPath); see Locate.
	// Drop-ins are read from and written to DropInDir of the located file.
	ConfigPath string
	// Env is the k3s service's environment (process variables and its
	// EnvironmentFile, see LoadEnvironment); EnvConfigFile and EnvDataDir
	// move k3s's paths. Passed in as data: this package reads no
	// environment.
	Env map[string]string
	// DropIn is the file name nodeprep writes in the drop-in directory
	// (default DefaultDropIn). It must be a plain name ending in .yaml or
	// .yml, or k3s would not read it.
	DropIn string
	// Labels and Taints are what the drop-in adds (node-label+, node-taint+).
	// They are written sorted; a label key or a taint key and effect given
	// twice with different values is an error.
	Labels []Label
	Taints []Taint // see Labels
	// K3sArgs are the k3s agent's command-line arguments; they apply after
	// every file (see Merge).
	K3sArgs []string
	// AllowOverride turns a later drop-in or argument that replaces
	// nodeprep's entries from an error into a warning.
	AllowOverride bool
	// Reserved, when set, names what nodeprep derives a label key from
	// ("the self-test"), or returns "" for a key it does not derive
	// (nodepolicy.DerivedLabelSource): a node-label entry of k3s's own files
	// or arguments with such a key is a conflict, as an override is, since
	// it would register the node with nodeprep's verdict without nodeprep's
	// check (nodeprep.dev/gpu-ready=true by hand, say).
	Reserved func(key string) string
	// RequireUnregistered turns "the node has already registered" from a
	// warning into an error.
	RequireUnregistered bool
	// DataDir is k3s's state directory when no k3s file, argument or Env
	// sets one (default DefaultDataDir); agent state under <data-dir>/agent
	// means the node has registered.
	DataDir string
	// Unit is what is known of the k3s service beyond its files and
	// arguments (its PATH, its version); it is carried into Result and
	// View for the containerd check.
	Unit Unit
}

// Unit is what is known of the k3s service beyond its configuration:
// where k3s finds the NVIDIA runtimes it registers as containerd runtime
// handlers before it has rendered its containerd config.
type Unit struct {
	// Path are the directories of the k3s service's PATH, in order (the
	// NixOS module passes them: join.k3sUnitPath); nil when unknown.
	Path []string
	// Version is k3s's version ("v1.33.4+k3s1"), "" when unknown.
	Version string
	// ContainerdVersion is the version of the containerd that k3s ships
	// ("2.0.5"), "" when unknown (then it is read from its binary).
	ContainerdVersion string
}

// Result is what Plan found and what Apply did.
type Result struct {
	// ConfigPath is the k3s config file the drop-in belongs to, and
	// ConfigSource what chose it (Location.Source).
	ConfigPath   string `json:"configPath" yaml:"configPath"`
	ConfigSource string `json:"configSource" yaml:"configSource"` // see ConfigPath
	// DataDir is k3s's effective data-dir and DataDirSource what set it (a
	// file's path, ArgsSource, EnvDataDir, SourceOption or SourceDefault).
	DataDir       string `json:"dataDir" yaml:"dataDir"`
	DataDirSource string `json:"dataDirSource" yaml:"dataDirSource"` // see DataDir
	// DropInPath is the host path of nodeprep's drop-in.
	DropInPath string `json:"dropInPath" yaml:"dropInPath"`
	// Content is the drop-in's bytes.
	Content string `json:"content" yaml:"content"`
	// Labels and Taints are what the drop-in adds, sorted.
	Labels []Label `json:"labels" yaml:"labels"`
	Taints []Taint `json:"taints" yaml:"taints"` // see Labels
	// Effective is the merged configuration with the new drop-in in place
	// and the k3s arguments applied.
	Effective *Effective `json:"effective" yaml:"effective"`
	// Registered is true when k3s agent state shows the node has already
	// registered; RegistrationEvidence names the file that shows it.
	Registered           bool   `json:"registered" yaml:"registered"`
	RegistrationEvidence string `json:"registrationEvidence,omitempty" yaml:"registrationEvidence,omitempty"` // the agent state file that shows the node registered, or empty
	// Warnings are findings that do not stop the write.
	Warnings []string `json:"warnings" yaml:"warnings"`
	// Unit is Options.Unit, for the containerd check.
	Unit Unit `json:"-" yaml:"-"`
	// Changed is true when the drop-in on disk differs from Content (or is
	// missing); Apply writes only then.
	Changed bool `json:"changed" yaml:"changed"`
	// Written is set by Apply when it wrote the file.
	Written bool `json:"written" yaml:"written"`
}

// Render returns the drop-in's bytes for labels and taints: a header comment,
// then "node-label+:" and "node-taint+:" lists, each sorted, a key left out
// when its list is empty. The output depends only on the sets given.
func Render(labels []Label, taints []Taint) []byte {
	ls := slices.Clone(labels)
	sort.Slice(ls, func(i, j int) bool { return ls[i].String() < ls[j].String() })
	ts := slices.Clone(taints)
	sort.Slice(ts, func(i, j int) bool { return ts[i].String() < ts[j].String() })
	doc := struct {
		Labels []string `yaml:"node-label+,omitempty"`
		Taints []string `yaml:"node-taint+,omitempty"`
	}{}
	for _, l := range ls {
		doc.Labels = append(doc.Labels, l.String())
	}
	for _, t := range ts {
		doc.Taints = append(doc.Taints, t.String())
	}
	var buf bytes.Buffer
	buf.WriteString(dropInHeader)
	if len(doc.Labels) == 0 && len(doc.Taints) == 0 {
		return buf.Bytes()
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	// Encoding a struct of string lists cannot fail.
	_ = enc.Encode(doc)
	_ = enc.Close()
	return buf.Bytes()
}

// Plan validates opts, locates k3s's config file as k3s does (Locate:
// K3S_CONFIG_FILE in opts.Env, --config in opts.K3sArgs, opts.ConfigPath),
// reads it and its drop-ins under root, merges them with the new drop-in in
// place and the k3s arguments, resolves the effective data-dir (where the
// registration check looks), and reports what the drop-in would be and
// what k3s would end up with. It writes nothing.
//
// Errors, each naming the file or value:
//   - fault.ErrMalformed: an invalid label or taint (ours, or one in the
//     effective lists that k3s would pass to the kubelet), a duplicate label
//     key or taint key:effect among ours, malformed YAML in a k3s file, a
//     misspelt node-label/node-taint key ("node-labels", "node_taint"...),
//     whose entries k3s would silently drop, or a bad drop-in name;
//   - fault.ErrMalformed also: a config file or data-dir path that is not
//     absolute;
//   - fault.ErrCheckFailed: a later drop-in or a k3s argument replaces or
//     overrides nodeprep's entries, or a kubelet-arg sets the kubelet's
//     register-with-taints (or a plain node-labels) and so drops k3s's own
//     (kubeletArgConflicts) — unless AllowOverride; or the node has
//     registered and RequireUnregistered is set;
//   - fault.ErrUnavailable: a k3s file cannot be read.
//
// Other keys unknown to k3s are warnings (k3s logs "Unknown flag … skipping"
// and ignores them), as are registration without RequireUnregistered and
// entries of other files that nodeprep's override.
func Plan(root *hostfs.Root, opts Options) (*Result, error) {
	opts = opts.withDefaults()
	if err := CheckDropInName(opts.DropIn); err != nil {
		return nil, fault.Malformed(err)
	}
	labels, taints, err := normalise(opts.Labels, opts.Taints)
	if err != nil {
		return nil, err
	}
	loc := opts.Locate()
	if err := checkAbs("config file", loc.ConfigPath, loc.Source); err != nil {
		return nil, err
	}
	r := &Result{
		Warnings:     []string{},
		ConfigPath:   loc.ConfigPath,
		ConfigSource: loc.Source,
		DropInPath:   opts.DropInPath(),
		Labels:       labels,
		Taints:       taints,
	}
	if opts.ConfigPath != "" && opts.ConfigPath != DefaultConfigPath && loc.Source != SourceOption && opts.ConfigPath != loc.ConfigPath {
		r.Warnings = append(r.Warnings, fmt.Sprintf("nodeprep's k3s config setting is %s, but k3s reads %s (from %s): nodeprep reads and writes where k3s reads", opts.ConfigPath, loc.ConfigPath, loc.Source))
	}
	content := Render(labels, taints)
	r.Content = string(content)

	files, err := ReadFiles(root, loc.ConfigPath)
	if err != nil {
		return nil, err
	}
	var old []byte
	files, old = placeDropIn(files, File{Path: r.DropInPath, Data: content})
	if st, err := root.Lstat(r.DropInPath); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		r.Changed = true // the write will refuse the link; say so here too
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s is a symlink: nodeprep refuses to write through it", r.DropInPath))
	} else {
		r.Changed = old == nil || !bytes.Equal(old, content) || (err == nil && st.Mode().Perm() != DropInMode)
	}

	r.Warnings = append(r.Warnings, droppedOwnLabels(old, labels, r.DropInPath)...)
	for _, f := range files {
		if f.Path != r.DropInPath && bytes.HasPrefix(f.Data, []byte(dropInHeaderFirstLine)) {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s was also written by nodeprep (under another drop-in name?): k3s merges both; remove the one no longer used", f.Path))
		}
	}

	eff, err := Merge(files, opts.K3sArgs)
	if err != nil {
		return nil, err
	}
	r.Effective = eff
	r.Warnings = append(r.Warnings, eff.Warnings...)
	if err := checkEntries(eff); err != nil {
		return nil, err
	}
	conflicts := conflicts(eff, r.DropInPath, labels, taints, &r.Warnings)
	conflicts = append(conflicts, kubeletArgConflicts(eff, labels, taints, &r.Warnings)...)
	conflicts = append(conflicts, reservedConflicts(eff, r.DropInPath, opts.Reserved)...)

	r.DataDir, r.DataDirSource = opts.dataDir(eff)
	r.Unit = opts.Unit
	if err := checkAbs("data-dir", r.DataDir, r.DataDirSource); err != nil {
		return nil, err
	}
	r.RegistrationEvidence = registrationEvidence(root, r.DataDir)
	r.Registered = r.RegistrationEvidence != ""
	var errs []error
	if len(conflicts) > 0 {
		if opts.AllowOverride {
			for _, c := range conflicts {
				r.Warnings = append(r.Warnings, c.Error()+" (allowed by --allow-override)")
			}
		} else {
			errs = append(errs, conflicts...)
		}
	}
	if r.Registered {
		msg := fmt.Sprintf("the node has already registered (%s exists): k3s passes node-taint to the kubelet as --register-with-taints, which acts only when the Node object is created, so new taints will not reach it. Apply them with 'kubectl taint nodes <node> <taint>', or re-register: stop k3s, 'kubectl delete node <node>', remove %s, start k3s", r.RegistrationEvidence, path.Join(r.DataDir, "agent"))
		if opts.RequireUnregistered {
			errs = append(errs, errors.New(msg))
		} else {
			r.Warnings = append(r.Warnings, msg)
		}
	}
	if len(errs) > 0 {
		return r, fault.CheckFailed(errors.Join(errs...))
	}
	return r, nil
}

// Apply writes r's drop-in when r.Changed: atomically, mode 0600 (forced on
// an existing file), creating the drop-in directory, refusing to write
// through a symlink (hostfs.Root.WriteFile). Errors are marked
// fault.ErrCantWrite.
func Apply(root *hostfs.Root, r *Result) error {
	if !r.Changed {
		return nil
	}
	if err := root.WriteFile(r.DropInPath, []byte(r.Content), hostfs.WriteOptions{Mode: DropInMode, ForceMode: true, MkdirAll: true}); err != nil {
		return fmt.Errorf("writing k3s drop-in: %w", err)
	}
	r.Written = true
	return nil
}

// DropInPath is the host path of nodeprep's drop-in for these options:
// <config file>.d/<DropIn>, the config file as Locate finds it (where k3s
// reads), with the defaults for empty fields.
func (o Options) DropInPath() string {
	o = o.withDefaults()
	return path.Join(DropInDir(o.Locate().ConfigPath), o.DropIn)
}

func (o Options) withDefaults() Options {
	if o.DropIn == "" {
		o.DropIn = DefaultDropIn
	}
	return o
}

// CheckUnique returns an error, marked fault.ErrMalformed, naming each
// invalid label or taint, each label key given twice with different values
// and each taint key and effect given twice with different values (a
// node's taints are unique by key and effect: k8s.io/api core/v1 Taint),
// and each whose key names a secret (IsSecretKey; its value redacted).
// Plan applies the same rules; commands call this to refuse their flags
// before anything is read or written.
func CheckUnique(labels []Label, taints []Taint) error {
	_, _, err := normalise(labels, taints)
	return err
}

// normalise validates, de-duplicates and sorts nodeprep's labels and taints.
func normalise(labels []Label, taints []Taint) ([]Label, []Taint, error) {
	var errs []error
	byKey := map[string]Label{}
	for _, l := range labels {
		if err := l.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if IsSecretKey(l.Key) {
			errs = append(errs, fmt.Errorf("label %q: its key names a secret (TOKEN, PASSWORD or SECRET): nodeprep does not publish it on the Node, where every pod may read it", RedactEntry(l.String())))
			continue
		}
		if prev, ok := byKey[l.Key]; ok && prev.Value != l.Value {
			errs = append(errs, fmt.Errorf("label key %q given twice: %q and %q", l.Key, RedactEntry(prev.String()), RedactEntry(l.String())))
			continue
		}
		byKey[l.Key] = l
	}
	type ke struct {
		key    string
		effect TaintEffect
	}
	byKE := map[ke]Taint{}
	for _, t := range taints {
		if err := t.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if IsSecretKey(t.Key) {
			errs = append(errs, fmt.Errorf("taint %q: its key names a secret (TOKEN, PASSWORD or SECRET): nodeprep does not publish it on the Node, where every pod may read it", RedactEntry(t.String())))
			continue
		}
		if prev, ok := byKE[ke{t.Key, t.Effect}]; ok && prev.Value != t.Value {
			errs = append(errs, fmt.Errorf("taint %q and %q: a node's taints must be unique by key and effect", RedactEntry(prev.String()), RedactEntry(t.String())))
			continue
		}
		byKE[ke{t.Key, t.Effect}] = t
	}
	if len(errs) > 0 {
		return nil, nil, fault.Malformed(errors.Join(errs...))
	}
	ls := make([]Label, 0, len(byKey))
	for _, l := range byKey {
		ls = append(ls, l)
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].String() < ls[j].String() })
	ts := make([]Taint, 0, len(byKE))
	for _, t := range byKE {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].String() < ts[j].String() })
	return ls, ts, nil
}

// placeDropIn puts ours into files where k3s would read it (replacing the
// copy on disk, whose bytes it returns, or inserted in byte order among the
// drop-ins).
// dropInHeaderFirstLine starts every drop-in nodeprep writes.
var dropInHeaderFirstLine = strings.SplitN(dropInHeader, "\n", 2)[0]

// droppedOwnLabels warns when the drop-in being replaced carries nodeprep's
// own labels (nodeprep.dev/, set by `nodeprep up` from the self-test) that
// the new one lacks: `join` alone does not know the self-test's result, and
// pods selecting on nodeprep.dev/selftest=passed would stop matching.
func droppedOwnLabels(old []byte, labels []Label, dropInPath string) []string {
	if old == nil {
		return nil
	}
	prev, err := Merge([]File{{Path: dropInPath, Data: old}}, nil)
	if err != nil {
		return nil
	}
	keep := map[string]bool{}
	for _, l := range labels {
		keep[l.Key] = true
	}
	var lost []string
	for _, e := range prev.NodeLabels {
		key, _, _ := strings.Cut(e.Value, "=")
		if strings.HasPrefix(key, "nodeprep.dev/") && !keep[key] {
			lost = append(lost, e.Value)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s loses %s, set by `nodeprep up`: run `nodeprep up` to set them again", dropInPath, strings.Join(lost, ", "))}
}

func placeDropIn(files []File, ours File) ([]File, []byte) {
	out := make([]File, 0, len(files)+1)
	var old []byte
	placed := false
	dir := path.Dir(ours.Path)
	for _, f := range files {
		switch {
		case f.Path == ours.Path:
			old = f.Data
			out = append(out, ours)
			placed = true
			continue
		case !placed && path.Dir(f.Path) == dir && path.Base(f.Path) > path.Base(ours.Path):
			out = append(out, ours)
			placed = true
		}
		out = append(out, f)
	}
	if !placed {
		out = append(out, ours)
	}
	return out, old
}

// misspelt reports whether key looks like node-label or node-taint written
// wrongly ("node-labels", "node_taint", "nodelabel", "node-lable"): after
// dropping '-', '_', '.' and a trailing 's', within two edits of the real
// name. It returns the key meant.
func misspelt(key string) (string, bool) {
	if key == KeyNodeLabel || key == KeyNodeTaint {
		return "", false
	}
	norm := strings.ToLower(strings.NewReplacer("_", "", "-", "", ".", "").Replace(key))
	norm = strings.TrimSuffix(norm, "s")
	for _, real := range []string{KeyNodeLabel, KeyNodeTaint} {
		if levenshtein.ComputeDistance(norm, strings.ReplaceAll(real, "-", "")) <= 2 {
			return real, true
		}
	}
	return "", false
}

// checkEntries judges the effective lists as the kubelet will, measured
// on the real kubelet (TestRealKubeletRegistersAsJoinReports). k3s
// passes node-label as the kubelet's --node-labels and node-taint as
// --register-with-taints, each list joined with commas (k3s
// pkg/daemons/agent/agent_linux.go), then lays kubelet-arg over them
// (pkg/daemons/config GetArgs): a first kubelet-arg "node-labels=…" or
// "register-with-taints=…" drops k3s's list, which then never reaches the
// kubelet and is not judged here (conflicts says nodeprep's entries are
// lost). The kubelet reads --node-labels with component-base's
// ConfigurationMap: empty items are skipped, an item with no '=' is a
// label with an empty value, and ValidateKubeletFlags refuses, at start,
// a key or value that is not valid and a key in the kubernetes.io
// namespaces it may not set. It parses --register-with-taints with
// pkg/util/taints ParseTaints and refuses, at start, an invalid taint, an
// empty one beside others and two with one key and effect; a lone empty
// taint is no taint. Values are judged after k3s's conversion (Merge:
// trimmed, YAML 1.1 scalars spelled out). A label with no '=' is refused
// too, but as a mistake (the kubelet would register the whole item as a
// key with an empty value), not as a node that would not register.
func checkEntries(eff *Effective) error {
	var errs, mistakes []error
	labels, taints := eff.NodeLabels, eff.NodeTaints
	if kubeletArgDrops(eff, "node-labels") {
		labels = nil
	}
	if kubeletArgDrops(eff, "register-with-taints") {
		taints = nil
	}
	for _, e := range labels {
		if e.Value == "" {
			continue
		}
		if !strings.Contains(e.Value, "=") {
			if _, err := ParseLabel(e.Value + "="); err == nil {
				mistakes = append(mistakes, fmt.Errorf("node-label from %s: a label with no '=' (%d characters, not shown: it may be a secret): the kubelet would register the whole item as a label key with an empty value; want key=value", e.Source, len(e.Value)))
				continue
			}
		}
		if _, err := ParseLabel(e.Value); err != nil {
			errs = append(errs, fmt.Errorf("node-label from %s: %w (the kubelet refuses to start)", e.Source, err))
		}
	}
	type ke struct {
		key    string
		effect TaintEffect
	}
	first := map[ke]Entry{}
	var empty []Entry
	for _, e := range taints {
		if e.Value == "" {
			empty = append(empty, e)
			continue
		}
		t, err := ParseTaint(e.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("node-taint from %s: %w (the kubelet refuses to start)", e.Source, err))
			continue
		}
		k := ke{t.Key, t.Effect}
		if prev, ok := first[k]; ok {
			errs = append(errs, fmt.Errorf("node-taint %s (from %s) and %s (from %s) have the same key and effect: the kubelet refuses to start on taints that repeat a key and effect, so the node would not register; keep one (nodeprep adds its own taints: drop the copy from the other file, or pass --no-default-taint)", RedactEntry(prev.Value), prev.Source, RedactEntry(e.Value), e.Source))
			continue
		}
		first[k] = e
	}
	if len(empty) > 0 && len(empty) < len(taints) {
		errs = append(errs, fmt.Errorf("node-taint from %s is empty (a key with no value gives k3s one empty --node-taint=) beside other taints: k3s joins them into one --register-with-taints and the kubelet refuses the empty part; remove the empty key or give it the list", empty[0].Source))
	}
	if len(errs) > 0 {
		return fault.Malformed(fmt.Errorf("%w: %w", ErrNodeRefused, errors.Join(append(errs, mistakes...)...)))
	}
	if len(mistakes) > 0 {
		return fault.Malformed(errors.Join(mistakes...))
	}
	return nil
}

// kubeletArgDrops reports whether k3s drops its own value of the kubelet
// flag name (node-labels, register-with-taints) for the kubelet-arg list:
// k3s GetArgs keeps it only when the first kubelet-arg of that name is
// "name+=…" or "name-=…".
func kubeletArgDrops(eff *Effective, name string) bool {
	for _, a := range eff.KubeletArgs {
		n, _, _ := strings.Cut(strings.TrimPrefix(a.Value, "--"), "=")
		if strings.TrimRight(n, "+-") == name {
			return !strings.HasSuffix(n, "+") && !strings.HasSuffix(n, "-")
		}
	}
	return false
}

// ErrNodeRefused marks (with fault.ErrMalformed, exit 65) effective labels
// or taints the kubelet or the API server refuses: k3s starts, but the
// kubelet does not, or the Node does not register.
var ErrNodeRefused = errors.New("the node would not register")

// conflicts finds what undoes nodeprep's entries after its drop-in: a plain
// node-label/node-taint (or a k3s argument) that replaces the list, or a
// later label with the same key (the kubelet keeps the last) or taint with
// the same key and effect. Earlier entries that nodeprep's override become
// warnings.
// reservedConflicts are the node-label entries outside nodeprep's drop-in
// whose key nodeprep derives (reserved names what from).
func reservedConflicts(eff *Effective, ours string, reserved func(string) string) []error {
	if reserved == nil {
		return nil
	}
	var errs []error
	for _, e := range eff.NodeLabels {
		key, _, _ := strings.Cut(e.Value, "=")
		if e.Source == ours {
			continue
		}
		if src := reserved(key); src != "" {
			errs = append(errs, fmt.Errorf("%s sets node-label %s: nodeprep derives %s from %s, so k3s's configuration must not set it (the node would register with nodeprep's verdict without nodeprep's check); remove it", e.Source, e.Value, key, src))
		}
	}
	return errs
}

func conflicts(eff *Effective, ours string, labels []Label, taints []Taint, warnings *[]string) []error {
	var errs []error
	after := false
	for _, c := range eff.Changes {
		if c.Source == ours {
			after = true
			continue
		}
		if !after || c.Append {
			continue
		}
		if (c.Key == KeyNodeLabel && len(labels) > 0) || (c.Key == KeyNodeTaint && len(taints) > 0) {
			what, fix := "a plain "+c.Key+" key", "use "+c.Key+"+ to append"
			errs = append(errs, fmt.Errorf("%s: %s replaces the %s list, removing what nodeprep adds in %s; %s", c.Source, what, c.Key, ours, fix))
		}
	}
	order := map[string]int{ArgsSource: len(eff.Files)}
	for i, f := range eff.Files {
		order[f] = i
	}
	later := func(source string) bool { return order[source] > order[ours] }
	ourLabels := map[string]string{}
	for _, l := range labels {
		ourLabels[l.Key] = l.Value
	}
	for _, e := range eff.NodeLabels {
		if e.Source == ours {
			continue
		}
		l, err := ParseLabel(e.Value)
		if err != nil {
			continue
		}
		want, ok := ourLabels[l.Key]
		if !ok || want == l.Value {
			continue
		}
		if later(e.Source) {
			errs = append(errs, fmt.Errorf("%s: node-label %q overrides nodeprep's %s (the kubelet keeps the last value of a key)", e.Source, RedactEntry(e.Value), RedactEntry(l.Key+"="+want)))
		} else {
			*warnings = append(*warnings, fmt.Sprintf("%s: node-label %q is overridden by nodeprep's %s", e.Source, RedactEntry(e.Value), RedactEntry(l.Key+"="+want)))
		}
	}
	return errs
}

// registrationFiles are the k3s agent state files (under DataDir) that exist
// once the agent has registered: the kubelet's client certificate and
// kubeconfig, issued by the server when the agent joins.
var registrationFiles = []string{"agent/client-kubelet.crt", "agent/kubelet.kubeconfig"}

func registrationEvidence(root *hostfs.Root, dataDir string) string {
	for _, f := range registrationFiles {
		p := path.Join(dataDir, f)
		if root.Exists(p) {
			return p
		}
	}
	return ""
}
