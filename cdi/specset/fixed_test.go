package specset_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestCheckPatched: cdi check's CheckPatched marks the findings the patch
// fixes, and only those. Where the patch writes (held 0), the tree is then
// patched for real and checked again: what went is exactly what was
// marked. Where an error the patch does not fix holds it back (held > 0),
// the patch writes nothing. The walkthrough's tree (nixos-h200) has 11
// findings, all fixed.
func TestCheckPatched(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario string
		specDirs []string // the runtime's directories; nil: the defaults
		driver   string   // the driver root; "": /run/opengl-driver
		fixed    int
		held     int
		notFixed []string // codes of the findings not fixed, in output order
	}{
		{scenario: "nixos-h200", fixed: 11},
		{scenario: "broken-low-version", fixed: 12}, // cdi-version-too-low too: the patch raises it
		{scenario: "no-all-device", fixed: 11, notFixed: []string{cdi.CodeMissingAllDevice}},
		{scenario: "stale-etc-cdi", fixed: 22, notFixed: []string{cdi.CodeShadowedDevice}},
		{scenario: "plugin-kind", fixed: 21, notFixed: []string{cdi.CodePluginSpec}},
		{scenario: "fhs-ubuntu", driver: "/usr", notFixed: []string{cdi.CodeMissingDevice, cdi.CodeAllDevicePartial, cdi.CodeMissingGlvnd}},
		// The named spec in none of the runtime's directories: re-checked
		// from its file (cdi.CheckPatchedFile), spec-not-read stays.
		{scenario: "nixos-h200", specDirs: []string{"/etc/cdi"}, fixed: 11, notFixed: []string{cdi.CodeSpecNotRead}},
		// Held back: an error the patch does not fix, in the spec or the view.
		{scenario: "broken-no-icd", fixed: 9, held: 9, notFixed: []string{cdi.CodeNoICDOnHost}},
		{scenario: "broken-empty-device", fixed: 11, held: 11, notFixed: []string{cdi.CodeDeviceNoEdits}},
		{scenario: "dup-spec-copy", fixed: 22, held: 22, notFixed: []string{cdi.CodeConflictingSpecs}},
	}
	for _, tt := range tests {
		t.Run(tt.scenario+fmtDirs(tt.specDirs), func(t *testing.T) {
			t.Parallel()
			root := testkit.HostTree(t, tt.scenario)
			opts := h200Options()
			opts.SpecDirs = tt.specDirs
			if tt.driver != "" {
				opts.Discover.DriverRoot = tt.driver
			}
			res, held, err := specset.CheckPatched(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := specset.Check(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := codeMessages(res.Findings), codeMessages(plain.Findings); !slices.Equal(got, want) {
				t.Fatalf("CheckPatched's findings are not Check's:\n%q\nwant\n%q", got, want)
			}
			var fixed cdi.Findings
			var notFixed []string
			for _, f := range res.Findings {
				if f.FixedByPatch {
					fixed = append(fixed, f)
				} else if !slices.Contains(notFixed, f.Code) {
					notFixed = append(notFixed, f.Code)
				}
			}
			if len(fixed) != tt.fixed || held != tt.held || !slices.Equal(notFixed, tt.notFixed) {
				t.Fatalf("%d fixed, %d held, not fixed %q; want %d, %d, %q", len(fixed), held, notFixed, tt.fixed, tt.held, tt.notFixed)
			}

			before := snapshot(t, root)
			patch, err := specset.Patch(root, opts, false)
			if tt.held > 0 {
				if err == nil && patch.Written {
					t.Errorf("held back, yet the patch wrote %s", patch.Spec)
				}
				if after := snapshot(t, root); !maps.Equal(before, after) {
					t.Errorf("held back, yet the patch changed the tree")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			again, err := specset.Check(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			left := map[string]int{}
			for _, k := range codeMessages(again.Findings) {
				left[k]++
			}
			for _, f := range res.Findings {
				k := f.Code + " " + f.Message
				switch {
				case f.FixedByPatch && left[k] > 0:
					t.Errorf("marked fixed, still there after the patch: %s", k)
				case !f.FixedByPatch && left[k] == 0:
					t.Errorf("not marked fixed, gone after the patch: %s", k)
				}
				left[k]--
			}
		})
	}
}

func fmtDirs(dirs []string) string {
	if dirs == nil {
		return ""
	}
	return ", spec dir " + dirs[0]
}

func codeMessages(fs cdi.Findings) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code+" "+f.Message)
	}
	return out
}
