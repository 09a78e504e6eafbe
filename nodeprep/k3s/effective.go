package k3s

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// The environment variables of the k3s service that move its paths (k3s
// pkg/configfilearg: the config file; pkg/cli/cmds: data-dir's EnvVar).
const (
	EnvConfigFile = "K3S_CONFIG_FILE" // the config file; wins over --config
	EnvDataDir    = "K3S_DATA_DIR"    // data-dir when no file or flag sets it
)

// Where a located path came from (Result.ConfigSource, Result.DataDirSource).
const (
	SourceDefault = "k3s default"
	// SourceOption is nodeprep's own setting (--k3s-config, join.k3sConfig,
	// Options.DataDir): what k3s uses when nothing in its environment or
	// command line says otherwise.
	SourceOption = "nodeprep setting"
	SourceArgs   = ArgsSource // a k3s command-line argument
)

// Location is where k3s reads its config file, and what chose it.
type Location struct {
	ConfigPath string // host path of config.yaml; drop-ins are in DropInDir(ConfigPath)
	Source     string // EnvConfigFile, SourceArgs, SourceOption or SourceDefault
}

// Locate returns the config file k3s reads, with k3s's precedence
// (pkg/configfilearg findConfigFileFlag): $K3S_CONFIG_FILE in o.Env, else
// the first --config/-c in o.K3sArgs ("--config PATH" or "--config=PATH"),
// else o.ConfigPath (nodeprep's setting), else DefaultConfigPath. It does not
// check the path; Plan refuses one that is not absolute.
func (o Options) Locate() Location {
	if v := o.Env[EnvConfigFile]; v != "" {
		return Location{v, EnvConfigFile}
	}
	var words []string
	for _, a := range o.K3sArgs {
		words = append(words, strings.Fields(a)...)
	}
	for i, a := range words {
		for _, flag := range []string{"--config", "-c"} {
			if a == flag && i+1 < len(words) {
				return Location{words[i+1], SourceArgs}
			}
			if a == flag { // the last word: k3s refuses a flag with no value
				return Location{"", SourceArgs}
			}
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return Location{v, SourceArgs}
			}
		}
	}
	if o.ConfigPath != "" && o.ConfigPath != DefaultConfigPath {
		return Location{o.ConfigPath, SourceOption}
	}
	return Location{DefaultConfigPath, SourceDefault}
}

// dataDir returns k3s's effective data-dir and where it came from. For
// the agent's state the k3s agent's own flag parsing decides (urfave/cli
// with k3s's config values inserted before the command line): a
// --data-dir/-d argument, else the last data-dir of the files, else
// $K3S_DATA_DIR (the flag's EnvVar), else o.DataDir, else DefaultDataDir.
// (k3s's wrapper, cmd/k3s findDataDir, lets $K3S_DATA_DIR win, but only
// for where it unpacks its binaries.)
func (o Options) dataDir(eff *Effective) (string, string) {
	switch {
	case eff.DataDir != nil && eff.DataDir.Value == "":
		// "data-dir:" with no value: k3s's --data-dir= resets it to the
		// default (datadir.LocalHome), $K3S_DATA_DIR notwithstanding.
		return DefaultDataDir, eff.DataDir.Source
	case eff.DataDir != nil:
		return eff.DataDir.Value, eff.DataDir.Source
	case o.Env[EnvDataDir] != "":
		return o.Env[EnvDataDir], EnvDataDir
	case o.DataDir != "":
		return o.DataDir, SourceOption
	}
	return DefaultDataDir, SourceDefault
}

