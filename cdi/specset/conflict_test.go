package specset

import (
	"strings"
	"testing"
)

// FuzzConflictFindings: every library error gives a finding, one per pair
// of files, and a form this version does not know is passed on as it is.
func FuzzConflictFindings(f *testing.F) {
	f.Add(`conflicting device "nvidia.com/gpu=0" (specs "/a.json", "/b.yaml")`, `conflicting device "nvidia.com/gpu=1" (specs "/b.yaml", "/a.json")`)
	f.Add(`conflicting device "x" (specs "", "")`, "something else")
	f.Fuzz(func(t *testing.T, a, b string) {
		fs := conflictFindings([]string{a, b})
		if len(fs) == 0 || len(fs) > 2 {
			t.Fatalf("%d findings for two errors", len(fs))
		}
		for _, e := range []string{a, b} {
			if conflictPattern().MatchString(e) {
				continue
			}
			found := false
			for _, f := range fs {
				found = found || strings.HasSuffix(f.Message, e)
			}
			if !found {
				t.Fatalf("unknown form %q dropped: %v", e, fs)
			}
		}
	})
}
