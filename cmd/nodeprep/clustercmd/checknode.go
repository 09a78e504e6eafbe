package clustercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/fleet"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// checkNodeOptions are `cluster check-node`'s flags.
type checkNodeOptions struct {
	facts     string
	manifests []string
	spec      string
	stores    []string
	arch      string
	// generate synthesises the CDI spec the toolkit's generator would
	// write (fleet.SpecGenerator); nil until a generator is linked.
	generate fleet.SpecGenerator
}

func newCheckNodeCommand(env *app.Env) *cobra.Command {
	o := &checkNodeOptions{}
	cmd := &cobra.Command{
		Use:   "check-node --facts FACTS.json [--manifests DIR]...",
		Short: "Judge a node configuration before it is deployed, with no GPU: the facts a flake check gathers",
		Long: `check-node judges one node configuration as nodeprep would judge the node it
builds, with no GPU and no network (a flake check in CI, docs/nixos.md): it
reads the facts the NixOS side gathers (--facts, schema
nodeprep.dev/node-facts/v1), assembles a throw-away host tree from them (the
files as the configuration writes them, /run/opengl-driver linked to the
driver package, the CDI spec the configured generator would write) and runs
on it, with the simulated inventory the facts name: nodeprep's config file;
up's plan (the CDI patch and the patched spec checked for the inventory's
device names; the join as k3s reads its config, drop-ins and the unit's
arguments; the containerd config k3s renders from the template for its
version, its runtime handlers (predicted from the k3s unit's PATH before
k3s has rendered it) and the NVIDIA runtime's mode); the kubelet config file
k3s passes; cdi check with what cdi patch --dry-run would change; and
cluster check of --manifests (and the configuration's own k3s manifests)
against the node's taints and labels. Every line names the node.

The Vulkan and EGL self-test and CUDA need a GPU: the output says they were
not judged. --spec-file FILE judges that spec instead of the synthesised one.

It reads the store paths the facts name and nothing else outside them (a
link out of the store is not followed) and writes only its tree under
$TMPDIR, removed on every exit; SIGTERM stops it with nothing judged.

Exit status: 0 the node would be ready and the manifests fit it, 1 not
(or stopped), 65 malformed facts (an unknown field is refused, naming it)
or manifests, 69 the driver package is in no store on this machine.`,
		Args: app.NoArgs,
		// The node's config is in the facts: the config file of the
		// machine the check runs on is not read.
		Annotations: map[string]string{app.NoHostConfig: "true"},
		RunE:        func(cmd *cobra.Command, _ []string) error { return o.run(cmd, env) },
	}
	f := cmd.Flags()
	f.StringVar(&o.facts, "facts", "", "the facts file of the node configuration (JSON, schema nodeprep.dev/node-facts/v1)")
	f.StringArrayVar(&o.manifests, "manifests", nil, "a manifest file or directory to judge against the node, as cluster check reads it (repeatable)")
	f.StringVar(&o.spec, "spec-file", "", "judge the CDI spec in this file (on this machine) instead of the one the toolkit's generator would write")
	f.StringVar(&o.arch, "arch", runtime.GOARCH, "the node's architecture as GOARCH names it")
	f.StringArrayVar(&o.stores, "store-root", nil, "a directory the facts' store paths are read from (repeatable, the first that has a path wins; default /)")
	_ = f.MarkHidden("store-root") // tests: a host tree stands in for /nix/store
	return cmd
}

