package app

import "testing"

// TestFlagSuggestions: a mistyped flag says, on its one error line, the
// flag meant (as cobra does for mistyped commands); a flag of another
// command names those commands; a flag far from every flag gets no guess.
// Every case is a usage error (exit 2) that prints nothing on stdout.
func TestFlagSuggestions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // the whole stderr line after "nodeprep: error: "
	}{
		{"transposed", []string{"inspect", "--simualte", "dgx-h200"},
			"unknown flag: --simualte (did you mean --simulate?)"},
		{"global flag", []string{"inspect", "--roo", "/"},
			"unknown flag: --roo (did you mean --root?)"},
		{"with =", []string{"up", "--allow-cpu-adaptor=true"},
			"unknown flag: --allow-cpu-adaptor (did you mean --allow-cpu-adapter?)"},
		{"case", []string{"selftest", "--Simulate", "dgx-h200"},
			"unknown flag: --Simulate (did you mean --simulate?)"},
		{"prefix", []string{"join", "--dry"},
			"unknown flag: --dry (did you mean --dry-run?)"},
		{"one dash", []string{"inspect", "-simulate", "dgx-h200"},
			`unknown shorthand flag: 's' in -simulate (did you mean --simulate?)`},
		{"another command's", []string{"inspect", "--allow-cpu-adapter"},
			"unknown flag: --allow-cpu-adapter (--allow-cpu-adapter is a flag of health, selftest and up)"},
		{"nothing close", []string{"inspect", "--frobnicate"},
			"unknown flag: --frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runCLI(t, tt.args...)
			if code != ExitUsage || stdout != "" {
				t.Errorf("exit %d, stdout %q; want exit %d and no output", code, stdout, ExitUsage)
			}
			if want := "nodeprep: error: " + tt.want + "\n"; stderr != want {
				t.Errorf("stderr\n %q\nwant\n %q", stderr, want)
			}
		})
	}
}

// TestClosestFlag pins the distance rule on cobra's own example names.
func TestClosestFlag(t *testing.T) {
	t.Parallel()
	root, _ := newRootCommand(IOStreams{})
	fs := root.PersistentFlags()
	for typed, want := range map[string]string{
		"output": "output", "ouptut": "output", "outptu": "output", "verbos": "verbose",
		"config": "config", "confgi": "config", "cfg": "", "x": "", "ro": "root",
	} {
		if got := closestFlag(fs, typed); got != want {
			t.Errorf("closestFlag(%q) = %q, want %q", typed, got, want)
		}
	}
}
