package containerd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// firstBootTools is the toolkit's bin directory in k3s-first-boot-nixos.
const firstBootTools = "/nix/store/7g8h9j0k1l2m3n4p5q6r7s8a9b0c1d2f-nvidia-container-toolkit-1.17.8-tools/bin"

func TestSearchesPath(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"": true, "v1.33.4+k3s1": true, "1.32.0+k3s1": true, "v1.31.2+k3s1": true, "v1.31.1+k3s1": false,
		"v1.30.6+k3s1": true, "v1.30.5+k3s1": false, "v1.29.10+k3s1": true, "v1.29.9+k3s1": false,
		"v1.28.15+k3s1": true, "v1.28.14+k3s1": false, "v1.27.16+k3s1": false, "v2.0.0": true, "nonsense": true,
	} {
		if got := SearchesPath(v); got != want {
			t.Errorf("SearchesPath(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestPredictFirstBoot: before k3s has rendered config.toml, the handlers
// it will register are predicted from the k3s unit's PATH and k3s's fixed
// directories, and judged: a NixOS node whose k3s finds no NVIDIA runtime
// has an error naming where k3s looked and the fix.
func TestPredictFirstBoot(t *testing.T) {
	t.Parallel()
	tmplBase := "{{ template \"base\" . }}\n"
	tests := []struct {
		name     string
		opts     Options
		files    map[string]string
		runtimes []string // name=binary
		codes    []string
		message  string
	}{
		{name: "toolkit on PATH", opts: Options{UnitPath: []string{firstBootTools, "/run/current-system/sw/bin"}},
			runtimes: []string{"nvidia=" + firstBootTools + "/nvidia-container-runtime", "nvidia-cdi=" + firstBootTools + "/nvidia-container-runtime.cdi"}},
		{name: "no toolkit on PATH", opts: Options{UnitPath: []string{"/run/current-system/sw/bin"}},
			codes: []string{CodeNoHandler}, message: "/run/current-system/sw/bin, /usr/local/nvidia/toolkit"},
		{name: "not executable on PATH", opts: Options{UnitPath: []string{"/usr/local/bin"}},
			codes: []string{CodeNoHandler}, message: "systemd.services.k3s.path"},
		{name: "empty PATH", opts: Options{UnitPath: []string{}}, codes: []string{CodeNoHandler}},
		{name: "PATH unknown", codes: []string{CodeNotWritten}},
		{name: "old k3s looks in /usr/bin only", opts: Options{UnitPath: []string{firstBootTools}, K3sVersion: "v1.28.14+k3s1"},
			codes: []string{CodeNoHandler}, message: "/usr/local/nvidia/toolkit, /usr/bin"},
		{name: "GPU operator's toolkit", opts: Options{UnitPath: []string{"/run/current-system/sw/bin"}},
			files:    map[string]string{"/usr/local/nvidia/toolkit/nvidia-container-runtime": "#!/bin/sh\n"},
			runtimes: []string{"nvidia=/usr/local/nvidia/toolkit/nvidia-container-runtime"}},
		{name: "template on base", opts: Options{UnitPath: []string{firstBootTools}},
			files:    map[string]string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl": tmplBase},
			runtimes: []string{"nvidia=" + firstBootTools + "/nvidia-container-runtime", "nvidia-cdi=" + firstBootTools + "/nvidia-container-runtime.cdi"},
			codes:    []string{CodeCDIDisabled}, // the base of config.toml.tmpl is containerd 1.7's (version 2)
		},
		{name: "template on base, no toolkit", opts: Options{UnitPath: []string{"/run/current-system/sw/bin"}, ContainerdVersion: "2.0.5"},
			files: map[string]string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl": tmplBase},
			codes: []string{CodeNoHandler}},
		{name: "template of its own", opts: Options{UnitPath: []string{firstBootTools}, ContainerdVersion: "2.0.5"},
			files: map[string]string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl": "version = 2\n"}},
		{name: "rendered config wins", opts: Options{UnitPath: []string{"/run/current-system/sw/bin"}, ContainerdVersion: "2.0.5"},
			files: map[string]string{"/var/lib/rancher/k3s/agent/etc/containerd/config.toml": "version = 2\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := testkit.LayeredTree(t, "nixos-h200", "k3s-first-boot-nixos")
			for p, data := range tt.files {
				full := filepath.Join(root.Dir(), p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(data), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			opts := tt.opts
			opts.DataDir, opts.SpecPaths, opts.DriverRoot = "/var/lib/rancher/k3s", []string{spec}, "/run/opengl-driver"
			rep, err := Check(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			var codes, runtimes []string
			for _, f := range rep.Findings {
				codes = append(codes, f.Code)
			}
			if rep.Config != nil {
				for _, rt := range rep.Config.Runtimes {
					runtimes = append(runtimes, rt.Name+"="+rt.BinaryName)
				}
			}
			if !slices.Equal(codes, tt.codes) || !slices.Equal(runtimes, tt.runtimes) {
				t.Errorf("findings %v and runtimes %v, want codes %v and runtimes %v", rep.Findings, runtimes, tt.codes, tt.runtimes)
			}
			for _, f := range rep.Findings {
				if f.Code == CodeNoHandler && f.Severity != cdi.SeverityError {
					t.Errorf("%s is a %s, want an error", f.Code, f.Severity)
				}
			}
			if tt.message != "" && !slices.ContainsFunc(rep.Findings, func(f cdi.Finding) bool { return strings.Contains(f.Message, tt.message) }) {
				t.Errorf("no finding says %q: %v", tt.message, rep.Findings)
			}
		})
	}
}

// TestPredictedVersion: the predicted config has the version k3s's base
// template writes for the containerd it ships (k3s PR #11626): 3 for
// containerd 2.x and for a containerd nodeprep does not know (a current
// k3s), 2 for containerd 1.7.
func TestPredictedVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		containerd string
		want       int64
	}{
		{"2.0.5", 3}, {"v2.1.4-k3s1", 3}, {"", 3}, {"1.7.23", 2}, {"v1.7.23-k3s2", 2},
	} {
		if got := predicted("/var/lib/rancher/k3s", Prediction{}, tt.containerd).Version; got != tt.want {
			t.Errorf("containerd %q: version %d, want %d", tt.containerd, got, tt.want)
		}
	}
}