// ParseEnvironmentFile parses a systemd EnvironmentFile= (systemd.exec(5))
// as systemd's own parser reads it (src/basic/env-file.c,
// parse_env_file_internal, a state machine over the bytes):
//   - a line whose first non-blank byte is '#' or ';' is a comment (a
//     backslash ending it does not continue it, since systemd v254);
//   - KEY=VALUE, white space around the key and before the value dropped;
//   - an unquoted value runs to the line's end, its trailing white space
//     dropped; a backslash takes the next byte as it is, and a backslash
//     ending a line joins the next line to the value
//     (`K3S_DATA_DIR=/data\` then `K3S_CONFIG_FILE=/x.yaml` is one
//     variable, K3S_DATA_DIR=/dataK3S_CONFIG_FILE=/x.yaml);
//   - 'single' and "double" quoted parts are taken as they are, line
//     breaks included; in double quotes a backslash before one of "\`$
//     gives that byte, before a line break nothing, before anything else
//     itself and the byte; quoted and unquoted parts may follow each other
//     (A="x" 'y' z is xyz);
//   - a quote that is never closed takes everything to the end of the
//     file, later lines included, into the value: those lines set nothing;
//   - a key or value that is not valid UTF-8 makes systemd refuse the
//     file, and so does a NUL byte anywhere in it (systemd reads the file
//     as one C string: src/basic/fileio.c, read_full_stream_full, refuses
//     an embedded NUL with EBADMSG).
//
// It returns the variables, a later line winning, or an error naming the
// line and, when it can be told, the key (unmarked; LoadEnvironment marks
// it). Where systemd skips a line with a log message (no '=', a key that
// is not a variable name, shell syntax such as `export K3S_TOKEN=…`,
// `K3S_TOKEN: …`, the token alone), nodeprep refuses the file: the line
// was meant to set something. The error never quotes the line: the file
// holds the join token, and a malformed line may be the token. No
// library parses this format: dotenv parsers differ from systemd on
// exactly these rules.
func ParseEnvironmentFile(data []byte) (map[string]string, error) {
	const (
		preKey = iota
		inKey
		preValue
		inValue
		valueEscape
		singleQuoted
		doubleQuoted
		doubleEscape
		comment
		commentEscape
	)
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return nil, fmt.Errorf("line %d: has a NUL byte: systemd refuses a file with one (the line is not shown, it may hold a secret)", bytes.Count(data[:i], []byte("\n"))+1)
	}
	env := map[string]string{}
	state := preKey
	var key, value []byte
	keyWS, valueWS := -1, -1 // where trailing white space starts, -1: none
	line, keyLine, keyStart := 1, 1, 0
	push := func() error {
		if keyWS >= 0 {
			key = key[:keyWS]
		}
		if state == inValue && valueWS >= 0 {
			value = value[:valueWS]
		}
		k := string(key)
		if !isEnvName(k) {
			return envLineError(keyLine, lineAt(data, keyStart))
		}
		if !utf8.Valid(value) {
			return fmt.Errorf("line %d: key %s has a value that is not valid UTF-8: systemd refuses the whole file", keyLine, k)
		}
		env[k] = string(value)
		key, value = key[:0], nil
		return nil
	}
	for i, c := range data {
		newline := c == '\n' || c == '\r'
		blank := newline || c == ' ' || c == '\t'
		switch state {
		case preKey:
			switch {
			case c == '#' || c == ';':
				state = comment
			case !blank:
				state, keyWS, keyLine, keyStart = inKey, -1, line, i
				key = append(key[:0], c)
			}
		case inKey:
			switch {
			case newline:
				return nil, envLineError(keyLine, lineAt(data, keyStart))
			case c == '=':
				state, valueWS = preValue, -1
			default:
				if !blank {
					keyWS = -1
				} else if keyWS < 0 {
					keyWS = len(key)
				}
				key = append(key, c)
			}
		case preValue:
			switch {
			case newline:
				if err := push(); err != nil {
					return nil, err
				}
				state = preKey
			case c == '\'':
				state = singleQuoted
			case c == '"':
				state = doubleQuoted
			case c == '\\':
				state = valueEscape
			case !blank:
				state = inValue
				value = append(value, c)
			}
		case inValue:
			switch {
			case newline:
				if err := push(); err != nil {
					return nil, err
				}
				state = preKey
			case c == '\\':
				state, valueWS = valueEscape, -1
			default:
				if !blank {
					valueWS = -1
				} else if valueWS < 0 {
					valueWS = len(value)
				}
				value = append(value, c)
			}
		case valueEscape:
			state = inValue
			if !newline {
				value = append(value, c)
			}
		case singleQuoted:
			if c == '\'' {
				state = preValue
			} else {
				value = append(value, c)
			}
		case doubleQuoted:
			switch c {
			case '"':
				state = preValue
			case '\\':
				state = doubleEscape
			default:
				value = append(value, c)
			}
		case doubleEscape:
			state = doubleQuoted
			switch {
			case strings.IndexByte("\"\\`$", c) >= 0:
				value = append(value, c)
			case c != '\n':
				value = append(value, '\\', c)
			}
		case comment:
			switch {
			case c == '\\':
				state = commentEscape
			case newline:
				state = preKey
			}
		case commentEscape:
			if newline {
				state = preKey
			} else {
				state = comment
			}
		}
		if c == '\n' {
			line++
		}
	}
	switch state {
	case inKey:
		return nil, envLineError(keyLine, lineAt(data, keyStart))
	case preValue, inValue, valueEscape, singleQuoted, doubleQuoted, doubleEscape:
		if err := push(); err != nil {
			return nil, err
		}
	}
	return env, nil
}

