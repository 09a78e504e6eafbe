package app_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
	"github.com/nodeprep/nodeprep/cmd/nodeprep/clustercmd"
	"github.com/nodeprep/nodeprep/cmd/nodeprep/nodecmd"
)

// groups lists every command of root that only groups others, as the
// words after "nodeprep" ("cdi", "cluster").
func groups(root *cobra.Command) [][]string {
	var out [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			p := append(slices.Clone(path), sub.Name())
			if sub.HasSubCommands() {
				out = append(out, p)
			}
			walk(sub, p)
		}
	}
	walk(root, nil)
	return out
}

// TestGroupUnknownCommand: every group command, in nodeprep-cluster's
// tree (nodeprep's commands, the cluster commands and the hidden
// node-report), refuses a mistyped command as the root does: "unknown
// command X for Y" with cobra's "Did you mean this?" list, exit 2, nothing
// on stdout. Before, `nodeprep cdi pach` printed cdi's help and exited 0.
// A group run bare prints its help and exits 0.
func TestGroupUnknownCommand(t *testing.T) {
	t.Parallel()
	exts := []app.Extension{clustercmd.New, nodecmd.New}
	all := groups(app.NewRootCommand(app.IOStreams{}, exts...))
	var names []string
	for _, g := range all {
		names = append(names, strings.Join(g, " "))
	}
	for _, want := range []string{"cdi", "cluster", "completion"} {
		if !slices.Contains(names, want) {
			t.Errorf("no group %q among %q", want, names)
		}
	}
	run := func(args ...string) (stdout, stderr string, code int) {
		var out, errOut bytes.Buffer
		err := app.Run(args, app.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, exts...)
		code = app.Report(&errOut, err)
		return out.String(), errOut.String(), code
	}
	for _, group := range all {
		path := "nodeprep " + strings.Join(group, " ")
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			root := app.NewRootCommand(app.IOStreams{}, exts...)
			c, _, err := root.Find(group)
			if err != nil {
				t.Fatal(err)
			}
			var meant string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					meant = sub.Name()
					break
				}
			}
			typo := meant[:len(meant)-1] // "patc", "rende", "bas"
			tests := []struct {
				name string
				args []string
				want string // stderr
			}{
				{"close", append(slices.Clone(group), typo),
					"nodeprep: error: unknown command \"" + typo + "\" for \"" + path + "\"\n\nDid you mean this?\n\t" + meant + "\n"},
				{"after a global flag", append(append(slices.Clone(group), "--root", "/"), typo),
					"nodeprep: error: unknown command \"" + typo + "\" for \"" + path + "\"\n\nDid you mean this?\n\t" + meant + "\n"},
				{"far", append(slices.Clone(group), "zzzzzzzz"),
					"nodeprep: error: unknown command \"zzzzzzzz\" for \"" + path + "\"\n"},
			}
			for _, tt := range tests {
				stdout, stderr, code := run(tt.args...)
				if code != app.ExitUsage || stdout != "" {
					t.Errorf("%s %q: exit %d, stdout %q; want exit %d and no output", tt.name, tt.args, code, stdout, app.ExitUsage)
				}
				if !strings.HasPrefix(stderr, tt.want) {
					t.Errorf("%s %q: stderr\n %q\nwant it to start\n %q", tt.name, tt.args, stderr, tt.want)
				}
			}
			stdout, stderr, code := run(group...)
			if code != app.ExitOK || !strings.Contains(stdout, "Available Commands:") || stderr != "" {
				t.Errorf("bare %s: exit %d, stderr %q, stdout:\n%s\nwant its help and exit 0", path, code, stderr, stdout)
			}
		})
	}
}

// TestLeafTakesNoArguments: every command without subcommands whose usage
// names no argument, in nodeprep-cluster's tree (hidden ones and cobra's
// completion commands included), answers an argument with a usage error
// that says it takes none (exit 2, nothing on stdout); cobra.NoArgs said
// `unknown command "extra-arg" for "nodeprep cdi check"`, as if cdi check
// had subcommands. An argument that is a flag's name gets the flag.
func TestLeafTakesNoArguments(t *testing.T) {
	t.Parallel()
	exts := []app.Extension{clustercmd.New, nodecmd.New}
	var leaves [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			p := append(slices.Clone(path), sub.Name())
			switch {
			case sub.HasSubCommands():
				walk(sub, p)
			case sub.Runnable() && !sub.DisableFlagParsing && len(strings.Fields(sub.Use)) == 1:
				leaves = append(leaves, p)
			}
		}
	}
	walk(app.NewRootCommand(app.IOStreams{}, exts...), nil)
	var names []string
	for _, l := range leaves {
		names = append(names, strings.Join(l, " "))
	}
	t.Logf("%d commands take no argument: %q", len(names), names)
	for _, want := range []string{"version", "status", "cdi check", "cdi patch", "cdi watch", "up", "health", "cluster render", "completion bash", "node-report"} {
		if !slices.Contains(names, want) {
			t.Errorf("no command %q among %q", want, names)
		}
	}
	run := func(args ...string) (stdout, stderr string, code int) {
		var out, errOut bytes.Buffer
		err := app.Run(args, app.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, exts...)
		code = app.Report(&errOut, err)
		return out.String(), errOut.String(), code
	}
	for _, leaf := range leaves {
		path := "nodeprep " + strings.Join(leaf, " ")
		stdout, stderr, code := run(append(slices.Clone(leaf), "extra-arg")...)
		want := "nodeprep: error: " + path + ` takes no arguments, got "extra-arg" (see ` + path + " --help)\n"
		if code != app.ExitUsage || stdout != "" || stderr != want {
			t.Errorf("%s extra-arg: exit %d, stdout %q, stderr\n %q\nwant exit %d and\n %q", path, code, stdout, stderr, app.ExitUsage, want)
		}
	}
	if _, stderr, code := run("cdi", "patch", "dry-run"); code != app.ExitUsage || !strings.Contains(stderr, `got "dry-run"; did you mean --dry-run?`) {
		t.Errorf("cdi patch dry-run: exit %d, stderr %q; want the flag named", code, stderr)
	}
}
