package k3s

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// The k3s subcommands whose flags nodeprep replays (k3s pkg/configfilearg
// DefaultParser.After: the config file's values are inserted right after
// this word, before the command line's own flags).
const (
	RoleAgent  = "agent"  // k3s agent: every key must be an agent flag
	RoleServer = "server" // k3s server: unknown keys are skipped with a warning
)

// flagKind is how Go's flag package (under urfave/cli) reads a flag's value.
type flagKind int

const (
	kindString flagKind = iota // takes a value; the last one wins
	kindSlice                  // takes a value; every one is kept, in order
	kindBool                   // takes no value, or =true/=false
	kindInt                    // takes an integer value
)

// flagSpec is one urfave/cli flag: its names (name first, then aliases)
// and kind.
type flagSpec struct {
	names []string
	kind  flagKind
}

// agentFlagTable is `k3s agent`'s flag set: k3s pkg/cli/cmds/agent.go
// NewAgentCommand (ConfigFlag, DebugFlag, VLevel, VModule, LogFile,
// AlsoLogToStderr and the agent flags), plus the help flag urfave/cli adds
// ("help, h"). Name first, then aliases ("data-dir, d").
const agentFlagTable = `
config,c debug:b v:i vmodule log,l alsologtostderr:b token,t token-file server,s
data-dir,d node-name with-node-id:b node-label:s node-taint:s
image-credential-provider-bin-dir image-credential-provider-config selinux:b
lb-server-port:i protect-kernel-defaults:b container-runtime-endpoint
default-runtime image-service-endpoint pause-image snapshotter private-registry
disable-default-registry-endpoint:b nonroot-devices:b airgap-extra-registry:s
node-ip,i:s bind-address node-external-ip:s node-internal-dns:s node-external-dns:s
resolv-conf flannel-iface flannel-conf flannel-cni-conf kubelet-arg:s
kube-proxy-arg:s enable-pprof:b rootless:b prefer-bundled-bin:b docker:b
vpn-auth vpn-auth-file disable-apiserver-lb:b help,h:b
`

// serverFlagTable is what `k3s server` defines beyond the agent's flags
// (k3s pkg/cli/cmds/server.go ServerFlags), as far as nodeprep needs them:
// the server accepts these keys, and the kind says how a command-line flag
// takes its value.
const serverFlagTable = `
advertise-address advertise-port:i https-listen-port:i cluster-cidr:s service-cidr:s
service-node-port-range cluster-dns:s cluster-domain flannel-backend
flannel-ipv6-masq:b flannel-external-ip:b egress-selector-mode servicelb-namespace
write-kubeconfig,o write-kubeconfig-mode write-kubeconfig-group tls-san:s
tls-san-security:b agent-token agent-token-file cluster-init:b cluster-reset:b
cluster-reset-restore-path datastore-endpoint datastore-cafile datastore-certfile
datastore-keyfile default-local-storage-path disable:s disable-scheduler:b
disable-cloud-controller:b disable-kube-proxy:b disable-network-policy:b
disable-helm-controller:b disable-etcd:b disable-apiserver:b
disable-controller-manager:b embedded-registry:b etcd-expose-metrics:b
etcd-disable-snapshots:b etcd-snapshot-name etcd-snapshot-schedule-cron
etcd-snapshot-retention:i etcd-snapshot-dir etcd-snapshot-compress:b etcd-s3:b
etcd-s3-endpoint etcd-s3-endpoint-ca etcd-s3-skip-ssl-verify:b etcd-s3-access-key
etcd-s3-secret-key etcd-s3-bucket etcd-s3-region etcd-s3-folder etcd-s3-proxy
etcd-s3-config-secret etcd-s3-insecure:b etcd-s3-timeout etcd-arg:s
kube-apiserver-arg:s kube-scheduler-arg:s kube-controller-manager-arg:s
kube-cloud-controller-manager-arg:s etcd-snapshot-reconcile-interval
secrets-encryption:b secrets-encryption-provider helm-job-image
system-default-registry supervisor-metrics:b node-taint:s no-flannel:b
cluster-secret kine-tls:b
`

// flagSet maps every name and alias of a role's flags to its spec.
type flagSet map[string]*flagSpec

