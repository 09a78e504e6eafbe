package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	yaml2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/util/validation"
)

// k3sOutcome is what k3s makes of a host tree: whether it starts, and the
// node-label, node-taint and kubelet-arg lists and data-dir it runs with.
type k3sOutcome struct {
	refused     string // why k3s does not start, or why the node is refused; "" when it runs
	ignoredAll  bool   // k3s ran with none of its files (a read error it takes for "no config")
	labels      []string
	taints      []string
	kubeletArgs []string
	dataDir     string
}

// k3sOracle replays k3s on the host tree at root — written apart from
// nodeprep/k3s, from k3s's pkg/configfilearg (read with the search tools;
// not copied) — and hands the flags to the real urfave/cli v2 with an
// agent (or server) flag set of the flags these tests use: the library
// k3s's agent parses its command line with, so the flag rules (unknown
// flags, two spellings, appended slices, trimming, the first positional
// word) are urfave/cli's own. env is the k3s service's environment; args
// its command line after "k3s" (a leading "server" or "agent" word is the
// subcommand, default agent).
func k3sOracle(root string, env map[string]string, args []string) k3sOutcome {
	role := "agent"
	if len(args) > 0 && (args[0] == "agent" || args[0] == "server") {
		role, args = args[0], args[1:]
	}
	cfg := "/etc/rancher/k3s/config.yaml"
	if v := env["K3S_CONFIG_FILE"]; v != "" {
		cfg = v
	} else {
	find:
		for i, a := range args {
			for _, f := range []string{"--config", "-c"} {
				if a == f && i+1 < len(args) {
					cfg = args[i+1]
					break find
				}
				if v, ok := strings.CutPrefix(a, f+"="); ok {
					cfg = v
					break find
				}
			}
		}
	}
	host := func(p string) string { return filepath.Join(root, p) }
	var out k3sOutcome
	fileArgs, err := oracleReadConfig(host, cfg)
	switch {
	case errors.Is(err, os.ErrNotExist):
		out.ignoredAll = true
		fileArgs = nil
	case err != nil:
		out.refused = err.Error()
		return out
	}
	if role == "server" { // k3s stripInvalidFlags, for server only
		kept := fileArgs[:0]
		for _, a := range fileArgs {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if oracleServerOnly[name] || oracleAgentFlagNames()[name] {
				kept = append(kept, a)
			}
		}
		fileArgs = kept
	}
	var labels, taints, kubeletArgs *cli.StringSlice
	var dataDir string
	var dataDirSet bool
	flags := oracleFlags(role)
	app := &cli.App{
		Name: "k3s", DisableSliceFlagSeparator: true, Writer: io.Discard, ErrWriter: io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{{
			Name: role, Flags: flags,
			OnUsageError: func(_ *cli.Context, err error, _ bool) error { return err },
			Action: func(c *cli.Context) error {
				labels = cli.NewStringSlice(c.StringSlice("node-label")...)
				taints = cli.NewStringSlice(c.StringSlice("node-taint")...)
				kubeletArgs = cli.NewStringSlice(c.StringSlice("kubelet-arg")...)
				dataDir, dataDirSet = c.String("data-dir"), c.IsSet("data-dir")
				return nil
			},
		}},
	}
	argv := append(append([]string{"k3s", role}, fileArgs...), args...)
	if err := app.Run(argv); err != nil {
		out.refused = "urfave/cli: " + err.Error()
		return out
	}
	if labels == nil { // --help
		out.refused = "help"
		return out
	}
	out.labels, out.taints, out.kubeletArgs = labels.Value(), taints.Value(), kubeletArgs.Value()
	switch {
	case dataDirSet && dataDir != "":
		out.dataDir = dataDir
	case dataDirSet:
		out.dataDir = "/var/lib/rancher/k3s"
	case env["K3S_DATA_DIR"] != "":
		out.dataDir = env["K3S_DATA_DIR"]
	default:
		out.dataDir = "/var/lib/rancher/k3s"
	}
	out.refused = oracleNodeRefused(out.labels, out.taints)
	return out
}

