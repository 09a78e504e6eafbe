package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// TestExitCodeNumbers pins every exit code by its number
// (docs/exit-codes.md): the constants are compared with literals once here, so a
// changed constant fails a test even where other tests compare with it.
func TestExitCodeNumbers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("unmarked"), 1},
		{fault.CheckFailed(errors.New("x")), 1},
		{fault.Usage(errors.New("x")), 2},
		{fault.Malformed(errors.New("x")), 65},
		{fault.Unavailable(errors.New("x")), 69},
		{fault.CantWrite(errors.New("x")), 73},
		{fault.Locked(errors.New("x")), 75},
		{fmt.Errorf("wrapped: %w", fault.CantWrite(errors.New("x"))), 73},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
	for name, c := range map[string][2]int{
		"ExitOK": {ExitOK, 0}, "ExitCheckFailed": {ExitCheckFailed, 1}, "ExitUsage": {ExitUsage, 2},
		"ExitMalformed": {ExitMalformed, 65}, "ExitUnavailable": {ExitUnavailable, 69},
		"ExitCantWrite": {ExitCantWrite, 73}, "ExitLocked": {ExitLocked, 75},
	} {
		if c[0] != c[1] {
			t.Errorf("%s = %d, want %d", name, c[0], c[1])
		}
	}
}

// TestBadInputWritesNothing: every command refuses bad input with its exit
// code and leaves the host tree byte-identical (no status file, no lock
// directory, no rewritten spec).
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config string // the config file's content ("" = none)
		args   []string
		code   int
		stderr string
	}{
		{name: "up, unknown simulated server", args: []string{"up", "--simulate", "dgx-h999"}, code: 2, stderr: "dgx-h999"},
		{name: "up, --nvml-timeout 0", args: []string{"up", "--nvml-timeout", "0"}, code: 2, stderr: "--nvml-timeout"},
		{name: "selftest, --nvml-timeout 0", args: []string{"selftest", "--nvml-timeout", "0"}, code: 2, stderr: "--nvml-timeout"},
		{name: "up, empty --device-names", args: []string{"up", "--simulate", "dgx-h200", "--device-names", ""}, code: 2, stderr: "device-name"},
		{name: "up, cdi.deviceNames: []", config: "cdi:\n  deviceNames: []\n", args: []string{"up", "--simulate", "dgx-h200"}, code: 65, stderr: "cdi.deviceNames"},
		{name: "up, a label key twice", args: []string{"up", "--simulate", "dgx-h200", "--label", "site=a", "--label", "site=b"}, code: 65, stderr: `"site" given twice`},
		{name: "up, a taint key twice", args: []string{"up", "--simulate", "dgx-h200", "--taint", "d=a:NoSchedule", "--taint", "d=b:NoSchedule"}, code: 65, stderr: "unique by key and effect"},
		// issue 22: a user label replaced a label nodeprep derives from facts.
		{name: "up, a derived GFD label", args: []string{"up", "--simulate", "dgx-h200", "--label", "nvidia.com/gpu.count=99"}, code: 65, stderr: "nodeprep derives nvidia.com/gpu.count from the inventory"},
		{name: "up, the self-test label", args: []string{"up", "--simulate", "dgx-h200", "--on-selftest-failure", "taint", "--label", "nodeprep.dev/selftest=passed"}, code: 65, stderr: "nodeprep derives nodeprep.dev/selftest from the self-test"},
		{name: "join, a derived label in the config", config: "join:\n  labels: [nvidia.com/gpu.product=custom]\n", args: []string{"join", "--simulate", "dgx-h200"}, code: 65, stderr: "nvidia.com/gpu.product"},
		{name: "join, a label key twice", args: []string{"join", "--simulate", "dgx-h200", "--label", "site=a", "--label", "site=b"}, code: 65, stderr: `"site" given twice`},
		{name: "cdi patch, a bad join section", config: "join:\n  taints: [gpu=x:NoScheduled]\n", args: []string{"cdi", "patch"}, code: 65, stderr: "join.taints"},
		{name: "cdi patch, a join label twice", config: "join:\n  labels: [site=a, site=b]\n", args: []string{"cdi", "patch"}, code: 65, stderr: "join.labels"},
		// An output that names a directory is refused before the lock is
		// taken: /run/nodeprep/lock is not created either.
		{name: "up, --metrics-file a directory", args: []string{"up", "--simulate", "dgx-h200", "--metrics-file", "/run/nodeprep/"}, code: 2, stderr: "such as /run/nodeprep/nodeprep.prom"},
		{name: "up, the metrics file is the status file", args: []string{"up", "--simulate", "dgx-h200", "--metrics-file", "/run/nodeprep/status.json"}, code: 2, stderr: "two outputs cannot share one file"},
		{name: "health, --status-file a directory", args: []string{"health", "--simulate", "dgx-h200", "--status-file", "/run/nodeprep/"}, code: 2, stderr: "such as /run/nodeprep/status.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostCopy(t, "nixos-h200")
			args := []string{"--root", root}
			if tt.config != "" {
				args = append(args, "--config", configFile(t, tt.config))
			}
			before := testkit.Snapshot(t, root)
			_, stderr, code := runCLI(t, append(args, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q; want %d naming %q", code, stderr, tt.code, tt.stderr)
			}
			if diff := testkit.Changes(before, testkit.Snapshot(t, root)); len(diff) > 0 {
				t.Errorf("bad input changed the host: %v", diff)
			}
		})
	}
}