func parseFlagTable(sets ...string) flagSet {
	fs := flagSet{}
	for _, table := range sets {
		for _, w := range strings.Fields(table) {
			names, kind, _ := strings.Cut(w, ":")
			spec := &flagSpec{names: strings.Split(names, ",")}
			switch kind {
			case "s":
				spec.kind = kindSlice
			case "b":
				spec.kind = kindBool
			case "i":
				spec.kind = kindInt
			}
			for _, n := range spec.names {
				if _, ok := fs[n]; !ok {
					fs[n] = spec
				}
			}
		}
	}
	return fs
}

var (
	agentFlags  = sync.OnceValue(func() flagSet { return parseFlagTable(agentFlagTable) })
	serverFlags = sync.OnceValue(func() flagSet { return parseFlagTable(agentFlagTable, serverFlagTable) })
)

func flagsOf(role string) flagSet {
	if role == RoleServer {
		return serverFlags()
	}
	return agentFlags()
}

// IsAgentFlag reports whether name (without dashes) is a flag `k3s agent`
// defines, alias included ("d" for data-dir).
func IsAgentFlag(name string) bool { _, ok := agentFlags()[name]; return ok }

// argWord is one word of k3s's argument list and where it came from: a
// config file (the flag k3s built from one of its keys) or ArgsSource.
type argWord struct {
	text   string
	source string
	key    string // for a word built from a file: the key as written there
}

// parsed is what k3s's flag parsing makes of the argument list.
type parsed struct {
	lists    map[string][]Entry // kindSlice flags by name, values in order
	strings  map[string]Entry   // kindString flags by name, the last value
	ignored  []string           // words after the first positional one: never parsed
	warnings []string           // flags k3s may refuse that nodeprep cannot judge
}

// errFlag is a flag error k3s stops on, naming where the flag came from.
func errFlag(w argWord, format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	if w.key != "" {
		return fmt.Errorf("k3s config %q: key %q: %s", w.source, w.key, msg)
	}
	return fmt.Errorf("%s: %s", w.source, msg)
}

