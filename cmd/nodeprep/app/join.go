package app

import "github.com/spf13/cobra"

// STUB: replaced by the issue that builds this command.
func newJoinCommand(g *globals) *cobra.Command { return &cobra.Command{Use: "join", Hidden: true} }
