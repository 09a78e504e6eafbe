package app

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/config"
)

func addWaitFlag(cmd *cobra.Command, dst *time.Duration) {
	cmd.Flags().DurationVar(dst, "wait", 0, "how long to wait for another nodeprep's lock (e.g. 30s), at most "+config.ShortDuration(config.MaxWait)+"; 0 fails at once with exit 75")
}

// lock takes the host lock, waiting --wait (or the config file's wait);
// checkFlags has already refused a --wait out of 0 to config.MaxWait.
func lock(ctx context.Context, g *globals, cmd *cobra.Command, wait time.Duration) (func() error, error) {
	return g.host.Lock(ctx, flagOr(cmd.Flags(), "wait", wait, g.cfg.Wait))
}
