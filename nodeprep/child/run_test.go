package child

import (
	"context"
	"testing"
	"time"
)

// TestTimeoutPerReport: a child that reports several probes in turn has
// the whole timeout for each, counted from the report before it, and is
// still killed when one of them takes longer. The child is a shell
// writing on the report pipe.
func TestTimeoutPerReport(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	tests := []struct {
		name    string
		script  string
		ending  Ending
		reports int
	}{
		// Each report comes 1.2 s after the one before: 3.6 s in all,
		// longer than the timeout, but each within it.
		{"each report within the timeout", "for i in 1 2 3; do sleep 1.2; echo report $i >&3; done; sleep 60", EndReported, 3},
		// The second report never comes: killed the timeout after the first.
		{"a stage that hangs", "echo report 1 >&3; sleep 60", EndTimeout, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := Run(context.Background(), Spec{Path: "/bin/sh", Args: []string{"-c", tc.script}, Timeout: timeout, Reports: 3, Grace: -1})
			if res.Ending != tc.ending || len(res.Reports) != tc.reports {
				t.Fatalf("ending %s with %d reports (%s), want %s with %d", res.Ending, len(res.Reports), res.Duration, tc.ending, tc.reports)
			}
			if tc.ending == EndTimeout && (res.Duration < timeout || res.Duration > 20*timeout) {
				t.Errorf("killed after %s, want the timeout (%s) after the first report", res.Duration, timeout)
			}
		})
	}
}
