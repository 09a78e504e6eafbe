package cdi_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestGolden patches and checks every host tree and compares the patched
// spec and the findings with golden files.
func TestGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario string
		arch     string
		driver   string
		wantErr  bool // patch refuses (problems it cannot fix)
	}{
		{scenario: "nixos-h200", arch: "amd64", driver: "/run/opengl-driver"},
		{scenario: "nixos-gh200", arch: "arm64", driver: "/run/opengl-driver"},
		{scenario: "fhs-ubuntu", arch: "amd64", driver: "/usr"},
		{scenario: "broken-no-icd", arch: "amd64", driver: "/run/opengl-driver", wantErr: true},
		{scenario: "broken-dangling-icd", arch: "amd64", driver: "/run/opengl-driver", wantErr: true},
		{scenario: "broken-low-version", arch: "amd64", driver: "/run/opengl-driver"},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, tt.scenario)
			opts := cdi.FileOptions{Spec: specPath, Discover: cdi.DiscoverOptions{DriverRoot: tt.driver, Arch: tt.arch}}

			check, err := cdi.CheckFile(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.scenario+".check.txt", findingsText(check.Findings))

			before := readFile(t, root, specPath)
			res, err := cdi.PatchFile(root, opts, false)
			if err != nil {
				t.Fatal(err)
			}
			after := readFile(t, root, specPath)
			if got := res.Findings.Errors() > 0; got != tt.wantErr {
				t.Fatalf("patch error findings = %v, want %v: %v", got, tt.wantErr, res.Findings)
			}
			if tt.wantErr {
				if res.Written || !bytes.Equal(before, after) {
					t.Fatalf("patch with unfixable problems wrote the spec")
				}
				return
			}
			// check and patch count the same unit: each problem check
			// reports on a fixable tree, an error for an essential piece
			// or a warning for an optional one, is one change patch makes
			// (the CDI library's own invalid-spec verdict restates another
			// error).
			problems := 0
			for _, f := range check.Findings {
				switch {
				case f.Code == cdi.CodeInvalidSpec:
				case f.Severity == cdi.SeverityError:
					problems++
				case f.Code == cdi.CodeMissingLayer, f.Code == cdi.CodeMissingEGLPlatform,
					f.Code == cdi.CodeMissingGBM, f.Code == cdi.CodeUnresolvedLibrary:
					problems++ // an optional piece patch mounts
				}
			}
			if got, want := problems, len(res.Changes); got != want {
				t.Errorf("check found %d problems, patch made %d changes: want one change per problem\nfindings: %v\nchanges: %v", got, want, check.Findings, res.Changes)
			}
			golden(t, tt.scenario+".patched.json", after)
			if err := cdi.ValidateFile(mustPath(t, root, specPath)); err != nil {
				t.Fatalf("patched spec is invalid: %v", err)
			}
			// Idempotent: a second run changes no byte.
			res2, err := cdi.PatchFile(root, opts, false)
			if err != nil {
				t.Fatal(err)
			}
			if res2.Changed || res2.Written || len(res2.Changes) != 0 {
				t.Errorf("second patch changed something: %+v", res2.Changes)
			}
			if again := readFile(t, root, specPath); !bytes.Equal(after, again) {
				t.Errorf("second patch changed the file")
			}
			// And a patched spec passes check, but for host warnings.
			check2, err := cdi.CheckFile(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			if n := check2.Findings.Errors(); n != 0 {
				t.Errorf("check after patch: %d errors: %v", n, check2.Findings)
			}
		})
	}
}

func findingsText(fs cdi.Findings) []byte {
	var b bytes.Buffer
	for _, f := range fs {
		fmt.Fprintln(&b, f)
	}
	return b.Bytes()
}