// TestPatchDryRunWritesNowhere: `cdi patch --dry-run` validates the result
// without a temporary file, in the root or in $TMPDIR (here a directory
// that does not exist, so any attempt fails the run).
func TestPatchDryRunWritesNowhere(t *testing.T) {
	tmp := filepath.Join(t.TempDir(), "absent")
	t.Setenv("TMPDIR", tmp)
	root := hostCopy(t, "nixos-h200")
	before := testkit.Snapshot(t, root)
	out, stderr, code := runCLI(t, "--root", root, "cdi", "patch", "--dry-run", "--diff")
	if code != 0 || !strings.Contains(out, "+") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want a diff", code, out, stderr)
	}
	if diff := testkit.Changes(before, testkit.Snapshot(t, root)); len(diff) > 0 {
		t.Errorf("--dry-run changed the host: %v", diff)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Errorf("--dry-run created $TMPDIR")
	}
}

// TestSpecSizeLimit: a spec larger than bounded.MaxCDISpec (64 MiB) is
// refused as malformed input (65) by every command that reads it, before
// it is read, and nothing is written but the lock `cdi patch` takes
// before it reads the spec.
func TestSpecSizeLimit(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"cdi", "patch"}, {"cdi", "check", "--simulate", "dgx-h200"}, {"cdi", "patch", "--dry-run"}} {
		root := hostCopy(t, "nixos-h200")
		// A sparse file: 64 MiB and one byte, no disk used.
		if err := os.Truncate(filepath.Join(root, specRel), 64<<20+1); err != nil {
			t.Fatal(err)
		}
		before := testkit.Snapshot(t, root)
		_, stderr, code := runCLI(t, append([]string{"--root", root}, args...)...)
		if code != 65 || !strings.Contains(stderr, "64 MiB") {
			t.Errorf("%v: exit %d, stderr %q; want 65 naming the limit", args, code, stderr)
		}
		after := testkit.Snapshot(t, root)
		delete(after, "/run/nodeprep")
		delete(after, "/run/nodeprep/lock")
		if diff := testkit.Changes(before, after); len(diff) > 0 {
			t.Errorf("%v changed the host: %v", args, diff)
		}
	}
}

// TestPatchAllOrNothingAcrossSpecs: when one of the specs the runtime's
// view patches cannot be written (here a name so long that no temporary
// file fits beside it), no spec is written: the named spec keeps its
// bytes, the command exits 73 naming the other spec, and up's report
// says why (not only the plan's warnings).
func TestPatchAllOrNothingAcrossSpecs(t *testing.T) {
	t.Parallel()
	long := "/etc/cdi/" + strings.Repeat("n", 250) + ".json" // 255 bytes: NAME_MAX, no room for a temporary name
	for _, args := range [][]string{{"cdi", "patch"}, {"-o", "json", "up", "--simulate", "dgx-h200", "--allow-cpu-adapter"}} {
		root := hostCopy(t, "nixos-h200")
		spec, err := os.ReadFile(filepath.Join(root, specRel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, long), spec, 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCLI(t, append([]string{"--root", root}, args...)...)
		if code != ExitCantWrite {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, ExitCantWrite, stdout, stderr)
		}
		if after, _ := os.ReadFile(filepath.Join(root, specRel)); string(after) != string(spec) {
			t.Errorf("%v: the named spec was written although %s could not be", args, long)
		}
		if !strings.Contains(stdout+stderr, strings.Repeat("n", 250)) {
			t.Errorf("%v: the output does not name the spec that could not be written:\n%s%s", args, stdout, stderr)
		}
	}
}

// TestSpecSizeLimitInSpecDirs: a spec over bounded.MaxCDISpec anywhere in
// the runtime's spec directories is refused (65, naming it) before the
// CDI library would read it whole.
func TestSpecSizeLimitInSpecDirs(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	if err := os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "etc/cdi/big.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	before := testkit.Snapshot(t, root, "/etc/cdi/big.json")
	_, stderr, code := runCLI(t, "--root", root, "cdi", "patch")
	if code != ExitMalformed || !strings.Contains(stderr, "big.json has 3221225472 bytes") {
		t.Errorf("exit %d, stderr %q; want 65 naming big.json and its size", code, stderr)
	}
	after := testkit.Snapshot(t, root, "/etc/cdi/big.json", "/run/nodeprep")
	if diff := testkit.Changes(before, after); len(diff) > 0 {
		t.Errorf("changed the host: %v", diff)
	}
}

