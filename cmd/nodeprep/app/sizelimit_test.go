package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestFileSizeLimits: every file nodeprep reads has a size limit, and a
// file one byte over it (a sparse file: no disk used) is refused before
// it is read, with exit 65 and a message naming the file and the limit,
// and nothing else on the host changes (issue 22: a 2 GB sparse
// config.yaml, status.json or manifest cost 2 GiB of memory and seconds;
// containerd's config.toml 8.5 GiB, and that run exited 0).
func TestFileSizeLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, scenario, file string
		size                 int64
		args                 []string
		code                 int
		message              string
	}{
		{"config.yaml", "nixos-h200", "etc/nodeprep/config.yaml", 1<<20 + 1, []string{"cdi", "check", "--simulate", "dgx-h200"}, 65, "config.yaml has 1048577 bytes, more than the 1 MiB this file may have"},
		{"--config", "nixos-h200", "elsewhere.yaml", 1<<20 + 1, []string{"--config", "@/elsewhere.yaml", "cdi", "check", "--simulate", "dgx-h200"}, 65, "more than the 1 MiB this file may have"},
		{"status.json", "nixos-h200", "run/nodeprep/status.json", 16<<20 + 1, []string{"health", "--simulate", "dgx-h200", "--allow-cpu-adapter"}, 65, "more than the 16 MiB this file may have"},
		// A manifest or containerd's config is a lint finding of cdi check
		// (bad-manifest, containerd-bad-config: exit 1), as one that does
		// not parse is.
		{"containerd config.toml", "fhs-ubuntu", "var/lib/rancher/k3s/agent/etc/containerd/config.toml", 4<<20 + 1, []string{"cdi", "check", "--simulate", "dgx-h200"}, 1, "more than the 4 MiB this file may have"},
		{"ICD manifest", "nixos-h200", "nix/store/2a3b4c5d6f7g8h9j0k1l2m3n4p5q6r7s-graphics-drivers/share/vulkan/icd.d/nvidia_icd.x86_64.json", 1<<20 + 1, []string{"cdi", "check", "--simulate", "dgx-h200"}, 1, "more than the 1 MiB this file may have"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostCopy(t, tt.scenario)
			p := filepath.Join(root, tt.file)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			os.Remove(p)
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, tt.size); err != nil {
				t.Fatal(err)
			}
			before := testkit.Snapshot(t, root)
			args := []string{"--root", root}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "@", root))
			}
			stdout, stderr, code := runCLI(t, args...)
			if code != tt.code || !strings.Contains(stdout+stderr, tt.message) {
				t.Errorf("exit %d, want %d naming %q\nstdout:\n%s\nstderr:\n%s", code, tt.code, tt.message, stdout, stderr)
			}
			after := testkit.Snapshot(t, root)
			for _, k := range []string{"/run/nodeprep", "/run/nodeprep/lock"} {
				delete(before, k)
				delete(after, k)
			}
			if diff := testkit.Changes(before, after); len(diff) > 0 {
				t.Errorf("changed the host: %v", diff)
			}
		})
	}
}