// oracleReadConfig is k3s's readConfigFile: the flags built from cfg and
// its drop-ins. An error satisfying os.ErrNotExist means k3s runs with no
// config file at all.
func oracleReadConfig(host func(string) string, cfg string) ([]string, error) {
	var files []string
	entries, err := os.ReadDir(host(cfg + ".d"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("listing drop-ins: %w", err)
	}
	for _, e := range entries {
		n := strings.ToLower(e.Name())
		if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		files = append(files, path.Join(cfg+".d", e.Name()))
	}
	if _, err := os.Stat(host(cfg)); err == nil {
		files = append([]string{cfg}, files...)
	} else if !os.IsNotExist(err) || len(files) == 0 {
		return nil, err
	}
	type value struct {
		v      any
		isList bool
	}
	values := map[string]value{}
	var order []string
	for _, f := range files {
		data, err := os.ReadFile(host(f))
		if err != nil {
			return nil, err
		}
		var doc yaml2.MapSlice
		if err := yaml2.Unmarshal(data, &doc); err != nil {
			return nil, err
		}
		for _, item := range doc {
			k := oracleString(item.Key)
			name, plus := strings.CutSuffix(k, "+")
			old, seen := values[name]
			if !seen {
				order = append(order, name)
			}
			if seen && plus {
				values[name] = value{append(oracleSlice(old.v), oracleSlice(item.Value)...), true}
			} else {
				_, isList := item.Value.([]any)
				values[name] = value{item.Value, isList}
			}
		}
	}
	var args []string
	for _, name := range order {
		prefix := "--"
		if len(name) == 1 {
			prefix = "-"
		}
		if l, ok := values[name].v.([]any); ok {
			for _, x := range l {
				args = append(args, prefix+name+"="+oracleString(x))
			}
			continue
		}
		args = append(args, prefix+name+"="+oracleString(values[name].v))
	}
	return args, nil
}

// oracleString is wrangler convert.ToString, which k3s applies to keys and values.
func oracleString(v any) string {
	if l, ok := v.([]any); ok {
		if len(l) == 0 {
			return ""
		}
		v = l[0]
	}
	if t, ok := v.(time.Time); ok {
		return t.Format(time.RFC3339)
	}
	if v == nil {
		return ""
	}
	return strings.TrimSpace(fmt.Sprint(v))
}

// oracleSlice is k3s configfilearg toSlice.
func oracleSlice(v any) []any {
	switch x := v.(type) {
	case string:
		return []any{x}
	case []any:
		return x
	}
	if s := oracleString(v); s != "" {
		return []any{s}
	}
	return nil
}

// oracleNodeRefused judges the lists as the kubelet and the API server
// do: labels key=value with a valid key and value (empty items skipped),
// taints key[=value]:Effect, an empty one only alone, unique by key and
// effect.
func oracleNodeRefused(labels, taints []string) string {
	for _, l := range labels {
		if l == "" {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			return "kubelet: bad label " + l
		}
		if ns, _, _ := strings.Cut(k, "/"); strings.HasSuffix(ns, "kubernetes.io") || strings.HasSuffix(ns, "k8s.io") {
			return "kubelet: label in a reserved namespace " + l
		}
	}
	seen := map[string]bool{}
	for _, t := range taints {
		if t == "" {
			if len(taints) > 1 {
				return "kubelet: empty taint among others"
			}
			continue
		}
		kv, effect, ok := strings.Cut(t, ":")
		k, v, _ := strings.Cut(kv, "=")
		if !ok || len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 ||
			(effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute") {
			return "kubelet: bad taint " + t
		}
		if seen[k+":"+effect] {
			return "API server: taints repeat key and effect " + k + ":" + effect
		}
		seen[k+":"+effect] = true
	}
	return ""
}

// The flags of the oracle's agent: those these tests write (k3s
// pkg/cli/cmds/agent.go names), and a few server-only ones.
func oracleAgentFlagNames() map[string]bool {
	m := map[string]bool{}
	for _, f := range oracleFlags("agent") {
		for _, n := range f.Names() {
			m[n] = true
		}
	}
	return m
}

var oracleServerOnly = map[string]bool{"disable": true, "write-kubeconfig-mode": true, "tls-san": true, "cluster-init": true}

func oracleFlags(role string) []cli.Flag {
	fs := []cli.Flag{
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}},
		&cli.BoolFlag{Name: "debug"},
		&cli.StringFlag{Name: "token", Aliases: []string{"t"}},
		&cli.StringFlag{Name: "server", Aliases: []string{"s"}},
		&cli.StringFlag{Name: "data-dir", Aliases: []string{"d"}},
		&cli.StringFlag{Name: "node-name"},
		&cli.BoolFlag{Name: "with-node-id"},
		&cli.StringSliceFlag{Name: "node-label"},
		&cli.StringSliceFlag{Name: "node-taint"},
		&cli.StringSliceFlag{Name: "kubelet-arg"},
		&cli.StringFlag{Name: "container-runtime-endpoint"},
		&cli.IntFlag{Name: "lb-server-port"},
	}
	if role == "server" {
		fs = append(fs,
			&cli.StringSliceFlag{Name: "disable"},
			&cli.StringFlag{Name: "write-kubeconfig-mode"},
			&cli.StringSliceFlag{Name: "tls-san"},
			&cli.BoolFlag{Name: "cluster-init"},
		)
	}
	return fs
}
