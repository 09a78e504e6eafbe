package app

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func addWaitFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "wait", "0s", "how long to wait for another nodeprep's lock (e.g. 30s); 0 fails at once with exit 75")
}

// lock takes the host lock, waiting --wait (or the config's wait).
func lock(ctx context.Context, g *globals, cmd *cobra.Command, wait string) (func() error, error) {
	d := g.cfg.Wait
	if cmd.Flags().Changed("wait") {
		var err error
		if d, err = time.ParseDuration(wait); err != nil || d < 0 {
			return nil, fault.Usage(fmt.Errorf("--wait %q: want a duration of 0 or more, such as 30s", wait))
		}
	}
	return g.host.Lock(ctx, d)
}
