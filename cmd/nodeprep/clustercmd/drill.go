package clustercmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/drill"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

type clusterDrillOptions struct {
	poolFlags
	kubeconfig      string
	dryRun, run     bool
	restore         bool
	mode            string
	fallbackLabel   string
	namespace       string
	image           string
	gpus            int
	runtimeClass    string
	deadline        time.Duration
	reclaimDeadline time.Duration
	poll            time.Duration
	id              string
}

func newClusterDrillCommand(env *app.Env) *cobra.Command {
	o := &clusterDrillOptions{}
	cmd := &cobra.Command{
		Use:   "drill --kubeconfig FILE",
		Short: "Run the failover drill: take the on-prem GPU nodes away, measure the canary's move to the fallback and back",
		Long: `drill runs the quarterly failover drill against a live cluster. It names the
on-prem GPU nodes (the pool label, without the fallback label), starts a canary
GPU pod there, cordons the nodes (--mode cordon) or marks them
nodeprep.dev/gpu-ready=false (--mode not-gpu-ready), and measures each phase:
baseline (the canary runs on-prem), failover (it runs on a fallback node: the
RTO), return (the nodes given back, it runs on-prem again) and reclaim (the
fallback nodes the drill added are gone), and what the failover cost (nodes and
GPUs added).

By default it only prints the plan (--dry-run); --run acts. Every phase has a
deadline. On a failure, a missed deadline, SIGINT or SIGTERM it restores every
node it changed, deletes its canary, and says so. Everything it changes carries
its drill id (annotation nodeprep.dev/drill); it refuses to start while such
marks are present (exit 75), and --restore clears what an interrupted drill
left. Exit 0: the drill passed; 1: a phase failed or it was interrupted (the
cluster restored); 69: the API server failed.`,
		Args: app.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.runDrill(cmd, env) },
	}
	f := cmd.Flags()
	o.poolFlags.add(f)
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	f.BoolVar(&o.dryRun, "dry-run", true, "print the plan and change nothing")
	f.BoolVar(&o.run, "run", false, "run the drill (the same as --dry-run=false)")
	f.BoolVar(&o.restore, "restore", false, "restore the nodes and delete the canaries an interrupted drill left, then exit")
	f.StringVar(&o.mode, "mode", drill.ModeCordon, "how to take the on-prem nodes away: cordon, or not-gpu-ready (the label nodeprep health sets on a GPU fault)")
	f.StringVar(&o.fallbackLabel, "fallback-label", drill.LabelNodePool, "the label key every fallback node carries")
	f.StringVar(&o.namespace, "namespace", "default", "namespace of the canary pod")
	f.StringVar(&o.image, "image", "", "the canary's container image (it runs sleep infinity; required with --run)")
	f.IntVar(&o.gpus, "gpus", 1, "nvidia.com/gpu the canary requests")
	f.StringVar(&o.runtimeClass, "runtime-class", cluster.PatchedRuntimeClass, `the canary's runtimeClassName ("" for none)`)
	f.DurationVar(&o.deadline, "deadline", 10*time.Minute, "deadline of each of the baseline, failover and return phases")
	f.DurationVar(&o.reclaimDeadline, "reclaim-deadline", 20*time.Minute, "deadline of the reclaim phase (the NodePool's consolidateAfter and more)")
	f.DurationVar(&o.poll, "poll", time.Second, "how often to read the cluster")
	f.StringVar(&o.id, "id", "", "the drill id in its marks (default random)")
	return cmd
}

func (o *clusterDrillOptions) runDrill(cmd *cobra.Command, env *app.Env) error {
	fs := cmd.Flags()
	if o.kubeconfig == "" {
		return fault.Usage(errors.New("drill: --kubeconfig is required"))
	}
	if o.run && fs.Changed("dry-run") && o.dryRun {
		return fault.Usage(errors.New("drill: --run and --dry-run=true: choose one"))
	}
	act := o.run || !o.dryRun
	if o.deadline <= 0 || o.reclaimDeadline <= 0 || o.poll <= 0 {
		return fault.Usage(errors.New("drill: --deadline, --reclaim-deadline and --poll must be positive"))
	}
	api, err := kubenode.LoadAPI(bounded.ReadFile, o.kubeconfig)
	if err != nil {
		return err
	}
	defer api.Close()
	for _, w := range api.Warnings() {
		env.Log().Warn(w)
	}
	print := func(r *drill.Report) error {
		if err := env.Print(r, func(w io.Writer) error { return drill.WriteText(w, r) }); err != nil {
			return fault.CantWrite(fmt.Errorf("printing the report: %w", err))
		}
		return nil
	}
	if o.restore {
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
		defer cancel()
		r, err := drill.Restore(ctx, api)
		if r == nil { // the Nodes could not be listed: nothing was restored
			return err
		}
		if perr := print(r); perr != nil || err != nil {
			return errors.Join(err, perr)
		}
		return nil
	}
	pool, err := o.pool(env, fs, "running the drill")
	if err != nil {
		return err
	}
	if act && o.image == "" {
		return fault.Usage(errors.New("drill: --run needs --image, the canary's image"))
	}
	id := o.id
	if id == "" {
		b := make([]byte, 4)
		rand.Read(b) //nolint:errcheck // crypto/rand does not fail on Linux
		id = hex.EncodeToString(b)
	}
	var tols []drill.Toleration
	for _, t := range pool.Taints {
		ct := cluster.Toleration(t)
		tols = append(tols, drill.Toleration{Key: ct.Key, Operator: string(ct.Operator), Value: ct.Value, Effect: string(ct.Effect)})
	}
	image := o.image
	if image == "" {
		image = "(set --image)"
	}
	opts := drill.Options{
		ID: id, PoolKey: pool.Label.Key, PoolValue: pool.Label.Value, FallbackLabel: o.fallbackLabel,
		Mode: o.mode, Namespace: o.namespace, Image: image, GPUs: o.gpus, Tolerations: tols,
		RuntimeClass: o.runtimeClass, Deadline: o.deadline, ReclaimDeadline: o.reclaimDeadline, Poll: o.poll,
		Log: func(msg string) { env.Log().Info(msg, "drill", id) },
	}
	// SIGINT and SIGTERM end the drill's context: Run restores and returns.
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	plan, err := drill.Plan(pctx, api, opts)
	cancel()
	if err != nil {
		return err
	}
	if !act {
		return print(plan)
	}
	r, err := drill.Run(ctx, api, opts, plan)
	if perr := print(r); perr != nil {
		return errors.Join(err, perr)
	}
	if err != nil {
		return app.Silent(err)
	}
	return nil
}
