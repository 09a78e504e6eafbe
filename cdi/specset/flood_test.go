package specset_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// junkFlood writes n *.json files the CDI library refuses (no vendor in
// their kind) beside the generated spec of nixos-h200, as a broken
// generator loop leaves them in /var/run/cdi.
func junkFlood(tb testing.TB, n int) *hostfs.Root {
	tb.Helper()
	root := testkit.HostTree(tb, "nixos-h200")
	dir, err := root.Path("/var/run/cdi")
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("junk-%06d.json", i)), []byte(`{"cdiVersion":"0.5.0","kind":"junk"}`), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

// TestJunkFloodIsCounted: however many spec files the CDI library refuses,
// the view, the check and the patch plan list the first cdi.MaxPerCode of
// them in full, in path order, and one more finding counts the rest
// (Omitted, and in its message), so what they print and what the status
// file keeps stays small; Errors and Total still count every one.
func TestJunkFloodIsCounted(t *testing.T) {
	t.Parallel()
	const n = 1200
	root := junkFlood(t, n)
	opts := h200Options()
	opts.Spec = "/var/run/cdi/nvidia-container-toolkit.json"
	v, err := specset.Load(root, nil, opts.Spec)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := specset.PlanPatch(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	check, err := specset.Check(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	for name, fs := range map[string]cdi.Findings{"view": v.Findings, "plan": plan.Result.Findings, "check": check.Findings} {
		var listed []string
		var summary *cdi.Finding
		for i, f := range fs {
			if f.Code != cdi.CodeInvalidSpec {
				continue
			}
			if f.Omitted > 0 {
				if summary != nil {
					t.Errorf("%s: two findings count the ones left out", name)
				}
				summary = &fs[i]
				continue
			}
			listed = append(listed, f.Message)
		}
		if len(listed) != cdi.MaxPerCode {
			t.Fatalf("%s: %d invalid-spec findings listed, want %d", name, len(listed), cdi.MaxPerCode)
		}
		for i, m := range listed {
			if want := fmt.Sprintf("/var/run/cdi/junk-%06d.json", i); !strings.Contains(m, want+",") {
				t.Errorf("%s: invalid-spec finding %d is %q, want it about %s (path order)", name, i, m, want)
			}
		}
		left := n - cdi.MaxPerCode
		if summary == nil || summary.Omitted != left || summary.Severity != cdi.SeverityWarning ||
			!strings.Contains(summary.Message, fmt.Sprintf("and %d,%03d more spec files the CDI library refuses", left/1000, left%1000)) {
			t.Errorf("%s: the finding for those left out is %+v, want one counting %d", name, summary, left)
		}
		if got := fs.Total() - fs.Errors(); got < n {
			t.Errorf("%s: Total-Errors = %d, want every one of the %d refused files counted", name, got, n)
		}
		data, err := json.Marshal(fs)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 64<<10 {
			t.Errorf("%s: the findings encode to %d bytes for %d junk files, want them bounded (< 64 KiB)", name, len(data), n)
		}
	}
}

// BenchmarkPlanPatchJunkFlood is up's plan of the runtime's view with
// 36,000 junk spec files beside the generated spec (the field report's
// flood), and the size of its findings as JSON.
func BenchmarkPlanPatchJunkFlood(b *testing.B) {
	root := junkFlood(b, 36000)
	opts := h200Options()
	opts.Spec = "/var/run/cdi/nvidia-container-toolkit.json"
	b.ReportAllocs()
	var size int
	for b.Loop() {
		plan, err := specset.PlanPatch(root, opts)
		if err != nil {
			b.Fatal(err)
		}
		data, err := json.Marshal(plan.Result)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "result-bytes")
}
