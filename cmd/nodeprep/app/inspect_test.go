package app

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// inspectRun runs nodeprep with args under an empty host root (so no host config
// file is read) and returns stdout, stderr and the exit code.
func inspectRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"--root", t.TempDir()}, args...)
	err := Run(args, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	code = report(&errOut, err)
	return out.String(), errOut.String(), code
}

func inspectGolden(t *testing.T, name, got string) {
	t.Helper()
	testkit.Golden(t, "inspect/"+name, []byte(got))
}

func TestInspectGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		args []string
	}{
		{"dgx-h200.txt", []string{"inspect", "--simulate", "dgx-h200"}},
		{"dgx-h200.json", []string{"inspect", "--simulate", "dgx-h200", "-o", "json"}},
		// issue 28: a fabric the fabric manager has not registered.
		{"dgx-h200+fabric-not-started.txt", []string{"inspect", "--simulate", "dgx-h200+fabric-not-started"}},
		{"dgx-h200+fabric-error.json", []string{"inspect", "--simulate", "dgx-h200+fabric-error", "-o", "json"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := inspectRun(t, tt.args...)
			if code != ExitOK || stderr != "nodeprep: simulated server "+tt.args[2]+": no real driver was used\n" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			inspectGolden(t, tt.file, stdout)
		})
	}
}

func TestInspectFormats(t *testing.T) {
	t.Parallel()
	for _, name := range gpu.SimulatedNames() {
		for _, format := range []string{"json", "yaml"} {
			t.Run(name+"/"+format, func(t *testing.T) {
				t.Parallel()
				stdout, stderr, code := inspectRun(t, "inspect", "--simulate", name, "-o", format)
				if code != ExitOK {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				var inv gpu.Inventory
				unmarshal := json.Unmarshal
				if format == "yaml" {
					unmarshal = yaml.Unmarshal
				}
				if err := unmarshal([]byte(stdout), &inv); err != nil {
					t.Fatalf("decoding %s: %v", format, err)
				}
				want, err := gpu.Simulate(name)
				if err != nil {
					t.Fatal(err)
				}
				if len(inv.GPUs) != 8 || !inv.Simulated || inv.Server != name || inv.GPUs[7].UUID != want.GPUs[7].UUID {
					t.Errorf("decoded inventory %+v", inv)
				}
			})
		}
	}
}

// nvmlFlagHint is the flag a failed NVML load names on this machine
// (nvmlHint): --nvml-lib where there is an NVIDIA GPU, else --simulate.
func nvmlFlagHint() string {
	if hasNVIDIADevice(hostSysfs()) {
		return "--nvml-lib"
	}
	return "--simulate dgx-h200"
}

func TestInspectErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown server", []string{"inspect", "--simulate", "dgx-x1"}, ExitUsage,
			[]string{`unknown simulated server "dgx-x1"`, "dgx-a100, dgx-b200, dgx-h100, dgx-h200"}},
		{"argument", []string{"inspect", "gpu0"}, ExitUsage, []string{`nodeprep inspect takes no arguments, got "gpu0"`}},
		{"simulate and nvml-lib", []string{"inspect", "--simulate", "dgx-h100", "--nvml-lib", "/x.so"}, ExitUsage,
			[]string{"--simulate and --nvml-lib exclude each other"}},
		{"missing library", []string{"inspect", "--nvml-lib", "/nonexistent/libnvidia-ml.so.1"}, ExitUnavailable,
			[]string{"/nonexistent/libnvidia-ml.so.1", "/run/opengl-driver/lib/libnvidia-ml.so.1", nvmlFlagHint()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := inspectRun(t, tt.args...)
			if code != tt.code || stdout != "" {
				t.Errorf("exit %d, stdout %q; want exit %d and no output", code, stdout, tt.code)
			}
			for _, s := range tt.want {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q does not say %q", stderr, s)
				}
			}
		})
	}
}

// TestInspectNoNVML runs plain `nodeprep inspect` on this machine, which has
// no NVIDIA driver: exit 69 with a message that says what was searched and
// where NixOS keeps the library.
func TestInspectNoNVML(t *testing.T) {
	t.Parallel()
	if _, err := gpu.FromNVML(""); err == nil {
		t.Skip("this machine has a working NVML")
	}
	var out, errOut bytes.Buffer
	err := Run([]string{"inspect", "--root", t.TempDir()}, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if got := ExitCode(err); got != ExitUnavailable {
		t.Fatalf("ExitCode = %d (%v), want %d", got, err, ExitUnavailable)
	}
	for _, s := range []string{"libnvidia-ml.so.1", "dynamic linker", "/run/opengl-driver/lib/libnvidia-ml.so.1", nvmlFlagHint()} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if out.Len() != 0 {
		t.Errorf("stdout %q, want nothing", out.String())
	}
}

// TestInspectColumns: the header is one token per column, so awk can pick
// columns by name; the simulated banner is on stderr; no "Mock" product
// names.
func TestInspectColumns(t *testing.T) {
	t.Parallel()
	for _, name := range gpu.SimulatedNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := inspectRun(t, "inspect", "--simulate", name)
			if code != ExitOK || !strings.Contains(stderr, "simulated server "+name) || strings.Contains(stdout, "simulated") {
				t.Fatalf("exit %d, banner not on stderr only:\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			lines := strings.Split(stdout, "\n")
			header := strings.Fields(lines[1])
			want := []string{"INDEX", "UUID", "NAME", "BUS_ID", "MEMORY_MIB", "CC", "MIG", "FABRIC", "HEALTH"}
			if strings.Join(header, " ") != strings.Join(want, " ") {
				t.Fatalf("header %q, want %q", header, want)
			}
			// Column offsets from the header give every row's values.
			uuidCol, busCol, fabricCol := strings.Index(lines[1], "UUID"), strings.Index(lines[1], "BUS_ID"), strings.Index(lines[1], "FABRIC")
			for i, row := range lines[2:10] {
				if !strings.HasPrefix(row[uuidCol:], gpu.SimulatedUUID(name, i)) || !strings.HasPrefix(row[busCol:], "0000:") || !strings.HasPrefix(row[fabricCol:], "completed ") {
					t.Errorf("row %d misaligned: %q", i, row)
				}
			}
			if strings.Contains(stdout, "Mock") {
				t.Errorf("mock product name shown:\n%s", stdout)
			}
		})
	}
}
