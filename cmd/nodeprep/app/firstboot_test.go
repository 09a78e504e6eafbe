package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestCDICheckFirstBootHandlers: on a NixOS tree where k3s has never
// started (no data-dir, no containerd config), `cdi check` with the k3s
// unit's PATH in the config (join.k3sUnitPath, as the NixOS module writes
// it) judges the handlers k3s will register: none on the PATH is an error
// naming where k3s looked and the fix; the toolkit's runtimes there
// pass. Without the key nothing is predicted, as before.
func TestCDICheckFirstBootHandlers(t *testing.T) {
	t.Parallel()
	const tools = "/nix/store/7g8h9j0k1l2m3n4p5q6r7s8a9b0c1d2f-nvidia-container-toolkit-1.17.8-tools/bin"
	tests := []struct {
		name, unitPath string
		noHandler      bool
	}{
		{"no runtime on the unit's PATH", "[/run/current-system/sw/bin]", true},
		{"toolkit on the unit's PATH", "[" + tools + ", /run/current-system/sw/bin]", false},
		{"PATH not configured", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := testkit.HostLayered(t, "nixos-h200", "k3s-first-boot-nixos")
			cfg := "cdi:\n  glvndDirs: [/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib]\n  deviceNames: [uuid, index]\n"
			if tt.unitPath != "" {
				cfg += "join:\n  k3sUnitPath: " + tt.unitPath + "\n"
			}
			cfgPath := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCLI(t, "--root", root, "--config", cfgPath, "cdi", "check", "--simulate", "dgx-h200")
			// The spec lacks the graphics mounts cdi patch adds (exit 1
			// whatever the runtime): the handler finding is what differs.
			if code != 1 || strings.Contains(out, "containerd-no-nvidia-handler") != tt.noHandler {
				t.Errorf("exit %d, want 1, naming containerd-no-nvidia-handler: %v:\n%s%s", code, tt.noHandler, out, errOut)
			}
		})
	}
}
