package nvruntime_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/nvruntime"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestLoadBounded: a config over bounded.MaxNVRuntimeConfig (1 MiB; a
// 40 MB array took 977 MiB and 13 s to decode under the general 64 MiB)
// is refused by its size as malformed input naming it; one at the limit
// is read.
func TestLoadBounded(t *testing.T) {
	t.Parallel()
	dir := testkit.HostFiles(t, map[string]string{"/etc/nvidia-container-runtime/config.toml": "", "/etc/nvidia-container-runtime/edge.toml": ""})
	big := filepath.Join(dir, "etc/nvidia-container-runtime/config.toml")
	array := "x = [" + strings.Repeat("1,", 20<<20) + "1]\n" // 40 MB
	if err := os.WriteFile(big, []byte(array), 0o644); err != nil {
		t.Fatal(err)
	}
	edge := "#" + strings.Repeat("x", bounded.MaxNVRuntimeConfig-2) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "etc/nvidia-container-runtime/edge.toml"), []byte(edge), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nvruntime.Load(root, nvruntime.DefaultPath)
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), nvruntime.DefaultPath) {
		t.Errorf("Load of a 40 MB config: %v; want malformed, too large, naming it", err)
	}
	if _, err := nvruntime.Load(root, "/etc/nvidia-container-runtime/edge.toml"); err != nil {
		t.Errorf("Load of a config at the limit: %v", err)
	}
}
