package app
import "github.com/spf13/cobra"
func newCDICommand(g *globals) *cobra.Command { return &cobra.Command{Use: "cdi"} }
