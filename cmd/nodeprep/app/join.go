package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
)

// joinFlags are the drop-in flags `join` and `up` share.
type joinFlags struct {
	k3sConfig           string
	k3sDataDir          string
	k3sEnvFile          string
	dropIn              string
	labels              []string
	taints              []string
	k3sArgs             []string
	noDefaultTaint      bool
	gfdLabels           bool
	migStrategy         string
	allowOverride       bool
	requireUnregistered bool
}

// joinOptions are `nodeprep join`'s flags.
type joinOptions struct {
	joinFlags
	inv    inventoryFlags
	dryRun bool
	wait   time.Duration
}

func (o *joinFlags) add(f *pflag.FlagSet) {
	f.StringVar(&o.k3sConfig, "k3s-config", "", "host path of k3s's config.yaml; drop-ins are read from <path>.d (default "+k3s.DefaultConfigPath+")")
	f.StringVar(&o.k3sDataDir, "k3s-data-dir", "", "k3s's data-dir when no k3s file, --k3s-arg or $K3S_DATA_DIR sets one (default "+k3s.DefaultDataDir+")")
	f.StringVar(&o.k3sEnvFile, "k3s-env-file", "", "host path of the k3s service's EnvironmentFile (its K3S_CONFIG_FILE and K3S_DATA_DIR count)")
	f.StringVar(&o.dropIn, "drop-in", "", "file name nodeprep writes in the drop-in directory (default "+k3s.DefaultDropIn+")")
	f.StringArrayVar(&o.labels, "label", nil, "extra node label key=value (repeatable; a key nodeprep derives, such as nvidia.com/gpu.count or nodeprep.dev/selftest, is refused)")
	f.StringArrayVar(&o.taints, "taint", nil, "extra node taint key[=value]:Effect (repeatable)")
	f.StringArrayVar(&o.k3sArgs, "k3s-arg", nil, "a k3s command-line argument, to merge as k3s would (repeatable; --node-taint=x, --node-label x; a first word server or agent names the subcommand, default agent)")
	f.BoolVar(&o.noDefaultTaint, "no-default-taint", false, "do not add "+nodepolicy.DefaultTaintString)
	f.BoolVar(&o.gfdLabels, "gfd-labels", true, "add GPU Feature Discovery's nvidia.com/ labels from the inventory (turn off when GFD runs in the cluster)")
	f.StringVar(&o.migStrategy, "mig-strategy", "", "GPU Feature Discovery's MIG strategy for the MIG labels: none (default, as GFD's), single or mixed")
	f.BoolVar(&o.allowOverride, "allow-override", false, "let a later drop-in or k3s argument replace or override nodeprep's labels and taints (a warning instead of an error)")
	f.BoolVar(&o.requireUnregistered, "require-unregistered", false, "fail when the node has already registered (its taints can no longer change)")
}

// joinSettings are the resolved drop-in settings: k3s options without the
// generated labels, whether GFD labels are on, and the user's labels.
type joinSettings struct {
	opts  k3s.Options
	gfd   bool
	mig   string // GFD's MIG strategy
	extra []k3s.Label
}

// resolve applies flags over the config file. k3s's environment is this
// process's $K3S_CONFIG_FILE and $K3S_DATA_DIR with the k3s service's
// EnvironmentFile (--k3s-env-file) over them; k3s.Options.Locate then picks
// the config file as k3s does.
func (o *joinFlags) resolve(g *globals, fs *pflag.FlagSet) (joinSettings, error) {
	j := g.cfg.Join
	base := map[string]string{}
	for _, k := range []string{k3s.EnvConfigFile, k3s.EnvDataDir} {
		if v := os.Getenv(k); v != "" {
			base[k] = v
		}
	}
	env, err := k3s.LoadEnvironment(g.host, flagOr(fs, "k3s-env-file", o.k3sEnvFile, j.K3sEnvironmentFile), base)
	if err != nil {
		return joinSettings{}, err
	}
	j.Labels = flagOr(fs, "label", o.labels, j.Labels)
	j.Taints = flagOr(fs, "taint", o.taints, j.Taints)
	if fs.Changed("no-default-taint") {
		on := !o.noDefaultTaint
		j.DefaultTaint = &on
	}
	if fs.Changed("gfd-labels") {
		j.GFDLabels = &o.gfdLabels
	}
	j.K3sConfig = flagOr(fs, "k3s-config", o.k3sConfig, j.K3sConfig)
	j.K3sDataDir = flagOr(fs, "k3s-data-dir", o.k3sDataDir, j.K3sDataDir)
	j.DropIn = flagOr(fs, "drop-in", o.dropIn, j.DropIn)
	j.K3sArgs = flagOr(fs, "k3s-arg", o.k3sArgs, j.K3sArgs)
	j.AllowOverride = flagOr(fs, "allow-override", o.allowOverride, j.AllowOverride)
	j.RequireUnregistered = flagOr(fs, "require-unregistered", o.requireUnregistered, j.RequireUnregistered)
	j.MIGStrategy = flagOr(fs, "mig-strategy", o.migStrategy, j.MIGStrategy)
	s, err := nodeprep.ResolveJoin(j, env)
	if err != nil {
		return joinSettings{}, err
	}
	return joinSettings{opts: s.K3s, gfd: s.GFD, mig: s.MIGStrategy, extra: s.Labels}, nil
}

