package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// TestNVMLHint: an NVML that cannot load names --simulate on a machine
// with no NVIDIA PCI device and --nvml-lib on one with; the fault kind
// (exit 69) is kept and other errors are left alone.
func TestNVMLHint(t *testing.T) {
	t.Parallel()
	noGPU := fstest.MapFS{
		"bus/pci/devices/0000:00:02.0/vendor": {Data: []byte("0x8086\n")},
		"bus/pci/devices/0000:00:1f.0/vendor": {Data: []byte("0x8086\n")},
	}
	withGPU := fstest.MapFS{
		"bus/pci/devices/0000:00:02.0/vendor": {Data: []byte("0x8086\n")},
		"bus/pci/devices/0000:17:00.0/vendor": {Data: []byte("0x10de\n")},
	}
	notFound := fault.Unavailable(&gpu.LibraryError{Library: "libnvidia-ml.so.1", Detail: "cannot open shared object file"})
	noDriver := fault.Unavailable(fmt.Errorf("initialising NVML: %w", gpu.ErrDriverNotLoaded))
	other := fault.Unavailable(errors.New("NVML hung"))
	tests := []struct {
		name      string
		err       error
		sys       fstest.MapFS
		says, not string
	}{
		{"no library, no GPU", notFound, noGPU, "--simulate dgx-h200", "--nvml-lib"},
		{"no driver, no GPU", noDriver, noGPU, "--simulate dgx-h200", "--nvml-lib"},
		{"no library on a GPU node", notFound, withGPU, "--nvml-lib", "--simulate"},
		{"no driver on a GPU node", noDriver, withGPU, "", "--simulate"},
		{"unreadable sysfs counts as a GPU node", notFound, fstest.MapFS{}, "--nvml-lib", "--simulate"},
		{"other errors", other, noGPU, "", "--simulate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := nvmlHint(tt.err, tt.sys)
			if ExitCode(got) != ExitUnavailable || !errors.Is(got, tt.err) {
				t.Errorf("nvmlHint(%v) = %v: lost the error or its kind", tt.err, got)
			}
			if tt.says != "" && !strings.Contains(got.Error(), tt.says) || strings.Contains(got.Error(), tt.not) {
				t.Errorf("%q: want it to say %q and not %q", got, tt.says, tt.not)
			}
		})
	}
}

// TestSimulateRootHint: `cdi check --simulate` on the real root of a
// machine without the generated spec names --root and a host tree to copy;
// with --root given, or without --simulate, the error stays as it is.
func TestSimulateRootHint(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/var/run/cdi/nvidia-container-toolkit.json"); err == nil {
		t.Skip("this machine has a generated CDI spec")
	}
	tests := []struct {
		name string
		args []string
		hint bool
	}{
		{"simulated on the real root", []string{"cdi", "check", "--simulate", "dgx-h200"}, true},
		{"simulated, --root given", []string{"cdi", "check", "--simulate", "dgx-h200", "--root", t.TempDir()}, false},
		{"not simulated", []string{"cdi", "check", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runCLI(t, tt.args...)
			if code != ExitUnavailable || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit %d, one line", code, stderr, ExitUnavailable)
			}
			if got := strings.Contains(stderr, `pass --root with a copy of a host tree: node=$(mktemp -d); cp -a testdata/hosts/nixos-h200/. "$node", then --root "$node"`); got != tt.hint {
				t.Errorf("stderr %q: hint %v, want %v", stderr, got, tt.hint)
			}
		})
	}
}

// TestConfigErrorNamesTheFile: an error in the default config file names
// it where it is, under --root, so the path in the message is the file to
// edit; --config is named as given. Exit 65, nothing on stdout.
func TestConfigErrorNamesTheFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content, says string
	}{
		{"unknown key", "selftest:\n  timout: 3s\n", "unknown key selftest.timout (did you mean timeout?)"},
		{"malformed YAML", "join: [\n", "yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			cfg := filepath.Join(root, "etc", "nodeprep", "config.yaml")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"--root", root, "inspect", "--simulate", "dgx-h200"},
				{"--config", cfg, "inspect", "--simulate", "dgx-h200"},
			} {
				stdout, stderr, code := runCLI(t, args...)
				if code != ExitMalformed || stdout != "" || !strings.Contains(stderr, fmt.Sprintf("reading config %q: ", cfg)) || !strings.Contains(stderr, tc.says) {
					t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d naming %s and saying %q", args, code, stdout, stderr, ExitMalformed, cfg, tc.says)
				}
			}
		})
	}
}