func (o *checkNodeOptions) run(cmd *cobra.Command, env *app.Env) error {
	if o.facts == "" {
		return fault.Usage(errors.New("check-node needs --facts FILE: the facts file of the node configuration"))
	}
	data, err := bounded.ReadFile(o.facts, fleet.MaxFacts)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fault.Usage(fmt.Errorf("reading facts: %w", err))
	case errors.Is(err, bounded.ErrTooLarge) || errors.Is(err, bounded.ErrNotRegular):
		return fault.Malformed(fmt.Errorf("reading facts: %w", err))
	case err != nil:
		return fault.Unavailable(fmt.Errorf("reading facts: %w", err))
	}
	facts, err := fleet.ParseFacts(o.facts, data)
	if err != nil {
		return err
	}
	inv, err := fleet.Inventory(facts)
	if err != nil {
		return err
	}
	gen := o.generate
	if o.spec != "" {
		spec, err := bounded.ReadFile(o.spec, bounded.MaxCDISpec)
		if err != nil {
			return fault.Usage(fmt.Errorf("--spec-file: %w", err))
		}
		gen = func(*hostfs.Root, *gpu.Inventory, []string) ([]byte, error) { return spec, nil }
	}
	if gen == nil {
		gen = fleet.Generator(facts)
	}

	dir, err := os.MkdirTemp("", "nodeprep-check-node-")
	if err != nil {
		return fault.CantWrite(fmt.Errorf("the host tree: %w", err))
	}
	defer os.RemoveAll(dir)
	root, err := fleet.Assemble(cmd.Context(), dir, facts, fleet.AssembleOptions{Stores: o.stores, Generate: gen, Inventory: inv})
	var generated *fleet.GenerateError
	if errors.As(err, &generated) && !errors.Is(err, fault.ErrUnavailable) {
		err = nil // the check reports it: the node would have no spec
	}
	if err := stopped(cmd.Context(), facts.Name, err); err != nil {
		return err
	}
	rep, err := fleet.Check(cmd.Context(), root, facts, inv, fleet.CheckOptions{
		Manifests: o.manifests, Arch: o.arch, Metrics: nodeprep.MetricLabels, Generated: generated,
		Plan: func(ctx context.Context, cfg config.Config, inv *gpu.Inventory) (*fleet.Planned, error) {
			up, err := nodeprep.UpOptionsFromConfig(root, cfg, nodeprep.ConfigPlan{
				Inventory: inv, Arch: o.arch, K3sArgs: facts.K3s.Args, Unit: facts.Unit(), DataDir: facts.DataDir(), Log: env.Log(),
			})
			if err != nil {
				return nil, err
			}
			rep, err := nodeprep.Plan(ctx, root, up)
			if err != nil {
				return nil, err
			}
			return planned(rep, up), nil
		},
	})
	if err := stopped(cmd.Context(), facts.Name, err); err != nil {
		return err
	}
	if err := env.Print(rep, func(w io.Writer) error { return writeCheckNodeText(w, rep) }); err != nil {
		return fault.CantWrite(fmt.Errorf("printing the report: %w", err))
	}
	if !rep.OK {
		err := fault.CheckFailed(fmt.Errorf("%s: the node would not be ready, or a manifest does not fit it", facts.Name))
		if env.Output() == "text" {
			return app.Silent(err)
		}
		return err
	}
	return nil
}

// stopped is err, or, once ctx is done (SIGTERM or SIGINT), an error
// saying the node was not judged: a judgement cut short is no verdict.
func stopped(ctx context.Context, node string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: stopped before the judgement was done (%w): nothing judged", node, ctx.Err())
	}
	return err
}

// planned is up's plan as check-node reports it: each stage a check, the
// self-test said not to run, the cdi stage summarised by the patch
// planned (up's summary comes with the write, which a plan does not do).
func planned(rep *nodeprep.Report, up nodeprep.UpOptions) *fleet.Planned {
	p := &fleet.Planned{Join: rep.Join, CDI: rep.CDI, CDIOptions: up.CDI, DeviceNames: up.DeviceNames, K3s: up.Join}
	for _, st := range rep.Stages {
		res := fleet.Result{Name: st.Name, Status: st.Status, Summary: st.Summary}
		sev := "warning: "
		if st.Status == nodeprep.StatusFailed {
			sev = "error: "
		}
		for _, reason := range st.Reasons {
			res.Problems = append(res.Problems, sev+reason)
		}
		switch {
		case st.Status == nodeprep.StatusFailed:
			// On the node up writes nothing when a stage's plan fails; here
			// nothing is ever written, and what matters is that up stops.
			rest := strings.TrimSpace(strings.NewReplacer("invalid input: nothing written", "", "nothing written, ", "", ": nothing written", "").Replace(res.Summary))
			res.Summary = "up would stop here at boot"
			if rest != "" {
				res.Summary += ": " + rest
			}
		case st.Name == nodeprep.StageSelftest:
			res.Summary = "not run: no GPU"
		case st.Name == nodeprep.StageCDI && res.Summary == "" && rep.CDI != nil:
			res.Summary = fmt.Sprintf("%s patched in memory (%s) and checked", rep.CDI.Spec, app.Count(len(rep.CDI.Changes), "change"))
		}
		p.Stages = append(p.Stages, res)
	}
	return p
}

// writeCheckNodeText prints each check, ✓ ! ✗ or -, with its problems,
// then what was not judged and the verdict, every line prefixed with the
// node's name.
func writeCheckNodeText(w io.Writer, r *fleet.Report) error {
	var b strings.Builder
	p := func(format string, args ...any) {
		fmt.Fprintf(&b, "%s: "+format+"\n", append([]any{r.Node}, args...)...)
	}
	p("simulated GPUs (%s): no real driver was used", r.Simulated)
	problems := 0
	for _, c := range r.Checks {
		mark := map[string]string{fleet.StatusOK: "✓", fleet.StatusWarning: "!", fleet.StatusFailed: "✗", fleet.StatusSkipped: "-"}[c.Status]
		p("%s %-14s %s", mark, c.Name, c.Summary)
		for _, pr := range c.Problems {
			if strings.HasPrefix(pr, "error:") {
				problems++
			}
			p("    %s", pr)
		}
	}
	for _, n := range r.NotJudged {
		p("%s", n)
	}
	if r.OK {
		p("ok: the node would be ready and the manifests fit it")
	} else {
		p("FAILED: %s", app.Count(problems, "problem"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