// parseArgs replays how `k3s <role>` parses its argument list (the files'
// flags, then the command line) with urfave/cli v2 over Go's flag package
// (urfave/cli v2 Command.Run: flag.FlagSet.Parse, then normalizeFlags):
//
//   - parsing stops at the first word that is not a flag ("-" alone
//     included) and after "--"; the rest are positional arguments, and
//     flags among them are never parsed (urfave/cli v2 does not reorder
//     arguments as v1 did);
//   - "-name" and "--name" are the same flag, "-name=v" / "--name=v" or
//     "--name v" give its value ("---x", "-=x" and "--=x" are bad syntax);
//   - a boolean flag takes no separate value, only "=true"/"=false" (any
//     strconv.ParseBool form);
//   - a flag the command does not define stops k3s: "flag provided but
//     not defined: -disable";
//   - one flag given under two of its names ("data-dir" and "d") stops
//     k3s: "Cannot use two forms of the same flag: d data-dir";
//   - a string slice flag (node-label, node-taint, kubelet-arg) keeps
//     every value, trimmed of white space (urfave/cli v2 StringSlice.Set),
//     so command-line values append to the files' values; a string flag
//     keeps the last. k3s turns off urfave/cli's comma splitting of slice
//     values, so a value with a comma stays one value.
//
// Errors are unmarked (callers mark them) and name the file and key, or
// ArgsSource.
func parseArgs(role string, words []argWord) (*parsed, error) {
	fs := flagsOf(role)
	p := &parsed{lists: map[string][]Entry{}, strings: map[string]Entry{}}
	visited := map[string]argWord{}
	for i := 0; i < len(words); i++ {
		w := words[i]
		a := w.text
		if len(a) < 2 || a[0] != '-' {
			for _, r := range words[i:] {
				p.ignored = append(p.ignored, r.text)
			}
			break
		}
		dashes := 1
		if a[1] == '-' {
			dashes = 2
			if len(a) == 2 { // "--": the end of the flags
				for _, r := range words[i+1:] {
					p.ignored = append(p.ignored, r.text)
				}
				break
			}
		}
		name := a[dashes:]
		if name == "" || name[0] == '-' || name[0] == '=' {
			return nil, errFlag(w, "bad flag syntax: %s (k3s does not start)", safeFlag(a))
		}
		name, value, hasValue := strings.Cut(name, "=")
		spec := fs[name]
		if spec == nil {
			if _, ok := misspelt(name); role == RoleServer && w.key == "" && !ok {
				// nodeprep's list of server flags is not complete: a
				// command-line flag it does not know is a warning (k3s
				// server exits on one it does not define), and its value
				// is taken to be the next word unless that is a flag.
				p.warnings = append(p.warnings, fmt.Sprintf("k3s argument -%s is not a `k3s server` flag nodeprep knows; k3s exits on a flag it does not define", name))
				if !hasValue && i+1 < len(words) && !strings.HasPrefix(words[i+1].text, "-") {
					i++
				}
				continue
			}
			return nil, errFlag(w, "flag provided but not defined: -%s: `k3s %s` exits on a flag it does not define%s", name, role, undefinedHint(name, role))
		}
		switch spec.kind {
		case kindBool:
			if hasValue {
				if _, err := strconv.ParseBool(value); err != nil {
					return nil, errFlag(w, "invalid boolean value for -%s (want true or false): k3s does not start", name)
				}
			}
		default:
			if !hasValue {
				if i+1 >= len(words) {
					return nil, errFlag(w, "flag needs an argument: -%s (k3s does not start)", name)
				}
				i++
				value = words[i].text
			}
			if spec.kind == kindInt {
				if _, err := strconv.ParseInt(value, 0, 64); err != nil {
					return nil, errFlag(w, "invalid value for flag -%s (want an integer): k3s does not start", name)
				}
			}
		}
		if prev, ok := visited[name]; !ok || prev.source != w.source {
			visited[name] = w
		}
		if name == "help" || name == "h" {
			return nil, errFlag(w, "-%s makes k3s print its help and exit instead of starting", name)
		}
		canon := spec.names[0]
		switch spec.kind {
		case kindSlice:
			p.lists[canon] = append(p.lists[canon], Entry{Value: strings.TrimSpace(value), Source: w.source})
		case kindString:
			p.strings[canon] = Entry{Value: value, Source: w.source}
		}
	}
	// urfave/cli normalizeFlags: every flag with aliases, names in order.
	seen := map[*flagSpec]bool{}
	for _, n := range sortedNames(fs) {
		spec := fs[n]
		if seen[spec] || len(spec.names) < 2 {
			continue
		}
		seen[spec] = true
		var first string
		for _, name := range spec.names {
			if _, ok := visited[name]; !ok {
				continue
			}
			if first != "" {
				a, b := visited[first], visited[name]
				return nil, fmt.Errorf("one flag in two spellings (urfave/cli: \"Cannot use two forms of the same flag: %s %s\"): %s sets -%s and %s sets -%s, and k3s does not start; keep one", name, first, describeSource(a), first, describeSource(b), name)
			}
			first = name
		}
	}
	return p, nil
}

func describeSource(w argWord) string {
	if w.key != "" {
		return fmt.Sprintf("k3s config %q (key %q)", w.source, w.key)
	}
	return w.source
}

// undefinedHint says why an agent refuses a key and what was meant.
func undefinedHint(name, role string) string {
	var hint string
	if meant, ok := misspelt(name); ok {
		hint = fmt.Sprintf(" (did you mean %q?)", meant)
	}
	if role == RoleAgent {
		if _, ok := serverFlags()[name]; ok {
			hint += "; it is a `k3s server` option: k3s skips unknown keys only for `k3s server`, so keep server options out of an agent's config files; if this node runs k3s server, say so: --k3s-arg=server, or join.k3sArgs: [server] in nodeprep's config (the NixOS module writes it for services.k3s.role = \"server\")"
		}
	}
	return hint
}

// safeFlag shows a malformed flag without its value (which may be a secret).
func safeFlag(a string) string {
	if name, _, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok {
		return a[:len(a)-len(strings.TrimLeft(a, "-"))] + name + "=…"
	}
	return a
}

func sortedNames(fs flagSet) []string {
	var names []string
	seen := map[*flagSpec]bool{}
	for _, table := range []string{agentFlagTable, serverFlagTable} {
		for _, w := range strings.Fields(table) {
			n, _, _ := strings.Cut(w, ":")
			n, _, _ = strings.Cut(n, ",")
			if spec, ok := fs[n]; ok && !seen[spec] {
				seen[spec] = true
				names = append(names, n)
			}
		}
	}
	return names
}
