package main_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"

	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// binDir holds nodeprep and nodeprep-probe side by side, built once by
// TestMain (not with -short).
var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if !isShort() {
			dir, err := os.MkdirTemp("", "nodeprep-probe-test-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			for name, pkg := range map[string]string{"nodeprep": "./cmd/nodeprep", "nodeprep-probe": "./cmd/nodeprep-probe"} {
				cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
				cmd.Dir = "../.."
				if out, err := cmd.CombinedOutput(); err != nil {
					fmt.Fprintf(os.Stderr, "building %s: %v\n%s", name, err, out)
					return 1
				}
			}
			binDir = dir
		}
		return m.Run()
	}())
}

func isShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

// binaries returns the built nodeprep and nodeprep-probe, side by side.
func binaries(t *testing.T) (nodeprep, probe string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds nodeprep and nodeprep-probe; skipped with -short")
	}
	return filepath.Join(binDir, "nodeprep"), filepath.Join(binDir, "nodeprep-probe")
}

// mesaEnv is this environment with Mesa's lavapipe and EGL as the only
// drivers; the test fails when the environment named them and one is
// missing, and skips when they are simply not installed.
func mesaEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	icd, egl := testkit.Mesa(t)
	return append(append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl), extra...)
}

type ran struct {
	code           int
	stdout, stderr string
}

func runBin(t *testing.T, env []string, bin string, args ...string) ran {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return ran{code, out.String(), errOut.String()}
}

// TestSameProtocol runs the same child command lines through nodeprep's
// hidden commands and through nodeprep-probe: both exit alike, and a probe
// on stdout reports the same adapters and devices on lavapipe.
func TestSameProtocol(t *testing.T) {
	nodeprep, probe := binaries(t)
	env := mesaEnv(t)
	vk := `{"api":"vulkan","library":"libvulkan.so.1"}`
	egl := `{"api":"egl","library":"libEGL.so.1"}`
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"probe without request", []string{"__probe"}, 2},
		{"probe with a bad request", []string{"__probe", `{"api":"metal","library":"x"}`}, 2},
		{"probe with an unknown field", []string{"__probe", `{"api":"vulkan","library":"x","extra":1}`}, 2},
		{"probe with an unknown flag", []string{"__probe", "--bogus", vk}, 2},
		{"two probes on stdout", []string{"__probe", vk, egl}, 2},
		{"bad report-pipe value", []string{"__probe", "--report-pipe=maybe", vk}, 2},
		{"inventory on stdout", []string{"__inventory", `{"library":""}`}, 2},
		{"inventory with two requests", []string{"__inventory", "--report-pipe", "{}", "{}"}, 2},
		{"inventory without request", []string{"__inventory", "--report-pipe"}, 2},
		{"vulkan on stdout", []string{"__probe", vk}, 0},
		{"egl on stdout, report-pipe false", []string{"__probe", "--report-pipe=false", egl}, 0},
		{"vulkan after --", []string{"__probe", "--", vk}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			full, lean := runBin(t, env, nodeprep, tc.args...), runBin(t, env, probe, tc.args...)
			if full.code != tc.code || lean.code != tc.code {
				t.Fatalf("exit nodeprep %d (%s), nodeprep-probe %d (%s); want %d", full.code, full.stderr, lean.code, lean.stderr, tc.code)
			}
			if tc.code != 0 {
				return
			}
			if got, want := probeReport(t, lean.stdout), probeReport(t, full.stdout); got != want {
				t.Errorf("nodeprep-probe reported\n%s\nnodeprep reported\n%s", got, want)
			}
		})
	}
}

// probeReport is the stdout probe's report without its timings: the
// adapters' and devices' names and the verdicts.
func probeReport(t *testing.T, stdout string) string {
	t.Helper()
	_, after, ok := strings.Cut(stdout, selftest.ReportPrefix)
	if !ok {
		t.Fatalf("no report line in %q", stdout)
	}
	line, _, _ := strings.Cut(after, "\n")
	var rep struct {
		Loader   string `json:"loader"`
		Library  string `json:"library"`
		Stage    string `json:"stage"`
		Adapters []struct {
			Name     string `json:"name"`
			Dispatch *struct {
				Verified bool `json:"verified"`
			} `json:"dispatch"`
		} `json:"adapters"`
		Devices []struct {
			Vendor string `json:"vendor"`
			Error  string `json:"error"`
		} `json:"devices"`
	}
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatalf("report %q: %v", line, err)
	}
	if len(rep.Adapters)+len(rep.Devices) == 0 {
		t.Fatalf("report without adapters or devices: %s", line)
	}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// layouts are the two ways nodeprep finds its child: nodeprep-probe beside