// TestEmptySimulateIsUsage: `--simulate ”` is a usage error on every
// command that reads the GPUs, never a quiet switch to the real NVML.
func TestEmptySimulateIsUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"inspect"}, {"cdi", "check"}, {"selftest"}, {"join"}, {"up"}, {"health"}} {
		root := hostCopy(t, "nixos-h200")
		_, _, code := runCLI(t, append(append([]string{"--root", root}, args...), "--simulate", "")...)
		if code != ExitUsage {
			t.Errorf("%v --simulate '': exit %d, want %d", args, code, ExitUsage)
		}
	}
}

// TestViewAsTheRuntimeReadsIt: the CDI view follows the host's links as
// the runtime on the host does (an absolute link in /etc/cdi re-rooted,
// /run/cdi and /var/run/cdi one directory), and a spec the runtime would
// skip, of another vendor, warns without blocking the GPU node.
func TestViewAsTheRuntimeReadsIt(t *testing.T) {
	t.Parallel()
	write := func(t *testing.T, root, rel, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("absolute link re-rooted", func(t *testing.T) {
		t.Parallel()
		root := hostCopy(t, "nixos-h200")
		os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755)
		if err := os.Symlink("/var/run/cdi/nvidia-container-toolkit.json", filepath.Join(root, "etc/cdi/nvidia.json")); err != nil {
			t.Fatal(err)
		}
		out, _, _ := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200")
		if strings.Contains(out, "invalid-spec") || !strings.Contains(out, "/etc/cdi/nvidia.json is shadowed") {
			t.Errorf("want the linked copy read (and shadowed), not refused:\n%s", out)
		}
	})
	t.Run("one directory by two names", func(t *testing.T) {
		t.Parallel()
		root := hostCopy(t, "nixos-h200")
		twice, _, _ := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200", "--spec-dir", "/run/cdi", "--spec-dir", "/var/run/cdi")
		once, _, _ := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200")
		if twice != once || strings.Contains(twice, "shadowed") {
			t.Errorf("/run/cdi and /var/run/cdi counted twice:\n%s\nwant as with the defaults:\n%s", twice, once)
		}
	})
	t.Run("another vendor's spec", func(t *testing.T) {
		t.Parallel()
		root := hostCopy(t, "nixos-h200")
		// Two YAML documents: the library reads the first, as the runtime does.
		write(t, root, "etc/cdi/fpga.yaml", "cdiVersion: 0.5.0\nkind: vendor.example/fpga\ndevices:\n- name: f0\n  containerEdits:\n    env: [A=1]\n---\nx: 1\n")
		write(t, root, "etc/cdi/broken.json", "{\"cdiVersion\": ")
		out, stderr, code := runCLI(t, "--root", root, "up", "--simulate", "dgx-h200", "--allow-cpu-adapter")
		if code != ExitOK || strings.Contains(out, "fpga.yaml") || !strings.Contains(out, "the runtime skips /etc/cdi/broken.json") {
			t.Errorf("exit %d; want ready, nothing about fpga.yaml, a warning for broken.json:\n%s%s", code, out, stderr)
		}
	})
}

// TestPatchRefusesOtherKinds: the spec nodeprep is pointed at must be an
// NVIDIA GPU kind, and a spec directory must be a directory; both are
// malformed input, and nothing is written.
func TestPatchRefusesOtherKinds(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	spec := "cdiVersion: 0.5.0\nkind: vendor.example/other\ndevices:\n- name: d0\n  containerEdits:\n    env: [A=1]\n"
	if err := os.WriteFile(filepath.Join(root, "run/cdi/other.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	before := testkit.Snapshot(t, root)
	_, stderr, code := runCLI(t, "--root", root, "cdi", "patch", "--spec", "/var/run/cdi/other.yaml")
	if code != ExitMalformed || !strings.Contains(stderr, "its kind is vendor.example/other, not an NVIDIA GPU kind") {
		t.Errorf("another vendor's spec: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "--root", root, "cdi", "check", "--spec-dir", "/var/run/cdi/nvidia-container-toolkit.json")
	if code != ExitMalformed || !strings.Contains(stderr, "is not a directory") {
		t.Errorf("a file as spec directory: exit %d, stderr %q", code, stderr)
	}
	after := testkit.Snapshot(t, root, "/run/nodeprep")
	delete(before, "/run/nodeprep")
	if diff := testkit.Changes(before, after); len(diff) > 0 {
		t.Errorf("changed the host: %v", diff)
	}
}
