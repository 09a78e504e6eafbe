package clustercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

// liveTimeout bounds reading a cluster: nine list requests.
const liveTimeout = 60 * time.Second

// runLive is `cluster check --kubeconfig FILE`: the live objects and Nodes.
func (o *clusterCheckOptions) runLive(cmd *cobra.Command, env *app.Env) error {
	pool, err := o.pool(env, cmd.Flags(), "checking the cluster")
	if err != nil {
		return err
	}
	api, err := loadAPI(o.kubeconfig)
	if err != nil {
		return err
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), liveTimeout)
	defer cancel()
	live, err := cluster.ReadLive(ctx, api)
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
	rep := cluster.Check(live.Objects, live.Skipped, cluster.CheckOptions{Pool: pool, Metrics: nodeprep.MetricLabels, Nodes: nodes})
	if err := env.Print(rep, func(w io.Writer) error { return writeClusterText(w, rep) }); err != nil {
		return fault.CantWrite(fmt.Errorf("printing the report: %w", err))
	}
	if !rep.OK {
		return app.Silent(fault.CheckFailed(errors.New("cluster check: the cluster does not match the nodes' contract")))
	}
	return nil
}

// loadAPI reads a kubeconfig (a path on this machine, not under --root:
// it names the cluster, not the node) and the files it names, relative
// ones from its directory, each a regular file of at most
// bounded.MaxKubeconfig bytes: a FIFO, a device (/dev/zero) or a larger
// file is malformed input (exit 65), refused without blocking and before
// it is read; a file that cannot be read is unavailable (exit 69).
func loadAPI(file string) (*kubenode.API, error) {
	data, err := bounded.ReadFile(file, bounded.MaxKubeconfig)
	if err != nil {
		return nil, kubeconfigReadError(fmt.Errorf("reading kubeconfig: %w", err))
	}
	sel, err := kubenode.ParseAnyKubeconfig(data)
	if err != nil {
		return nil, fault.Malformed(fmt.Errorf("kubeconfig %s: %w", file, err))
	}
	cred, err := sel.Credential(func(what, ref string) ([]byte, error) {
		if !filepath.IsAbs(ref) {
			ref = filepath.Join(filepath.Dir(file), ref)
		}
		b, err := bounded.ReadFile(ref, bounded.MaxKubeconfig)
		if err != nil {
			return nil, kubeconfigReadError(fmt.Errorf("reading the %s that kubeconfig %s names: %w", what, file, err))
		}
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	api, err := kubenode.NewAPI(cred)
	if err != nil {
		return nil, fault.Malformed(fmt.Errorf("kubeconfig %s: %w", file, err))
	}
	return api, nil
}

// kubeconfigReadError marks an error of reading a kubeconfig or a file it
// names: what is not a regular file or is too large is malformed input,
// anything else unavailable.
func kubeconfigReadError(err error) error {
	if errors.Is(err, bounded.ErrNotRegular) || errors.Is(err, bounded.ErrTooLarge) {
		return fault.Malformed(err)
	}
	return fault.Unavailable(err)
}
