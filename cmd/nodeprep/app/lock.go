package app

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

func addWaitFlag(cmd *cobra.Command, dst *time.Duration) {
	cmd.Flags().DurationVar(dst, "wait", 0, "how long to wait for another nodeprep's lock (e.g. 30s); 0 fails at once with exit 75")
}

// lock takes the host lock, waiting --wait (or the config file's wait);
// checkFlags has already refused a negative --wait.
func lock(ctx context.Context, g *globals, cmd *cobra.Command, wait time.Duration) (func() error, error) {
	return g.host.Lock(ctx, flagOr(cmd.Flags(), "wait", wait, g.cfg.Wait))
}
