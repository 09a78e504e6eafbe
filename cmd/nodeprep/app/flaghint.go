package app

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// flagSuggestDistance is how far (Levenshtein edits) a mistyped flag may be
// from the one meant: cobra's default for command suggestions
// (Command.SuggestionsMinimumDistance), so flags and commands are forgiven
// alike.
const flagSuggestDistance = 2

// flagError is the root's FlagErrorFunc: every flag error is a usage error
// (exit 2), and an unknown flag says, on the same line, which flag was
// probably meant (flagHint).
func flagError(cmd *cobra.Command, err error) error {
	var missing *pflag.NotExistError
	if errors.As(err, &missing) {
		if hint := flagHint(cmd, missing); hint != "" {
			err = fmt.Errorf("%w (%s)", err, hint)
		}
	}
	return fault.Usage(err)
}

// flagHint names the flag an unknown one probably meant, as cobra does
// for a mistyped command (SuggestionsFor: edit distance at most 2, or a
// prefix): "did you mean --simulate?". A long flag written with one dash
// (-simulate) gets its two dashes; a flag this command lacks but others
// have names those commands. "" when nothing is close.
func flagHint(cmd *cobra.Command, missing *pflag.NotExistError) string {
	typed := missing.GetSpecifiedName()
	if group := missing.GetSpecifiedShortnames(); group != "" {
		// -simulate: pflag read shorthand flags s, i, m, …
		if f := cmd.Flags().Lookup(group); f != nil && !f.Hidden {
			return "did you mean --" + group + "?"
		}
		return ""
	}
	if meant := closestFlag(cmd.Flags(), typed); meant != "" {
		return "did you mean --" + meant + "?"
	}
	if others := commandsWithFlag(cmd.Root(), typed); len(others) > 0 {
		return fmt.Sprintf("--%s is a flag of %s", typed, joinWords(others))
	}
	return ""
}

// closestFlag returns the visible flag of fs nearest to typed: within
// flagSuggestDistance edits (case ignored) or starting with typed, the
// nearest and, among equals, the first by name; "" when none is.
func closestFlag(fs *pflag.FlagSet, typed string) string {
	typed = strings.ToLower(typed)
	best, bestD := "", flagSuggestDistance+1
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := levenshtein.ComputeDistance(typed, strings.ToLower(f.Name))
		if d > flagSuggestDistance && len(typed) >= 3 && strings.HasPrefix(f.Name, typed) {
			d = flagSuggestDistance
		}
		if d < bestD { // VisitAll goes by name: the first of equals stays

			best, bestD = f.Name, d
		}
	})
	return best
}

// commandsWithFlag lists the commands under root ("selftest", "cdi check")
// that have a visible flag of that name, sorted.
func commandsWithFlag(root *cobra.Command, name string) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden {
				continue
			}
			if f := sub.Flags().Lookup(name); f != nil && !f.Hidden {
				out = append(out, strings.TrimPrefix(sub.CommandPath(), root.Name()+" "))
			}
			walk(sub)
		}
	}
	walk(root)
	slices.Sort(out)
	return out
}

// joinWords joins ["a", "b", "c"] as "a, b and c".
func joinWords(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
