package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// globals are the global flags and what PersistentPreRunE makes of them;
// every command constructor receives the same *globals.
type globals struct {
	streams    IOStreams
	rootDir    string
	configPath string
	output     string
	verbose    bool
	quiet      bool

	started bool            // a command's PersistentPreRunE ran
	cmd     *cobra.Command  // the command that runs (its flags name hints)
	ctx     context.Context // the command's context (SIGTERM cancels it)
	host    *hostfs.Root    // the host root (--root)
	cfg     config.Config   // defaults, then the config file
	log     *slog.Logger    // to stderr, level from -v/-q
	// structured: log (and the final error) in slog's key=value form, with
	// -v or under journald; else plain "nodeprep: warning: …" lines.
	structured bool
}

// newRootCommand makes the root command with nodeprep's commands and
// those of exts (an extension named like a command replaces it), and the
// globals its commands share.
func newRootCommand(streams IOStreams, exts ...Extension) (*cobra.Command, *globals) {
	g := &globals{streams: streams}
	cmd := &cobra.Command{
		Use:   "nodeprep",
		Short: "Make a NixOS machine with NVIDIA GPUs a k3s GPU node that is safe to schedule on",
		Long: `nodeprep inspects the GPUs through NVML, patches the CDI spec so containers get
Vulkan and EGL, proves the adapters work, and writes the k3s join drop-in with
the node's taints and labels. 'nodeprep up' runs it all, for the systemd unit.`,
		Version:           currentVersion().String(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return g.setup(cmd) },
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	// --version prints the same line as `nodeprep version`.
	cmd.SetVersionTemplate("{{.Version}}\n")
	cmd.SetFlagErrorFunc(flagError)

	f := cmd.PersistentFlags()
	f.StringVar(&g.rootDir, "root", "/", "host root: every host path is read and written under this directory")
	f.StringVar(&g.configPath, "config", "", "config file (default "+config.DefaultPath+" under --root; a missing default file means defaults)")
	f.StringVarP(&g.output, "output", "o", "text", "output format: text, json or yaml")
	f.BoolVarP(&g.verbose, "verbose", "v", false, "log debug detail to stderr")
	f.BoolVarP(&g.quiet, "quiet", "q", false, "log only errors to stderr")

	cmd.AddCommand(
		newVersionCommand(g),
		newCDICommand(g),
	)
	addCommands(cmd, g)
	env := &Env{g: g}
	for _, ext := range exts {
		c := ext(env)
		for _, old := range cmd.Commands() {
			if old.Name() == c.Name() {
				cmd.RemoveCommand(old)
			}
		}
		cmd.AddCommand(c)
	}
	// cobra adds its completion command when it executes; guardGroups
	// needs it in the tree now.
	cmd.InitDefaultCompletionCmd()
	guardGroups(cmd)
	guardLeaves(cmd)
	registerCompletions(cmd)
	return cmd, g
}

// setup resolves the global flags: logger, host root, config file.
func (g *globals) setup(cmd *cobra.Command) error {
	g.started = true
	g.ctx = cmd.Context()
	g.cmd = cmd
	level := slog.LevelInfo
	switch {
	case g.verbose && g.quiet:
		return fault.Usage(errors.New("--verbose and --quiet exclude each other"))
	case g.verbose:
		level = slog.LevelDebug
	case g.quiet:
		level = slog.LevelError
	}
	g.structured = g.verbose || os.Getenv("JOURNAL_STREAM") != ""
	g.log = newLogger(g.streams.ErrOut, level, g.structured)
	switch g.output {
	case "text", "json", "yaml":
	default:
		return fault.Usage(fmt.Errorf("--output %q: want text, json or yaml", g.output))
	}
	if err := checkFlags(cmd.Flags()); err != nil {
		return err
	}
	// A group (cdi, cluster, completion) run bare only prints its help.
	if cmd.Name() == "version" || cmd.Name() == "man" || cmd.Name() == "__complete" || cmd.HasSubCommands() || cmd.HasParent() && cmd.Parent().Name() == "completion" {
		return nil
	}
	if cmd.Annotations[NoHostConfig] == "true" {
		if g.configPath != "" {
			return fault.Usage(fmt.Errorf("%s reads no config file: its configuration is in its input", cmd.CommandPath()))
		}
		g.cfg = config.Default(runtime.GOARCH)
		return nil
	}
	host, err := hostfs.New(g.rootDir)
	if err != nil {
		return err
	}
	g.host = host
	g.cfg = config.Default(runtime.GOARCH)
	var (
		data []byte
		name = g.configPath
	)
	if name == "" {
		data, err = host.ReadFile(config.DefaultPath, bounded.MaxConfig)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		name = g.configName()
	} else {
		data, err = bounded.ReadFile(name, bounded.MaxConfig)
	}
	switch {
	case errors.Is(err, bounded.ErrNotRegular), errors.Is(err, bounded.ErrTooLarge):
		return fault.Malformed(fmt.Errorf("reading config %q: %w", name, err))
	case err != nil:
		return fault.Unavailable(fmt.Errorf("reading config %q: %w", name, err))
	}
	g.cfg, err = config.Parse(name, data, g.cfg)
	return err
}

// configName is the config file as messages name it: --config as given,
// else where the default file is on this machine (config.DefaultPath
// under --root: /tmp/tmp.x/etc/nodeprep/config.yaml, so that the file named
// is the file to edit).
func (g *globals) configName() string {
	if g.configPath != "" {
		return g.configPath
	}
	if g.host != nil {
		if p, err := g.host.Path(config.DefaultPath); err == nil {
			return p
		}
	}
	return config.DefaultPath
}

// flagOr returns the flag's value when the flag was given on the command
// line, else the config file's value: flags override the config file.
func flagOr[T any](flags *pflag.FlagSet, name string, flagValue, configValue T) T {
	if flags.Changed(name) {
		return flagValue
	}
	return configValue
}
