package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandsDocExamples: the `cdi check` and `cdi patch` examples in
// docs/commands.md are what the binary prints on the walkthrough's tree
// (nixos-h200, --simulate dgx-h200): each line of an example is a line of
// the output, in order, and an example without "…" is the whole output.
// They had drifted (a missing-driver-library the tree does not have,
// "8 errors, 7 warnings" where it prints 7 and 4, a diff hunk at line
// 501 of a spec whose mounts end at line 1388).
func TestCommandsDocExamples(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string][]string{} // command line → the example's lines
	var cur string
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "$ nodeprep cdi check") || strings.HasPrefix(line, "$ nodeprep cdi patch"):
			cur = strings.TrimPrefix(line, "$ nodeprep ")
			examples[cur] = nil
		case cur != "" && line == "```":
			cur = ""
		case cur != "":
			examples[cur] = append(examples[cur], line)
		}
	}
	for _, want := range []string{"cdi check --simulate dgx-h200", "cdi patch --dry-run", "cdi patch --dry-run --diff"} {
		if _, ok := examples[want]; !ok {
			t.Errorf("docs/commands.md has no example of nodeprep %s", want)
		}
	}
	for command, lines := range examples {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			stdout, _, _ := runCLI(t, append([]string{"--root", hostCopy(t, "nixos-h200")}, strings.Fields(command)...)...)
			out := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			elided := false
			i := 0
			for _, l := range lines {
				if strings.TrimSpace(l) == "…" {
					elided = true
					continue
				}
				for i < len(out) && out[i] != l {
					if !elided {
						break
					}
					i++
				}
				if i == len(out) || out[i] != l {
					t.Fatalf("docs/commands.md's example line\n%s\nis not in the output (in order):\n%s", l, stdout)
				}
				i++
			}
			if !elided && i != len(out) {
				t.Errorf("the example stops before the output does:\n%s", stdout)
			}
		})
	}
}
