package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestOneFactOneVerdict: one fact gets one verdict everywhere. On a node
// up made ready, each fact below appears after boot (k3s renders another
// containerd config, the device plugin's spec comes from the read-only
// store); then health (the timer), cdi check (by hand) and up (the next
// boot) must all pass or all fail, each failing one naming the same
// finding, and status.json and the metrics must say what the last of them
// said. So must the path unit's re-patch (cdi patch --changes-only) of a
// spec the generator rewrote meanwhile: it judges the runtime too, so it
// never makes ready a node whose containerd cannot serve the spec (its
// exit status says whether the specs could be patched: 1 only for a spec
// fact).
func TestOneFactOneVerdict(t *testing.T) {
	// overlay lays a k3s-only host tree of testdata/hosts over the root.
	overlay := func(tree string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			if out, err := exec.Command("cp", "-a", testkit.Testdata(t, "hosts", tree)+"/.", root).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
		}
	}
	write := func(path, content string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			p := filepath.Join(root, path)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	both := func(fs ...func(t *testing.T, root string)) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			for _, f := range fs {
				f(t, root)
			}
		}
	}
	ctdConfig := "var/lib/rancher/k3s/agent/etc/containerd/config.toml"
	tests := []struct {
		fact   string
		apply  func(t *testing.T, root string)
		fails  string // what every command names; "" = all pass
		spec   bool   // a fact of the specs (cdi patch exits 1), not of containerd
		upCode int    // up's exit status when not 1 (65: malformed input)
	}{
		{"containerd 2 with CDI off", overlay("k3s-containerd-cdi-off"), "containerd-cdi-disabled", false, 0},
		{"containerd 1.7 whose default is CDI off", overlay("k3s-containerd-v2-default"), "containerd-cdi-disabled", false, 0},
		{"the spec's directory not in cdi_spec_dirs", overlay("k3s-containerd-spec-dir"), "containerd-spec-dir", false, 0},
		{"only the nvidia handler, mode auto", overlay("nvruntime-auto-only"), "pod-path-bypass", false, 0},
		{"the nvidia-cdi handler serves the spec", overlay("k3s-containerd-ok"), "", false, 0},
		{"the nvidia handler is the GPU Operator's wrapper, whose config says mode auto", overlay("nvruntime-operator-wrapper"), "pod-path-bypass", false, 0},
		{"the nvidia-cdi handler under the version 2 plugin of a version 3 config", overlay("k3s-containerd-v2-table"), "containerd-misplaced-runtime", false, 0},
		{"the device plugin's spec in the read-only store", linkStorePluginSpec, "unpatchable-spec", true, 0},
		// Two faults at once: every command names the specs' first, as up,
		// which stops at its cdi stage, does.
		{"CDI off and the plugin's spec in the store", both(overlay("k3s-containerd-cdi-off"), linkStorePluginSpec), "unpatchable-spec", true, 0},
		// Bad inputs (a breaker's): k3s would not start, so its containerd
		// serves nothing; up refuses the input (65), the others are not ready.
		{"a k3s config k3s refuses", write("etc/rancher/k3s/config.yaml", "node-label: [a\n\t bad"), "k3s would not start", false, 65},
		{"a data-dir that is a symlink loop", both(write("etc/rancher/k3s/config.yaml", "data-dir: /srv/loop\n"), func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("loop", filepath.Join(root, "srv/loop")); err != nil {
				t.Fatal(err)
			}
		}), "too many levels of symbolic links", false, 0},
		{"a containerd config nested 2 million arrays deep", both(overlay("k3s-containerd-ok"), write(ctdConfig, "version = 3\na = "+strings.Repeat("[", 2_000_000))),
			"nested more than 64 deep", false, 0},
		{"a FIFO where k3s keeps containerd's binary", both(overlay("k3s-containerd-ok"), func(t *testing.T, root string) {
			p := filepath.Join(root, "var/lib/rancher/k3s/data/current/bin/containerd")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}), "", false, 0},
	}
	generated, err := os.ReadFile(filepath.Join(testkit.Testdata(t, "hosts", "nixos-h200"), "run/cdi/nvidia-container-toolkit.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.fact, func(t *testing.T) {
			root, env, prom := upReady(t)
			tt.apply(t, root)
			want := 0
			if tt.fails != "" {
				want = 1
			}
			for _, c := range []struct {
				name   string
				args   []string
				status bool // rewrites status.json
			}{
				{"health", []string{"health", "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom}, true},
				{"cdi check", []string{"cdi", "check", "--simulate", "dgx-h200"}, false},
				{"cdi patch", []string{"cdi", "patch", "--changes-only", "--metrics-file", prom}, true},
				{"up", []string{"up", "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", prom}, true},
			} {
				code := want
				if c.name == "up" && tt.upCode != 0 {
					code = tt.upCode
				}
				if c.name == "cdi patch" {
					// The generator rewrote its spec since: the re-patch
					// writes it, so it rewrites the status too.
					writeAtomic(t, filepath.Join(root, "run/cdi/nvidia-container-toolkit.json"), generated)
					if !tt.spec {
						code = 0
					}
				}
				r := run(t, env, append([]string{c.args[0], "--root", root}, c.args[1:]...)...)
				if r.code != code || c.name != "cdi patch" && !strings.Contains(r.stdout+r.stderr, tt.fails) {
					t.Errorf("%s: exit %d, want %d naming %q\n%s\n%s", c.name, r.code, code, tt.fails, r.stdout, r.stderr)
				}
				if !c.status {
					continue
				}
				if s := readStatus(t, root); s.Ready != (want == 0) || !strings.Contains(s.Verdict, tt.fails) {
					t.Errorf("%s: status ready=%v verdict %q, want ready=%v naming %q", c.name, s.Ready, s.Verdict, want == 0, tt.fails)
				}
				if m, _ := os.ReadFile(filepath.Join(root, prom)); !strings.Contains(string(m), map[bool]string{true: "nodeprep_ready 1", false: "nodeprep_ready 0"}[want == 0]) {
					t.Errorf("%s: metrics do not follow the verdict:\n%s", c.name, m)
				}
			}
		})
	}
}
