package cdi

import (
	"fmt"
	"slices"
	"testing"
)

func manyFindings(code string, sev Severity, n int) Findings {
	var fs Findings
	for i := range n {
		fs = append(fs, Finding{Severity: sev, Code: code, Message: fmt.Sprintf("%s %d", code, i)})
	}
	return fs
}

// TestCapped: at most max findings of a code in full, in order; the rest
// of a code become one finding where the first of them was, counting
// them (Omitted, and the message with thousands separated), one per
// severity. Capping again, or capping a list merged from capped
// lists, keeps one such finding per code with the sum; Errors and Total
// count every finding throughout.
func TestCapped(t *testing.T) {
	t.Parallel()
	under := append(manyFindings(CodeShadowedDevice, SeverityWarning, 3), manyFindings(CodeMissingICD, SeverityError, 3)...)
	if got := under.Capped(3); !slices.Equal(got, under) {
		t.Errorf("no code over the cap: got %v, want the list as it was", got)
	}

	flood := append(manyFindings(CodeInvalidSpec, SeverityWarning, 12345), manyFindings(CodeMissingICD, SeverityError, 2)...)
	flood[7000].Severity = SeverityError
	got := flood.Capped(3)
	want := Findings{flood[0], flood[1], flood[2],
		{Severity: SeverityWarning, Code: CodeInvalidSpec, Omitted: 12341, Message: "and 12,341 more spec files the CDI library refuses (the runtime skips each), not listed: a list keeps the first 3 of a kind"},
		{Severity: SeverityError, Code: CodeInvalidSpec, Omitted: 1, Message: "and 1 more spec files the CDI library refuses (the runtime skips each), not listed: a list keeps the first 3 of a kind"},
		flood[12345], flood[12346]}
	if !slices.Equal(got, want) {
		t.Errorf("Capped(3) =\n%v\nwant\n%v", got, want)
	}
	if got.Errors() != flood.Errors() || got.Total() != flood.Total() || got.Total() != 12347 {
		t.Errorf("Errors %d Total %d after, %d %d before: want the same", got.Errors(), got.Total(), flood.Errors(), flood.Total())
	}
	if again := got.Capped(3); !slices.Equal(again, got) {
		t.Errorf("capping again changed it:\n%v", again)
	}

	// Two capped lists merged, as the view's and a spec's are.
	other := manyFindings(CodeInvalidSpec, SeverityWarning, 5).Capped(2)
	merged := append(slices.Clone(got), other...).Capped(3)
	var sums []Finding
	for _, f := range merged {
		if f.Omitted > 0 {
			sums = append(sums, f)
		}
	}
	if len(sums) != 2 || sums[0].Omitted != 12341+2+3 || sums[1].Omitted != 1 || merged.Total() != got.Total()+5 {
		t.Errorf("merged and capped: %v, want one warning counting %d and the error", merged, 12341+2+3)
	}

	unknown := manyFindings("some-code", SeverityWarning, 1001).Capped(0)
	if len(unknown) != 1 || unknown[0].Message != "and 1,001 more some-code findings, not listed: a list keeps the first 0 of a kind" {
		t.Errorf("a code without a noun: %v", unknown)
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 7: "7", 999: "999", 1000: "1,000", 35980: "35,980", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
