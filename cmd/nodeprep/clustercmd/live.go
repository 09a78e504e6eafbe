package clustercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

// liveTimeout bounds reading a cluster: ten lists, each in pages.
const liveTimeout = 60 * time.Second

// runLive is `cluster check --kubeconfig FILE`: the live objects and Nodes.
func (o *clusterCheckOptions) runLive(cmd *cobra.Command, env *app.Env) error {
	pool, err := o.pool(env, cmd.Flags(), "checking the cluster")
	if err != nil {
		return err
	}
	// A path on this machine, not under --root: the kubeconfig names the
	// cluster, not the node. A FIFO, a device (/dev/zero) or a file over
	// the limit is refused without blocking, as malformed input (exit 65).
	api, err := kubenode.LoadAPI(bounded.ReadFile, o.kubeconfig)
	if err != nil {
		return err
	}
	defer api.Close()
	for _, w := range api.Warnings() {
		env.Log().Warn(w)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), liveTimeout)
	defer cancel()
	live, err := cluster.ReadLive(ctx, api, pool.Label)
	if err != nil {
		return fault.Unavailable(fmt.Errorf("cluster check --kubeconfig %s: %w", o.kubeconfig, err))
	}
	for _, m := range live.Missing {
		env.Log().Info("the cluster does not serve this API: not judged", "api", m)
	}
	nodes := live.Nodes
	if nodes == nil {
		nodes = []cluster.Node{}
	}
	rep := cluster.Check(live.Objects, live.Skipped, cluster.CheckOptions{Pool: pool, Metrics: nodeprep.MetricLabels, Nodes: nodes, Cluster: true})
	if err := env.Print(rep, func(w io.Writer) error { return writeClusterText(w, rep) }); err != nil {
		return fault.CantWrite(fmt.Errorf("printing the report: %w", err))
	}
	if !rep.OK {
		return app.Silent(fault.CheckFailed(errors.New("cluster check: the cluster does not match the nodes' contract")))
	}
	return nil
}
