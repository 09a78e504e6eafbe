package app

import (
	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// noArgs is cobra.NoArgs with the error marked as a usage error (exit 2).
func noArgs(cmd *cobra.Command, args []string) error {
	return fault.Usage(cobra.NoArgs(cmd, args))
}