// lineAt is the line of data that starts at or before start, from start
// to the line's end, trimmed.
func lineAt(data []byte, start int) string {
	rest := data[start:]
	if i := bytes.IndexAny(rest, "\r\n"); i >= 0 {
		rest = rest[:i]
	}
	return strings.TrimSpace(string(rest))
}

// envLineError says what is wrong with a line of the environment file
// without quoting it: the file holds K3S_TOKEN, and a malformed line may
// be the token itself. It names the line and, when one can be told, the
// key.
func envLineError(n int, line string) error {
	const want = "want KEY=VALUE (systemd EnvironmentFile=; the line is not shown, it may hold a secret)"
	if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
		if key := leadingName(strings.TrimSpace(rest)); key != "" {
			return fmt.Errorf("line %d: key %s is preceded by `export`, which is shell syntax: %s", n, key, want)
		}
		return fmt.Errorf("line %d: starts with `export`, which is shell syntax: %s", n, want)
	}
	if key := leadingName(line); key != "" && len(key) < len(line) {
		sep := strings.TrimLeft(line[len(key):], " \t")
		switch {
		case strings.HasPrefix(sep, ":"):
			return fmt.Errorf("line %d: key %s is followed by ':' (YAML syntax), not '=': %s", n, key, want)
		case len(sep) < len(line[len(key):]):
			return fmt.Errorf("line %d: key %s is followed by white space, not '=': %s", n, key, want)
		}
	}
	if !strings.Contains(line, "=") {
		return fmt.Errorf("line %d: has no '=' (a bare value, such as a token pasted alone?): %s", n, want)
	}
	return fmt.Errorf("line %d: the text before '=' is not a variable name: %s", n, want)
}

// leadingName returns the variable name that starts s when it is one to
// show: upper case letters, digits and '_' (K3S_TOKEN), at most 64 bytes
// and not the start of a join token; else "". A lower-case word may be a
// token pasted alone, so it is never shown.
func leadingName(s string) string {
	i := 0
	for i < len(s) && i < 65 && (s[i] == '_' || s[i] >= 'A' && s[i] <= 'Z' || i > 0 && s[i] >= '0' && s[i] <= '9') {
		i++
	}
	if i == 0 || i > 64 || i < len(s) && (s[i] >= 'a' && s[i] <= 'z') || tokenLike.MatchString(s[:min(len(s), 80)]) && strings.HasPrefix(s, "K10") {
		return ""
	}
	return s[:i]
}

func isEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// LoadEnvironment returns base with the variables of the k3s service's
// EnvironmentFile (host path file, read under root) laid over it, as
// systemd gives them to k3s. An empty file path returns a copy of base.
// Errors: the file cannot be read (fault.ErrUnavailable: systemd would not
// start k3s either) or does not parse (fault.ErrMalformed), naming it.
func LoadEnvironment(root *hostfs.Root, file string, base map[string]string) (map[string]string, error) {
	env := maps.Clone(base)
	if env == nil {
		env = map[string]string{}
	}
	if file == "" {
		return env, nil
	}
	data, err := root.ReadFile(file, bounded.MaxK3sConfig)
	if errors.Is(err, bounded.ErrNotRegular) || errors.Is(err, bounded.ErrTooLarge) {
		return nil, fault.Malformed(fmt.Errorf("reading k3s environment file %q: %w", file, err))
	}
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("reading k3s environment file %q: %w", file, err))
	}
	vars, err := ParseEnvironmentFile(data)
	if err != nil {
		return nil, fault.Malformed(fmt.Errorf("reading k3s environment file %q: %w", file, err))
	}
	maps.Copy(env, vars)
	return env, nil
}

// The kubelet flags k3s builds from node-taint and node-label (k3s
// pkg/daemons/agent: argsMap["register-with-taints"], argsMap["node-labels"]).
const (
	kubeletTaintsFlag = "register-with-taints"
	kubeletLabelsFlag = "node-labels"
)

