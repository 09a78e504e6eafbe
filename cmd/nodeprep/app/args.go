package app

import (
	"fmt"
	"reflect"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// noArgs is the Args of a command that takes no argument: a usage error
// (exit 2) saying so, and naming the flag an argument was perhaps meant
// to be ("cdi patch dry-run": --dry-run). cobra.NoArgs says `unknown
// command "x" for "nodeprep cdi check"`, which reads as a mistyped
// subcommand of a command that has none.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := ""
	if f := cmd.Flags().Lookup(args[0]); f != nil {
		hint = fmt.Sprintf("; did you mean --%s?", f.Name)
	}
	return fault.Usage(fmt.Errorf("%s takes no arguments, got %q%s (see %s --help)", cmd.CommandPath(), args[0], hint, cmd.CommandPath()))
}

// guardLeaves gives every command under root that cobra made to take no
// argument (cobra.NoArgs: its completion bash|zsh|fish|powershell) nodeprep's
// noArgs, so that every command without subcommands answers an argument
// the same way. Call it once every command is in the tree.
func guardLeaves(root *cobra.Command) {
	for _, c := range root.Commands() {
		if !c.HasSubCommands() && c.Args != nil && reflect.ValueOf(c.Args).Pointer() == reflect.ValueOf(cobra.NoArgs).Pointer() {
			c.Args = noArgs
		}
		guardLeaves(c)
	}
}