func newJoinCommand(g *globals) *cobra.Command {
	o := &joinOptions{}
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Write the k3s agent drop-in with the node's labels and taints",
		Long: `join writes <k3s config>.d/50-nodeprep.yaml with node-label+ and node-taint+
lists so that the node registers with its taints (default
nvidia.com/gpu=present:NoSchedule) and GPU Feature Discovery's labels. It merges
config.yaml, the drop-ins and the k3s arguments as k3s does, reports the
effective lists, and fails when a later file or argument would undo what it
adds. Taints reach the Node object only when it is first registered.

It reads k3s's configuration from every place k3s does: the config file is
$K3S_CONFIG_FILE (this process's, or the k3s service's --k3s-env-file), else
--config in the k3s arguments (--k3s-arg), else --k3s-config / join.k3sConfig,
else /etc/rancher/k3s/config.yaml; the drop-in goes to <that file>.d/. The
data dir, where "already registered" is looked for, is --data-dir in the k3s
arguments, else data-dir in the files, else $K3S_DATA_DIR, else --k3s-data-dir,
else /var/lib/rancher/k3s. A kubelet-arg that sets register-with-taints or
node-labels takes the taints or labels away from k3s's node-taint/node-label:
a conflict (exit 1; a warning with --allow-override).

It reads the files as k3s does (YAML 1.1, gopkg.in/yaml.v2; only the first
document) and parses the flags they make with the command line as k3s agent
does (urfave/cli): command-line node-label, node-taint and kubelet-arg
values are added to the files'. Where k3s would not start (a key the agent
does not define, one flag in two spellings, YAML it cannot parse, a drop-in
it cannot read), would ignore every config file (a dangling drop-in link) or
the node would not register (two taints with one key and effect, a label
the kubelet refuses), join exits 65 naming the file; see docs/k3s.md.

With MIG on, GFD's MIG labels follow --mig-strategy (join.migStrategy) as GFD's
--mig-strategy does: none (default) writes none, single describes the MIG
devices under nvidia.com/gpu.*, mixed writes nvidia.com/mig-<profile>.*; both
add nvidia.com/mig.strategy. GFD labels nodeprep does not write: gpu.replicas
of whole GPUs, gpu.sharing-strategy, mps.capable, gpu.mode, gpu.machine, the
deprecated cuda.driver.* and cuda.runtime.*, gpu.clique, the IMEX and vGPU
labels and gfd.timestamp.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, g) },
	}
	f := cmd.Flags()
	o.inv.add(f)
	o.joinFlags.add(f)
	f.BoolVar(&o.dryRun, "dry-run", false, "print the drop-in and write nothing")
	addWaitFlag(cmd, &o.wait)
	return cmd
}

// joinReport is what `join` prints with -o json|yaml.
type joinReport struct {
	*k3s.Result `json:",inline" yaml:",inline"`
	DryRun      bool `json:"dryRun" yaml:"dryRun"`
	Simulated   bool `json:"simulated" yaml:"simulated"`
}

func (o *joinOptions) run(cmd *cobra.Command, g *globals) error {
	fs := cmd.Flags()
	js, err := o.joinFlags.resolve(g, fs)
	if err != nil {
		return err
	}
	report := joinReport{DryRun: o.dryRun}
	var inv *gpu.Inventory
	if js.gfd || fs.Changed("simulate") {
		if inv, err = o.inv.inventory(g, fs); err != nil {
			return err
		}
		report.Simulated = inv.Simulated
	}
	if err := nodepolicy.CheckMIGStrategy(js.mig); err != nil {
		return fault.Usage(err)
	}
	labels, err := nodepolicy.NodeLabels(inv, nodepolicy.NodeLabelOptions{GFD: js.gfd, MIGStrategy: js.mig, Extra: js.extra})
	if err != nil {
		return err
	}
	opts := js.opts
	opts.Labels = labels

	if !o.dryRun {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		unlock, err := lock(ctx, g, cmd, o.wait)
		if err != nil {
			return err
		}
		defer unlock() //nolint:errcheck // closing the lock file releases it
	}
	res, err := k3s.Plan(g.host, opts)
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		g.log.Warn(w)
	}
	findings, notes := podpath.ContainerdFindings(g.host, res, g.cfg.CDI.Spec, g.cfg.CDI.DriverRoot)
	for _, n := range notes {
		g.log.Debug(n)
	}
	for _, f := range findings {
		g.log.Warn(f.Message)
	}
	if !o.dryRun {
		if err := k3s.Apply(g.host, res); err != nil {
			return err
		}
	}
	report.Result = res
	return g.print(report, func(w io.Writer) error {
		if o.dryRun {
			_, err := io.WriteString(w, res.Content)
			return err
		}
		return printJoin(w, res)
	})
}

func printJoin(w io.Writer, r *k3s.Result) error {
	verb := "wrote"
	if !r.Written {
		verb = "unchanged"
	}
	fmt.Fprintf(w, "%s %s (%s, %s)\n", verb, r.DropInPath, count(len(r.Labels), "label"), count(len(r.Taints), "taint"))
	fmt.Fprintf(w, "k3s config: %s (%s); data dir: %s (%s)\n", r.ConfigPath, r.ConfigSource, r.DataDir, r.DataDirSource)
	if r.Registered {
		fmt.Fprintf(w, "registered: yes (%s)\n", r.RegistrationEvidence) // the warning on stderr says what follows
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, list := range []struct {
		name    string
		entries []k3s.Entry
	}{{"node-label", r.Effective.NodeLabels}, {"node-taint", r.Effective.NodeTaints}} {
		fmt.Fprintf(tw, "effective %s (%d):\n", list.name, len(list.entries))
		for _, e := range list.entries {
			fmt.Fprintf(tw, "  %s\t%s\n", e.Value, e.Source)
		}
	}
	// Warnings went to the log (stderr); -o json|yaml carries them too.
	return tw.Flush()
}
