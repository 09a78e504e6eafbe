package app

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// complete runs cobra's hidden __complete command, as the shell scripts of
// `nodeprep completion` do, and returns the candidates and the directive.
func complete(t *testing.T, args ...string) ([]string, cobra.ShellCompDirective) {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
	if code != ExitOK {
		t.Fatalf("__complete %q: exit %d: %s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	var d int
	for _, c := range strings.TrimPrefix(last, ":") {
		d = d*10 + int(c-'0')
	}
	return lines[:len(lines)-1], cobra.ShellCompDirective(d)
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args      []string
		want      []string
		directive cobra.ShellCompDirective
	}{
		{[]string{"inspect", "--simulate", ""}, []string{"dgx-a100", "dgx-b200", "dgx-h100", "dgx-h200"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"up", "--simulate", "dgx-h"}, []string{"dgx-a100", "dgx-b200", "dgx-h100", "dgx-h200"}, cobra.ShellCompDirectiveNoFileComp}, // the shell filters by prefix
		{[]string{"-o", ""}, []string{"text", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"inspect", "--output", ""}, []string{"text", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"cdi", "check", "--device-names", ""}, []string{"uuid", "index"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"up", "--device-names", "uuid,"}, []string{"uuid,index"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"up", "--on-selftest-failure", ""}, []string{"block", "taint"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"join", "--mig-strategy", ""}, []string{"none", "single", "mixed"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"cdi", "patch", "--arch", ""}, []string{"amd64", "arm64"}, cobra.ShellCompDirectiveNoFileComp},
		{[]string{"cdi", "patch", "--spec", ""}, []string{"json", "yaml"}, cobra.ShellCompDirectiveFilterFileExt},
		{[]string{"--config", ""}, []string{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt},
		{[]string{"up", "--metrics-file", ""}, []string{"prom"}, cobra.ShellCompDirectiveFilterFileExt},
		{[]string{"inspect", "--nvml-lib", ""}, nil, cobra.ShellCompDirectiveDefault},
		{[]string{"--root", ""}, nil, cobra.ShellCompDirectiveFilterDirs},
		{[]string{"cdi", "patch", "--driver-root", ""}, nil, cobra.ShellCompDirectiveFilterDirs},
		{[]string{"selftest", "--rootfs", ""}, nil, cobra.ShellCompDirectiveFilterDirs},
		{[]string{"inspect", ""}, nil, cobra.ShellCompDirectiveNoFileComp}, // no arguments: no file names
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			got, d := complete(t, tt.args...)
			if strings.Join(got, " ") != strings.Join(tt.want, " ") || d != tt.directive {
				t.Errorf("candidates %q directive %d, want %q directive %d", got, d, tt.want, tt.directive)
			}
		})
	}
}

// TestCompletionScripts: `nodeprep completion SHELL` prints a script for
// each shell package.nix installs.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{"bash": "__start_nodeprep", "zsh": "#compdef nodeprep", "fish": "complete -c nodeprep"} {
		stdout, _, code := runCLI(t, "completion", shell)
		if code != ExitOK || !strings.Contains(stdout, marker) {
			t.Errorf("completion %s: exit %d, no %q", shell, code, marker)
		}
	}
}
