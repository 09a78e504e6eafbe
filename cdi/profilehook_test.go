package cdi_test

import (
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestProfileHookFindings: toolkit 1.20.0's update-application-profile
// hook, by the store path of its program, is a warning with the version and
// the fix; 1.20.1, 1.20.2, an unknown version and other hooks are not.
func TestProfileHookFindings(t *testing.T) {
	t.Parallel()
	hook := func(store, sub string) *specs.Hook {
		p := "/nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-" + store + "/bin/nvidia-cdi-hook"
		return &specs.Hook{HookName: "createContainer", Path: p, Args: []string{"nvidia-cdi-hook", sub}}
	}
	tests := []struct {
		name  string
		hooks []*specs.Hook
		want  int
	}{
		{"1.20.0", []*specs.Hook{hook("nvidia-container-toolkit-1.20.0-tools", cdi.HookApplicationProfile)}, 1},
		{"1.20.0 twice", []*specs.Hook{hook("nvidia-container-toolkit-1.20.0", cdi.HookApplicationProfile), hook("nvidia-container-toolkit-1.20.0", cdi.HookApplicationProfile)}, 1},
		{"1.20.1", []*specs.Hook{hook("nvidia-container-toolkit-1.20.1", cdi.HookApplicationProfile)}, 0},
		{"1.20.2", []*specs.Hook{hook("nvidia-container-toolkit-1.20.2", cdi.HookApplicationProfile)}, 0},
		{"1.20.0 other hook", []*specs.Hook{hook("nvidia-container-toolkit-1.20.0", "create-symlinks")}, 0},
		{"unknown version", []*specs.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", cdi.HookApplicationProfile}}}, 0},
		{"1.20.00 is not 1.20.0", []*specs.Hook{hook("nvidia-container-toolkit-1.20.01", cdi.HookApplicationProfile)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, where := range []string{"top", "device"} {
				spec := &specs.Spec{Version: "0.8.0", Kind: "nvidia.com/gpu", Devices: []specs.Device{{Name: "0"}}}
				if where == "top" {
					spec.ContainerEdits.Hooks = tt.hooks
				} else {
					spec.Devices[0].ContainerEdits.Hooks = tt.hooks
				}
				fs := cdi.ProfileHookFindings(spec)
				if len(fs) != tt.want {
					t.Fatalf("%s: %v, want %d findings", where, fs, tt.want)
				}
				for _, f := range fs {
					if f.Code != cdi.CodeProfileHookReadOnly || f.Severity != cdi.SeverityWarning {
						t.Errorf("%s: %v", where, f)
					}
					for _, s := range []string{"toolkit 1.20.0", "read-only /etc/nvidia", "fix: nvidia-container-toolkit 1.20.1 or later", "#2026"} {
						if !strings.Contains(f.Message, s) {
							t.Errorf("%s: %q does not say %q", where, f.Message, s)
						}
					}
				}
			}
		})
	}
}
