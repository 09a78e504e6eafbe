package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// configFile writes content as a nodeprep config file in a temporary
// directory and returns its path, for --config.
func configFile(t *testing.T, content string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestInventoryLibraryFromConfig checks that nvml.library in the config file
// names the library and --nvml-lib overrides it.
func TestInventoryLibraryFromConfig(t *testing.T) {
	t.Parallel()
	cfg := configFile(t, "nvml:\n  library: /from-config/libnvidia-ml.so.1\n")
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

// TestInventoryTimeoutFromConfig: nvml.timeout bounds a hung NVML (a fake
// whose nvmlInit_v2 never returns) and --nvml-timeout overrides it; a
// non-positive flag is a usage error. Not parallel: it sets the fake's
// environment, which the NVML child inherits.
func TestInventoryTimeoutFromConfig(t *testing.T) {
	lib, _, err := fakedriver.Build(t.TempDir(), fakedriver.NVML)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_FAULT", "hang")
	t.Setenv("FAKE_NVML_AT", "init")
	cfg := configFile(t, "nvml:\n  timeout: 300ms\n")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"config", []string{"inspect", "--config", cfg, "--nvml-lib", lib}, ExitUnavailable, "did not finish within 300ms"},
		{"flag wins", []string{"inspect", "--config", cfg, "--nvml-lib", lib, "--nvml-timeout", "200ms"}, ExitUnavailable, "did not finish within 200ms"},
		{"zero flag", []string{"inspect", "--nvml-lib", lib, "--nvml-timeout", "0s"}, ExitUsage, "--nvml-timeout 0s: want a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := inspectRun(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}
