package specset

import (
	"slices"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestMarkFixed: a finding is fixed when the patched spec has no finding
// of its code and message; one whose message the patch changed (same
// code, a finding of after that matches none of before) is not taken for
// a fix, one for one, in order.
func TestMarkFixed(t *testing.T) {
	t.Parallel()
	f := func(code, msg string) cdi.Finding {
		return cdi.Finding{Severity: cdi.SeverityError, Code: code, Message: msg}
	}
	tests := []struct {
		name          string
		before, after cdi.Findings
		want          []bool
	}{
		{"none", nil, nil, []bool{}},
		{"all gone", cdi.Findings{f("a", "1"), f("b", "2")}, nil, []bool{true, true}},
		{"all kept", cdi.Findings{f("a", "1"), f("b", "2")}, cdi.Findings{f("b", "2"), f("a", "1")}, []bool{false, false}},
		{"one of two", cdi.Findings{f("a", "1"), f("b", "2")}, cdi.Findings{f("b", "2")}, []bool{true, false}},
		{"the same twice, once left", cdi.Findings{f("a", "1"), f("a", "1")}, cdi.Findings{f("a", "1")}, []bool{false, true}},
		{"message changed", cdi.Findings{f("a", "2 of 4")}, cdi.Findings{f("a", "3 of 4")}, []bool{false}},
		{"two of a code, one changed", cdi.Findings{f("a", "x"), f("a", "y")}, cdi.Findings{f("a", "z")}, []bool{false, true}},
		{"a new finding of another code", cdi.Findings{f("a", "1")}, cdi.Findings{f("b", "1")}, []bool{true}},
	}
	for _, tt := range tests {
		if got := markFixed(tt.before, tt.after); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