// it (lean), or nodeprep alone, which re-executes itself (fallback).
func layouts(t *testing.T) map[string]string {
	t.Helper()
	nodeprep, probe := binaries(t)
	// A copy, not a link: os.Executable resolves links.
	alone := t.TempDir()
	data, err := os.ReadFile(nodeprep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "nodeprep"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return map[string]string{probe: nodeprep, filepath.Join(alone, "nodeprep"): filepath.Join(alone, "nodeprep")}
}

// TestSelftestThroughLeanChild runs the whole self-test on lavapipe with
// nodeprep-probe beside nodeprep and with nodeprep alone: both pass, and
// the report and -v name the executable that served the probes.
func TestSelftestThroughLeanChild(t *testing.T) {
	env := mesaEnv(t)
	for child, nodeprep := range layouts(t) {
		lean := filepath.Base(child) == "nodeprep-probe"
		t.Run(filepath.Base(child), func(t *testing.T) {
			r := runBin(t, env, nodeprep, "--root", t.TempDir(), "-v", "-o", "json", "selftest", "--simulate", "dgx-h200", "--allow-cpu-adapter")
			var rep selftest.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("exit %d, stdout %q: %v; stderr:\n%s", r.code, r.stdout, err, r.stderr)
			}
			if r.code != 0 || !rep.Passed || len(rep.Matches) != 8 {
				t.Fatalf("exit %d, passed %v, %d matches, reasons %v; stderr:\n%s", r.code, rep.Passed, len(rep.Matches), rep.Reasons, r.stderr)
			}
			if rep.ProbeChild != child {
				t.Errorf("probeChild %q, want %q", rep.ProbeChild, child)
			}
			if want := fmt.Sprintf("lean=%v", lean); !strings.Contains(r.stderr, want) {
				t.Errorf("-v log does not say %s:\n%s", want, r.stderr)
			}
		})
	}
}

// TestInventoryThroughLeanChild reads NVML through each layout from a fake
// libnvidia-ml (one GPU, most queries missing): the same inventory, and a
// segfault in the driver is reported by the crash handler as such, with
// the library, whichever executable served the child.
func TestInventoryThroughLeanChild(t *testing.T) {
	lib, _, err := fakedriver.Build(t.TempDir(), fakedriver.NVML)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		code int
		want string // in stdout (code 0) or stderr
	}{
		{"healthy", nil, 0, `"uuid"`},
		{"query segfaults", []string{"FAKE_FAULT=segv", "FAKE_NVML_AT=query"}, 69, "crashed: SIGSEGV in " + lib},
		{"init aborts", []string{"FAKE_FAULT=abort", "FAKE_NVML_AT=init"}, 69, "crashed: SIGABRT in " + lib},
	}
	ls := layouts(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var outs []string
			for child, nodeprep := range ls {
				lean := filepath.Base(child) == "nodeprep-probe"
				r := runBin(t, append(os.Environ(), tc.env...), nodeprep, "--root", t.TempDir(), "-v", "-o", "json", "inspect", "--nvml-lib", lib)
				got := r.stdout
				if tc.code != 0 {
					got = r.stderr
				}
				if r.code != tc.code || !strings.Contains(got, tc.want) {
					t.Fatalf("%s: exit %d, want %d with %q; stdout %q; stderr:\n%s", child, r.code, tc.code, tc.want, r.stdout, r.stderr)
				}
				if want := fmt.Sprintf("lean=%v", lean); !strings.Contains(r.stderr, want) {
					t.Errorf("%s: -v log does not say %s:\n%s", child, want, r.stderr)
				}
				outs = append(outs, r.stdout)
			}
			if outs[0] != outs[1] {
				t.Errorf("the inventories differ:\n%s\n%s", outs[0], outs[1])
			}
		})
	}
}

// TestContainerThroughLeanChild runs `up` with the in-container self-test
// (runc, the test rootfs, lavapipe brought in by the patched spec) in each
// layout: the probe binary bind-mounted into the container, nodeprep-probe
// or nodeprep, finds the adapter and verifies the dispatch.
func TestContainerThroughLeanChild(t *testing.T) {
	rootfs := testkit.ContainerRootfs(t)
	env := mesaEnv(t)
	for child, nodeprep := range layouts(t) {
		lean := filepath.Base(child) == "nodeprep-probe"
		t.Run(filepath.Base(child), func(t *testing.T) {
			inv := runBin(t, env, nodeprep, "inspect", "--simulate", "dgx-h200", "-o", "json")
			var gpus struct {
				GPUs []struct {
					UUID string `json:"uuid"`
				} `json:"gpus"`
			}
			if err := json.Unmarshal([]byte(inv.stdout), &gpus); err != nil || len(gpus.GPUs) == 0 {
				t.Fatalf("inspect: %v\n%s", err, inv.stderr)
			}
			root := filepath.Join(t.TempDir(), "root")
			var uuids []string
			for _, g := range gpus.GPUs {
				uuids = append(uuids, g.UUID)
			}
			testkit.LavapipeHost(t, root, uuids)
			r := runBin(t, env, nodeprep, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter",
				"--container", "--rootfs", rootfs, "--require-egl=false", "-v", "-o", "json")
			var rep testkit.UpContainerReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("exit %d: %v\n%s", r.code, err, r.stderr)
			}
			if r.code != 0 || !rep.Ready || !rep.Container.Passed || len(rep.Container.Containers) == 0 {
				t.Fatalf("exit %d, ready %v, container %+v\n%s", r.code, rep.Ready, rep.Container, r.stderr)
			}
			if ads := rep.Container.Containers[0].Selftest.Vulkan.Adapters; len(ads) != 1 || !ads[0].Dispatch.Verified {
				t.Errorf("in-container adapters %+v, want one with a verified dispatch", ads)
			}
			if want := fmt.Sprintf(`msg="in-container probe" executable=%s lean=%v`, child, lean); !strings.Contains(r.stderr, want) {
				t.Errorf("-v log does not say %s:\n%s", want, r.stderr)
			}
		})
	}
}
