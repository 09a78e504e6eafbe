package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// k3sBomb is the k3s config.yaml of the report: a 200 KB string aliased
// 4,000 times (212 KB; 1 GiB and 13 s before exit 65, and a 650 KB one
// ran out of memory).
var k3sBomb = "node-name: &a \"" + strings.Repeat("x", 200_000) + "\"\nnode-label: [" + strings.Repeat("*a, ", 3999) + "*a]\n"

// TestAliasBombs: YAML whose aliases expand past its kind's limit is
// refused before it is decoded, naming the file: a k3s config (join and
// up exit 65; cdi check, which judges k3s's configuration as a finding,
// exits 1 with the finding) and the nodeprep config (exit 65).
func TestAliasBombs(t *testing.T) {
	t.Parallel()
	const k3sConfig = "/etc/rancher/k3s/config.yaml"
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"join", []string{"join", "--simulate", "dgx-h200"}, ExitMalformed},
		{"up", []string{"up", "--simulate", "dgx-h200"}, ExitMalformed},
		{"cdi check", []string{"cdi", "check", "--simulate", "dgx-h200"}, ExitCheckFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := hostCopy(t, "nixos-h200")
			if err := os.MkdirAll(filepath.Join(root, "etc/rancher/k3s"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, k3sConfig), []byte(k3sBomb), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err := Run(append([]string{"--root", root}, tc.args...), IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			code := report(&errOut, err)
			all := out.String() + errOut.String()
			if code != tc.want || !strings.Contains(all, k3sConfig) || !strings.Contains(all, "expands to 763.1 MiB") {
				t.Errorf("exit %d, want %d naming %s and its expanded size\n%s", code, tc.want, k3sConfig, all)
			}
		})
	}
	t.Run("config", func(t *testing.T) {
		t.Parallel()
		root := hostCopy(t, "nixos-h200")
		cfg := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(cfg, []byte(strings.Replace(k3sBomb, "node-name", "a", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := Run([]string{"--root", root, "--config", cfg, "join", "--simulate", "dgx-h200"}, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		if code := report(&errOut, err); code != ExitMalformed || !strings.Contains(errOut.String(), cfg) || !strings.Contains(errOut.String(), "expands to") {
			t.Errorf("exit %d, want 65 naming %s\n%s", code, cfg, errOut.String())
		}
	})
}
