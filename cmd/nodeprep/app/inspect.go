package app

import "github.com/spf13/cobra"

// STUB: replaced by the issue that builds this command.
func newInspectCommand(g *globals) *cobra.Command { return &cobra.Command{Use: "inspect", Hidden: true} }
