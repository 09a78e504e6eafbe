package app

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// guardGroups makes every command under root that only groups others
// (cdi, cluster, completion) refuse an argument that names none of them,
// as cobra makes the root refuse one: "unknown command "pach" for
// "nodeprep cdi"" with cobra's "Did you mean this?" list, a usage error
// (exit 2). Cobra itself checks subcommand names only at the root: a
// group without a Run of its own prints its help for any argument and
// succeeds, so `nodeprep cdi pach` exited 0 having done nothing. A group
// given no argument still prints its help and succeeds (docs/exit-codes.md).
// Call it once every command, extensions and cobra's completion command
// included, is in the tree; a stub that passes its arguments on
// (DisableFlagParsing) is left alone.
func guardGroups(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() && !c.DisableFlagParsing {
			c.Args = unknownSubcommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		guardGroups(c)
	}
}

// unknownSubcommand is the Args of a group command: no argument, or a
// usage error naming the first one and the commands it is close to.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fault.Usage(fmt.Errorf("unknown command %q for %q%s", args[0], cmd.CommandPath(), commandSuggestions(cmd, args[0])))
}

// commandSuggestions is cobra's list of cmd's commands close to typed
// (SuggestionsFor: within SuggestionsMinimumDistance edits, default 2, or
// a prefix), in the words cobra's root uses for a mistyped command
// ("\n\nDid you mean this?\n\tpatch\n"); "" when none is close.
func commandSuggestions(cmd *cobra.Command, typed string) string {
	if cmd.DisableSuggestions {
		return ""
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = flagSuggestDistance
	}
	suggestions := cmd.SuggestionsFor(typed)
	if len(suggestions) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("\n\nDid you mean this?\n")
	for _, s := range suggestions {
		fmt.Fprintf(&sb, "\t%v\n", s)
	}
	return sb.String()
}
