package app

import (
	"io"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// An Extension makes a command that nodeprep's root carries beside its
// own: cmd/nodeprep-cluster adds the cluster commands
// (cmd/nodeprep/clustercmd) this way. They link the Kubernetes API types,
// which the nodeprep binary leaves out because every process pays for
// what it links at start-up (docs/faults.md, "Start-up"). An extension
// named like a built-in command replaces it: "cluster" replaces the stub
// that runs nodeprep-cluster.
type Extension func(*Env) *cobra.Command

// NoHostConfig is the cobra annotation key of a command that reads no
// config file of this machine (set it to "true"): one that judges a
// configuration it is given (cluster check-node, whose config is in its
// facts), which a config file where it runs must not change or fail.
const NoHostConfig = "nodeprep.dev/no-host-config"

// Env is what an Extension's commands see of the global flags
// (--root, --config, -o, -v/-q) once they have been resolved, which is
// before any RunE runs (PersistentPreRunE); reading it earlier gives the
// zero values.
type Env struct{ g *globals }

// Config is the configuration: defaults, then the config file.
func (e *Env) Config() config.Config { return e.g.cfg }

// ConfigName is the config file's path for messages: as the user gave it
// with --config, else where config.DefaultPath is under --root on
// this machine.
func (e *Env) ConfigName() string { return e.g.configName() }

// Output is the --output format: "text", "json" or "yaml".
func (e *Env) Output() string { return e.g.output }

// Streams are the command's standard streams.
func (e *Env) Streams() IOStreams { return e.g.streams }

// Log is the logger to stderr at the -v/-q level.
func (e *Env) Log() *slog.Logger { return e.g.log }

// Print writes v to stdout in the --output format: text through text,
// json (indented) and yaml through their encoders. Errors are the
// writer's.
func (e *Env) Print(v any, text func(io.Writer) error) error { return e.g.print(v, text) }

// NoArgs is cobra.NoArgs with the error marked as a usage error (exit 2).
func NoArgs(cmd *cobra.Command, args []string) error { return noArgs(cmd, args) }

// Silent marks err as already printed: Main exits with its code and
// prints nothing more. nil stays nil.
func Silent(err error) error { return silent(err) }

// Count is n and noun, plural unless n is 1: "1 taint", "2 taints".
func Count(n int, noun string) string { return count(n, noun) }

// FlagOr returns the flag's value when the command line set the flag,
// else the config file's value: flags override the config file.
func FlagOr[T any](flags *pflag.FlagSet, name string, flagValue, configValue T) T {
	return flagOr(flags, name, flagValue, configValue)
}

// Report prints err to w as Main prints it in text form, unless the
// command already printed it (Silent), and returns its exit code
// (ExitCode); nil prints nothing and is ExitOK.
func Report(w io.Writer, err error) int { return report(w, err) }

// Host is the host root (--root).
func (e *Env) Host() *hostfs.Root { return e.g.host }