// kubeletArgConflicts finds kubelet-arg entries that take the node's
// taints or labels away from node-taint/node-label. k3s merges kubelet-arg
// into its own kubelet flags (k3s pkg/util GetArgs): "flag=v" drops k3s's
// own value of the flag, "flag+=v" passes k3s's then v, "flag-=v" v then
// k3s's. The kubelet keeps the last --register-with-taints
// (RegisterWithTaintsVar.Set replaces the list) but merges repeated
// --node-labels (component-base cliflag.MapStringString). So any
// register-with-taints except "-=" and a plain node-labels lose nodeprep's
// entries: conflicts; "register-with-taints-=" loses the kubelet-arg's own
// taints: a warning.
func kubeletArgConflicts(eff *Effective, labels []Label, taints []Taint, warnings *[]string) []error {
	var errs []error
	for _, e := range eff.KubeletArgs {
		name, value, _ := strings.Cut(strings.TrimLeft(e.Value, "-"), "=")
		flag := strings.TrimRight(name, "+-")
		op := name[len(flag):]
		switch {
		case flag == kubeletTaintsFlag && len(taints) > 0:
			fix := fmt.Sprintf("combine them: remove this kubelet-arg and list its taints (%s) under node-taint+ in a config.yaml.d file (or pass them to nodeprep's --taint), so k3s passes nodeprep's and these in one --register-with-taints", RedactEntry(value))
			if value == "" {
				fix = "remove this kubelet-arg: it sets no taint, only takes the place of the --register-with-taints k3s builds"
			}
			switch op {
			case "":
				errs = append(errs, fmt.Errorf("%s: kubelet-arg %q replaces the --register-with-taints k3s builds from node-taint, so the node registers without nodeprep's taints (%s); %s", e.Source, RedactEntry(e.Value), joinTaints(taints), fix))
			case "-":
				*warnings = append(*warnings, fmt.Sprintf("%s: kubelet-arg %q puts its own --register-with-taints before k3s's and the kubelet keeps only the last, so its taints (%s) never reach the node; %s", e.Source, RedactEntry(e.Value), RedactEntry(value), fix))
			default:
				errs = append(errs, fmt.Errorf("%s: kubelet-arg %q passes a second --register-with-taints after k3s's, and the kubelet keeps only the last, so the node registers without nodeprep's taints (%s); %s", e.Source, RedactEntry(e.Value), joinTaints(taints), fix))
			}
		case flag == kubeletLabelsFlag && op == "" && len(labels) > 0:
			errs = append(errs, fmt.Errorf("%s: kubelet-arg %q replaces the --node-labels k3s builds from node-label, so the node registers without nodeprep's labels; combine them: list these labels under node-label+ in a config.yaml.d file (or write the kubelet-arg as %q: the kubelet merges repeated --node-labels)", e.Source, RedactEntry(e.Value), RedactEntry("node-labels+="+value)))
		}
	}
	return errs
}

func joinTaints(ts []Taint) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, ",")
}

// checkAbs refuses a k3s path that is not absolute: k3s would resolve it
// against its working directory, which nodeprep cannot know.
func checkAbs(what, p, source string) error {
	if path.IsAbs(p) {
		return nil
	}
	return fault.Malformed(fmt.Errorf("k3s %s %q (from %s): want an absolute path", what, p, source))
}

// View is k3s's effective configuration as nodeprep needs it: where k3s
// reads its config, its data-dir, and the merged keys. Read builds it;
// Plan reports the same facts in its Result.
type View struct {
	Location
	// DataDir is the effective data-dir and DataDirSource what set it.
	DataDir       string `json:"dataDir" yaml:"dataDir"`
	DataDirSource string `json:"dataDirSource" yaml:"dataDirSource"` // see DataDir
	// Effective is the merge of the files and o.K3sArgs.
	Effective *Effective `json:"effective" yaml:"effective"`
	// Unit is Options.Unit, for the containerd check.
	Unit Unit `json:"-" yaml:"-"`
}

// Read locates and merges k3s's configuration under root (Locate, ReadFiles,
// Merge) without nodeprep's drop-in being placed, and resolves the
// data-dir. Errors: those of ReadFiles and Merge, and a config file or
// data-dir that is not absolute (fault.ErrMalformed).
func Read(root *hostfs.Root, o Options) (*View, error) {
	v := &View{Location: o.Locate(), Unit: o.Unit}
	if err := checkAbs("config file", v.ConfigPath, v.Source); err != nil {
		return nil, err
	}
	files, err := ReadFiles(root, v.ConfigPath)
	if err != nil {
		return nil, err
	}
	if v.Effective, err = Merge(files, o.K3sArgs); err != nil {
		return nil, err
	}
	v.DataDir, v.DataDirSource = o.dataDir(v.Effective)
	if err := checkAbs("data-dir", v.DataDir, v.DataDirSource); err != nil {
		return nil, err
	}
	return v, nil
}
