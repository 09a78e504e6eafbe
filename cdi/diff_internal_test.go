package cdi

import (
	"strings"
	"testing"

	udiff "github.com/aymanbagabas/go-udiff"
)

// TestBigDiffMatchesUdiff: for an edit in one region, the big-file diff is
// the diff go-udiff prints (so `cdi patch --dry-run` looks the same for a
// 50 MB spec).
func TestBigDiffMatchesUdiff(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 80000 {
		b.WriteString("    \"line-")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\",\n")
	}
	base := b.String()
	if len(base) <= bigDiff {
		t.Fatalf("base is %d bytes, want more than %d", len(base), bigDiff)
	}
	mid := strings.Index(base[len(base)/2:], "\n") + len(base)/2 + 1
	tests := map[string][2]string{
		"insert lines":      {base, base[:mid] + "  added one,\n  added two,\n" + base[mid:]},
		"change in a line":  {base, base[:mid] + "X" + base[mid:]},
		"remove a line":     {base, base[:mid] + base[mid+strings.Index(base[mid:], "\n")+1:]},
		"append at the end": {base, base + "tail\n"},
		"insert at the top": {base, "top\n" + base},
	}
	for name, tt := range tests {
		got := unifiedDiff("a", "b", []byte(tt[0]), []byte(tt[1]))
		want := udiff.Unified("a", "b", tt[0], tt[1])
		if got != want {
			t.Errorf("%s:\ngot\n%s\nwant\n%s", name, got, want)
		}
		if !strings.Contains(got, "@@ -") {
			t.Errorf("%s: no hunk in\n%s", name, got)
		}
	}
}
