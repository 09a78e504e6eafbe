package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInventoryLibraryFromConfig checks that nvml.library in the config file
// names the library and --nvml-lib overrides it.
func TestInventoryLibraryFromConfig(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("nvml:\n  library: /from-config/libnvidia-ml.so.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		want, not string
	}{
		{"config", []string{"inspect", "--config", cfg}, "/from-config/libnvidia-ml.so.1", "/from-flag/"},
		{"flag wins", []string{"inspect", "--config", cfg, "--nvml-lib", "/from-flag/libnvidia-ml.so.1"}, "/from-flag/libnvidia-ml.so.1", "/from-config/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := inspectRun(t, tt.args...)
			if code != ExitUnavailable || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, tt.not) {
				t.Errorf("exit %d, stderr %q; want %d naming %s", code, stderr, ExitUnavailable, tt.want)
			}
		})
	}
}
