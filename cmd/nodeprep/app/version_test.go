package app

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestVersion: --version and `version` print the same line; -o json has
// the fields.
func TestVersion(t *testing.T) {
	t.Parallel()
	flag, _, code := runCLI(t, "--version")
	if code != ExitOK || !strings.HasPrefix(flag, "nodeprep ") || strings.Count(flag, "\n") != 1 {
		t.Fatalf("--version: exit %d, %q", code, flag)
	}
	cmd, _, _ := runCLI(t, "version")
	if cmd != flag {
		t.Errorf("version prints %q, --version %q", cmd, flag)
	}
	js, _, _ := runCLI(t, "version", "-o", "json")
	var v versionInfo
	if err := json.Unmarshal([]byte(js), &v); err != nil || v.Version == "" || v.GoVersion == "" || v.Platform == "" {
		t.Errorf("version -o json = %q (%v)", js, err)
	}
}
