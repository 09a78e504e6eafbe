package app

import "github.com/spf13/cobra"

// addCommands adds the capability commands to root. Each lives in its own
// file with its options struct and constructor.
func addCommands(root *cobra.Command, g *globals) {
	root.AddCommand(
		newInspectCommand(g),   // inspect.go
		newJoinCommand(g),      // join.go
		newSelftestCommand(g),  // selftest.go
		newProbeCommand(g),     // selftest.go: hidden child of the self-test
		newInventoryCommand(g), // inventory.go: hidden NVML child
		newUpCommand(g),        // up.go
		newClusterStub(),       // clusterstub.go: runs nodeprep-cluster
		newHealthCommand(g),    // health.go
		newStatusCommand(g),    // status.go: reads the status file only
	)
}
