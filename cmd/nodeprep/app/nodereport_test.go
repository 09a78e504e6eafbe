package app

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestLogText: node-report's output goes into health's log line whole
// when short, and as its first maxLogText bytes (whole runes) with how
// much was left out when an API server's error body made it megabytes.
func TestLogText(t *testing.T) {
	t.Parallel()
	if got := logText("  nodeprep: error: GET /api/v1/nodes/gpu-1: 403 Forbidden\n"); got != "nodeprep: error: GET /api/v1/nodes/gpu-1: 403 Forbidden" {
		t.Errorf("short output: %q", got)
	}
	for _, s := range []string{strings.Repeat("x", 4<<20), strings.Repeat("é", 2<<20)} {
		got := logText(s)
		if len(got) > maxLogText+40 || !utf8.ValidString(got) || !strings.HasSuffix(got, " bytes more)") {
			t.Errorf("%d bytes of output: %d bytes logged, want at most %d, whole runes, saying how much was cut: %.80q…%q", len(s), len(got), maxLogText+40, got, got[len(got)-30:])
		}
	}
}
