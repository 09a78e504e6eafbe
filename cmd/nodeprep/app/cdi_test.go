package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// runCLI runs nodeprep in-process and returns its output and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(args, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	code = report(&errOut, err)
	return out.String(), errOut.String(), code
}

// hostCopy copies testdata/hosts/<scenario> to a temporary root.
func hostCopy(t *testing.T, scenario string) string {
	t.Helper()
	return testkit.HostCopy(t, scenario)
}

const specRel = "run/cdi/nvidia-container-toolkit.json"

func TestCDIExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		scenario string
		args     []string
		prepare  func(t *testing.T, root string)
		want     int
		stderr   string // substring of stderr
		stdout   string // substring of stdout
		changed  bool   // the spec file changes
	}{
		{name: "patch", scenario: "nixos-h200", args: []string{"cdi", "patch"}, want: 0, stdout: "patched", changed: true},
		{name: "dry-run", scenario: "nixos-h200", args: []string{"cdi", "patch", "--dry-run"}, want: 0, stdout: "would be patched, 11 changes (dry run: nothing written)\n  add vulkan-icd: "},
		{name: "dry-run-diff", scenario: "nixos-h200", args: []string{"cdi", "patch", "--dry-run", "--diff"}, want: 0, stdout: "+        \"containerPath\": \"/etc/vulkan/icd.d/nvidia_icd.json\""},
		{name: "dry-run-says-why", scenario: "broken-no-icd", args: []string{"cdi", "patch", "--dry-run"}, want: 1, stdout: "error  no-icd-on-host  no Vulkan ICD manifest"},
		{name: "check-flag", scenario: "nixos-h200", args: []string{"cdi", "patch", "--check"}, want: 1, stderr: "not patched"},
		{name: "fhs-noop", scenario: "fhs-ubuntu", args: []string{"cdi", "patch", "--check"}, want: 0},
		{name: "check", scenario: "nixos-h200", args: []string{"cdi", "check", "--simulate", "dgx-h200"}, want: 1, stdout: "missing-icd"},
		{name: "check-uuid-names", scenario: "broken-index-names", args: []string{"cdi", "check", "--simulate", "dgx-h200"}, want: 1, stdout: "nvidia.com/gpu=GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9 is not in the spec"},
		{name: "check-index-names", scenario: "broken-index-names", args: []string{"cdi", "check", "--simulate", "dgx-h200", "--device-names", "index"}, want: 1},
		{name: "no-icd", scenario: "broken-no-icd", args: []string{"cdi", "patch"}, want: 1, stdout: "no-icd-on-host"},
		{name: "missing-spec", scenario: "nixos-h200", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			os.Remove(filepath.Join(root, specRel))
		}, want: 69, stderr: "the generator has not run yet: nvidia-container-toolkit-cdi-generator.service on NixOS"},
		{name: "malformed", scenario: "broken-malformed-spec", args: []string{"cdi", "patch"}, want: 65, stderr: "reading CDI spec"},
		{name: "empty-device", scenario: "broken-empty-device", args: []string{"cdi", "patch"}, want: 65, stderr: "device demo1 has no container edits"},
		{name: "bad-config", scenario: "nixos-h200", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "etc/nodeprep"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/nodeprep/config.yaml"), []byte("cdi:\n  specPath: /x\n"), 0o644)
		}, want: 65, stderr: "unknown key cdi.specPath"},
		{name: "duplicate-spec-check", scenario: "dup-spec-copy", args: []string{"cdi", "check", "--simulate", "dgx-h200"}, want: 1, stdout: "conflicting-specs       /var/run/cdi/nvidia-container-toolkit.json and /var/run/cdi/nvidia.yaml"},
		{name: "duplicate-spec-patch", scenario: "dup-spec-copy", args: []string{"cdi", "patch"}, want: 1, stdout: "not patched: nothing written"},
		{name: "plugin-kind-patch", scenario: "plugin-kind", args: []string{"cdi", "patch"}, want: 0, stdout: "  /var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json: add vulkan-icd", changed: true},
		{name: "plugin-store-patch", scenario: "plugin-kind-store", args: []string{"cdi", "patch"}, want: 1, stdout: "unpatchable-spec"},
		{name: "spec-dir-flag", scenario: "plugin-kind-store", args: []string{"cdi", "patch", "--spec-dir", "/var/run/cdi"}, want: 0, changed: true},
		{name: "spec-dirs-config", scenario: "plugin-kind-store", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "etc/nodeprep"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/nodeprep/config.yaml"), []byte("cdi:\n  specDirs: [/var/run/cdi]\n"), 0o644)
		}, want: 0, changed: true},
		{name: "spec-dirs-relative", scenario: "nixos-h200", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			os.MkdirAll(filepath.Join(root, "etc/nodeprep"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/nodeprep/config.yaml"), []byte("cdi:\n  specDirs: [etc/cdi]\n"), 0o644)
		}, want: 65, stderr: "cdi.specDirs"},
		{name: "driver-version-from-nvml", scenario: "fhs-ubuntu", args: []string{"cdi", "check", "--simulate", "dgx-b200"}, want: 1, stdout: "mixed-driver-version  the spec mounts driver libraries of 550.54.15 (e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15) but the driver is 560.28.03"},
		{name: "unchanged-with-error", scenario: "nixos-h200", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			if _, _, code := runCLI(t, "--root", root, "cdi", "patch"); code != 0 {
				t.Fatalf("first patch: exit %d", code)
			}
			os.Remove(filepath.Join(root, "dev/nvidia-modeset"))
		}, want: 1, stdout: "not patched: nothing written because of the problems below\nerror  missing-host-path  device node /dev/nvidia-modeset does not exist on the host"},
		{name: "bad-flag", scenario: "nixos-h200", args: []string{"cdi", "patch", "--bogus"}, want: 2},
		{name: "locked", scenario: "nixos-h200", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			h, _ := hostfs.New(root)
			unlock, err := h.Lock(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unlock() })
		}, want: 75, stderr: "held by another nodeprep"},
		// issue 22: a value nodeprep does not patch held bytes that are not
		// UTF-8, and the patch wrote them back as U+FFFD without a word.
		{name: "env-not-utf8", scenario: "nixos-h200", args: []string{"cdi", "patch"}, prepare: func(t *testing.T, root string) {
			p := filepath.Join(root, specRel)
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data = bytes.Replace(data, []byte(`"env": [`), []byte("\"env\": [\n      \"NODEPREP_BAD=\xff\xfe\xc3\","), 1)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: 65, stderr: `column 21 is not UTF-8 (in "NODEPREP_BAD=\xff\xfe\xc3")`},
		{name: "env-not-utf8-dry-run", scenario: "nixos-h200", args: []string{"cdi", "patch", "--dry-run"}, prepare: func(t *testing.T, root string) {
			p := filepath.Join(root, specRel)
			data, _ := os.ReadFile(p)
			if err := os.WriteFile(p, bytes.Replace(data, []byte(`"env": [`), []byte("\"env\": [\"A=\xc3\","), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: 65, stderr: "not UTF-8"},
		// issue 22: a FIFO at the lock path blocked open() forever; it is
		// refused at once, --wait or not.
		{name: "lock-fifo", scenario: "nixos-h200", args: []string{"cdi", "patch", "--wait", "3s"}, prepare: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "run/nodeprep"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(root, "run/nodeprep/lock"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: 73, stderr: `taking lock "/run/nodeprep/lock": it is a named pipe (FIFO), not a regular file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := hostCopy(t, tt.scenario)
			if tt.prepare != nil {
				tt.prepare(t, root)
			}
			before, _ := os.ReadFile(filepath.Join(root, specRel))
			stdout, stderr, code := runCLI(t, append([]string{"--root", root}, tt.args...)...)
			if code != tt.want {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.want, stdout, stderr)
			}
			if strings.Contains(stdout, "already patched") && code != 0 {
				t.Errorf("\"already patched\" printed next to an error:\n%s", stdout)
			}
			if !strings.Contains(stderr, tt.stderr) || !strings.Contains(stdout, tt.stdout) {
				t.Errorf("output lacks %q / %q\nstdout:\n%s\nstderr:\n%s", tt.stdout, tt.stderr, stdout, stderr)
			}
			after, _ := os.ReadFile(filepath.Join(root, specRel))
			if changed := !bytes.Equal(before, after); changed != tt.changed {
				t.Errorf("spec changed = %v, want %v", changed, tt.changed)
			}
		})
	}
}

// TestCDICheckJSON: -o json prints the findings with stable field names,
// each that cdi patch fixes with "fixedByPatch": true (all 11 of the
// walkthrough's tree).
func TestCDICheckJSON(t *testing.T) {
	root := hostCopy(t, "nixos-h200")
	stdout, _, code := runCLI(t, "--root", root, "-o", "json", "cdi", "check", "--simulate", "dgx-h200")
	if code != 1 || !strings.Contains(stdout, `"code": "missing-icd"`) || !strings.Contains(stdout, `"severity": "error"`) {
		t.Fatalf("exit %d:\n%s", code, stdout)
	}
	var res struct {
		Findings []struct {
			Code         string `json:"code"`
			FixedByPatch *bool  `json:"fixedByPatch"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		if f.FixedByPatch == nil || !*f.FixedByPatch {
			t.Errorf("%s: fixedByPatch %v, want true", f.Code, f.FixedByPatch)
		}
	}
	if len(res.Findings) != 11 {
		t.Errorf("%d findings, want the walkthrough's 11", len(res.Findings))
	}
	if _, _, code := runCLI(t, "--root", root, "cdi", "patch"); code != 0 {
		t.Fatalf("patch exit %d", code)
	}
	if stdout, _, code := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200"); code != 0 {
		t.Fatalf("check after patch: exit %d\n%s", code, stdout)
	}
}

// TestCDICheckText: findings in aligned columns (severity, code, message
// start at the same offset on every line), device findings in GPU index
// order, each UUID once per line, then a count line.
func TestCDICheckText(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "broken-index-names")
	stdout, _, code := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200")
	if code != ExitCheckFailed {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if count := lines[len(lines)-2]; count != "/var/run/cdi/nvidia-container-toolkit.json: 15 errors, 4 warnings" {
		t.Errorf("count line = %q", count)
	}
	if last, want := lines[len(lines)-1], "nodeprep cdi patch fixes 11 of these 19, all but missing-device, once the errors among those are fixed (until then nodeprep up writes no patch)"; last != want {
		t.Errorf("last line = %q, want %q", last, want)
	}
	lines = lines[:len(lines)-2]
	msgCol, firstCodeCol := -1, -1
	var gpus []string
	for _, l := range lines {
		f := strings.Fields(l)
		codeCol := len(f[0]) + len(l[len(f[0]):]) - len(strings.TrimLeft(l[len(f[0]):], " "))
		rest := l[codeCol+len(f[1]):]
		col := len(l) - len(strings.TrimLeft(rest, " "))
		if msgCol < 0 {
			msgCol, firstCodeCol = col, codeCol
		}
		if col != msgCol || codeCol != firstCodeCol || codeCol != len("warning  ") {
			t.Errorf("columns not aligned:\n%s", stdout)
			break
		}
		if f[1] == "missing-device" {
			if n := strings.Count(l, "GPU-"); n != 1 {
				t.Errorf("line names %d UUIDs, want 1: %s", n, l)
			}
			_, after, _ := strings.Cut(l, "(GPU ")
			gpus = append(gpus, after[:1])
		}
	}
	if got := strings.Join(gpus, ""); got != "01234567" {
		t.Errorf("missing-device findings in GPU order %q, want 01234567", got)
	}
}

// TestCDIPatchDryRunReadsAsRun: a dry run prints the real run's summary
// and problems (only the verdict differs when it would succeed).
func TestCDIPatchDryRunReadsAsRun(t *testing.T) {
	t.Parallel()
	for _, scenario := range []string{"broken-no-icd", "broken-dangling-icd"} {
		root := hostCopy(t, scenario)
		dry, _, dryCode := runCLI(t, "--root", root, "cdi", "patch", "--dry-run")
		real, _, realCode := runCLI(t, "--root", root, "cdi", "patch")
		if dry != real || dryCode != realCode || realCode != ExitCheckFailed {
			t.Errorf("%s: dry run (exit %d):\n%s\nreal run (exit %d):\n%s", scenario, dryCode, dry, realCode, real)
		}
	}
	root := hostCopy(t, "nixos-h200")
	dry, _, _ := runCLI(t, "--root", root, "cdi", "patch", "--dry-run")
	real, _, _ := runCLI(t, "--root", root, "cdi", "patch")
	_, dryRest, _ := strings.Cut(dry, "\n")
	_, realRest, _ := strings.Cut(real, "\n")
	if dryRest != realRest || !strings.Contains(real, ": patched, 11 changes\n") {
		t.Errorf("dry run:\n%s\nreal run:\n%s", dry, real)
	}
}

// TestUpText: stages after a failure say which stage stopped them, the
// verdict names the stage (its reason is printed once, above), counts are
// pluralised.
func TestUpText(t *testing.T) {
	t.Parallel()
	stdout, _, code := runCLI(t, "--root", hostCopy(t, "broken-no-icd"), "up", "--simulate", "dgx-h200")
	if code != ExitCheckFailed {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	for _, want := range []string{"\n- selftest  skipped (cdi failed)\n", "\n- join      skipped (cdi failed)\n", "\nnot ready: cdi failed (", ", 9 graphics files, 8 device names checked"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, "no-icd-on-host"); n != 1 {
		t.Errorf("the reason is printed %d times, want once:\n%s", n, stdout)
	}
}

// TestUpTextLaterStageStops: when the join stage's input is invalid, up
// plans it before it acts, so the stages before it are skipped too and
// say which stage stopped them; the failed stage's line carries a summary.
func TestUpTextLaterStageStops(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	if err := os.MkdirAll(filepath.Join(root, "etc/rancher/k3s"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/rancher/k3s/config.yaml"), []byte("node-label: [a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _, code := runCLI(t, "--root", root, "up", "--simulate", "dgx-h200", "--allow-cpu-adapter")
	if code != ExitMalformed {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	for _, want := range []string{"\n- cdi       skipped (join failed)\n", "\n- selftest  skipped (join failed)\n", "ms  invalid input: nothing written\n", "\nnot ready: join failed ("} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// TestUpBlockedJoinIsSkipped: a self-test that fails under policy block
// stops the run before the join stage, which reads skipped (no drop-in),
// not ok from its plan; under policy taint the node joins tainted and the
// metrics say the self-test did not pass.
func TestUpBlockedJoinIsSkipped(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	stdout, _, code := runCLI(t, "--root", root, "-o", "json", "up", "--simulate", "dgx-h200")
	if code != ExitCheckFailed {
		t.Fatalf("exit %d\n%s", code, stdout)
	}
	var rep struct {
		Stages []struct{ Name, Status string }
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range rep.Stages {
		got[s.Name] = s.Status
	}
	if got["selftest"] != "failed" || got["join"] != "skipped" {
		t.Errorf("stages %v, want selftest failed and join skipped", got)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml")); err == nil {
		t.Error("a blocked node got a drop-in")
	}

	root = hostCopy(t, "nixos-h200")
	if _, _, code := runCLI(t, "--root", root, "up", "--simulate", "dgx-h200", "--on-selftest-failure", "taint", "--metrics-file", "/run/nodeprep/m.prom"); code != ExitOK {
		t.Fatalf("policy taint: exit %d", code)
	}
	prom, err := os.ReadFile(filepath.Join(root, "run/nodeprep/m.prom"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nodeprep_stage_ok{stage=\"selftest\"} 0\n", "nodeprep_tainted 1\n", "nodeprep_ready 1\n"} {
		if !strings.Contains(string(prom), want) {
			t.Errorf("metrics lack %q:\n%s", want, prom)
		}
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0 taints", 1: "1 taint", 2: "2 taints"} {
		if got := count(n, "taint"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestJSONListsNeverNull: lists in -o json are [] when empty, as in -o
// yaml, so `jq '.findings[]'` works on a clean spec.
func TestJSONListsNeverNull(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	if _, _, code := runCLI(t, "--root", root, "cdi", "patch"); code != ExitOK {
		t.Fatalf("patch: exit %d", code)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"cdi", "check", "--simulate", "dgx-h200", "--spec-dir", "/var/run/cdi"}, `"findings": [`},
		{[]string{"cdi", "patch", "--dry-run"}, `"changes": [`},
		{[]string{"join", "--simulate", "dgx-h200", "--dry-run"}, `"warnings": [`},
	} {
		stdout, stderr, code := runCLI(t, append([]string{"--root", root, "-o", "json"}, tt.args...)...)
		if code != ExitOK || strings.Contains(stdout, ": null") || !strings.Contains(stdout, tt.want) {
			t.Errorf("%v: exit %d, want %s and no null\n%s%s", tt.args, code, tt.want, stdout, stderr)
		}
	}
}

// TestPreflightFailureLeavesNoCacheDir: an output that cannot be written
// stops up before the self-test, so the shader cache directory (made only
// when the probes start) is not created.
func TestPreflightFailureLeavesNoCacheDir(t *testing.T) {
	t.Parallel()
	root := hostCopy(t, "nixos-h200")
	if err := os.WriteFile(filepath.Join(root, "blk"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, code := runCLI(t, "--root", root, "up", "--simulate", "dgx-h200", "--allow-cpu-adapter", "--metrics-file", "/blk/m.prom")
	if code != ExitCantWrite {
		t.Fatalf("exit %d, want %d", code, ExitCantWrite)
	}
	if _, err := os.Stat(filepath.Join(root, "run/nodeprep/shader-cache")); err == nil {
		t.Error("a run stopped by its preflight made the shader cache directory")
	}
}

// TestShaderCacheMadeBySelftestNotUp: up starts its probes before its plan
// is validated, so it never creates the shader cache directory (it uses
// one that exists); selftest, which writes nothing else, creates it.
func TestShaderCacheMadeBySelftestNotUp(t *testing.T) {
	t.Parallel()
	icd, egl := testkit.Mesa(t)
	bin := nodeprepBinary(t)
	root := hostCopy(t, "nixos-h200")
	cache := filepath.Join(root, "run/nodeprep/shader-cache")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--root", root}, args...)...)
		cmd.Env = append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
	}
	run("up", "--simulate", "dgx-h200", "--allow-cpu-adapter")
	if _, err := os.Stat(cache); err == nil {
		t.Error("up made the shader cache directory")
	}
	run("selftest", "--simulate", "dgx-h200", "--allow-cpu-adapter")
	if fi, err := os.Stat(cache); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("selftest did not make the shader cache directory 0700: %v %v", fi, err)
	}
}

// TestShaderCacheNotFollowed: the drivers write into the shader cache and
// load the shaders it holds, so up and selftest use
// /run/nodeprep/shader-cache only when it is a directory of this user's
// that no one else can write. A symlink there (even to a directory of the
// root's), a file or a world-writable directory turns the cache off: the
// run passes and nothing is written through it.
func TestShaderCacheNotFollowed(t *testing.T) {
	t.Parallel()
	icd, egl := testkit.Mesa(t)
	bin := nodeprepBinary(t)
	tests := []struct {
		name string
		// plant makes what stands at the cache's path and returns the
		// directory that must stay empty ("" for none).
		plant func(t *testing.T, root, cache string) string
	}{
		{"symlink to a directory", func(t *testing.T, root, cache string) string {
			if err := os.MkdirAll(filepath.Join(root, "var/lib/elsewhere"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/var/lib/elsewhere", cache); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(root, "var/lib/elsewhere")
		}},
		{"symlink inside to a directory outside the root", func(t *testing.T, root, cache string) string {
			// issue 22: only the cache itself was checked, and Mesa wrote
			// 1.3 MB through mesa_shader_cache into the outside directory.
			if err := os.Mkdir(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(cache, "mesa_shader_cache")); err != nil {
				t.Fatal(err)
			}
			return outside
		}},
		{"file", func(t *testing.T, root, cache string) string {
			if err := os.WriteFile(cache, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"world-writable directory", func(t *testing.T, root, cache string) string {
			if err := os.Mkdir(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(cache, 0o777); err != nil {
				t.Fatal(err)
			}
			return cache
		}},
	}
	for _, tt := range tests {
		for _, command := range []string{"up", "selftest"} {
			t.Run(tt.name+"/"+command, func(t *testing.T) {
				t.Parallel()
				root := hostCopy(t, "nixos-h200")
				cache := filepath.Join(root, "run/nodeprep/shader-cache")
				if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
					t.Fatal(err)
				}
				empty := tt.plant(t, root, cache)
				cmd := exec.Command(bin, "--root", root, command, "--simulate", "dgx-h200", "--allow-cpu-adapter")
				cmd.Env = append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if empty == "" {
					return
				}
				if ents, err := os.ReadDir(empty); err != nil || len(ents) > 0 {
					t.Errorf("the drivers wrote through the planted cache into %s: %v %v", empty, ents, err)
				}
			})
		}
	}
}

// TestPatchOtherSpecOnly: when only another spec the runtime serves is
// rewritten (a stale /etc/cdi copy), cdi patch says what it wrote, never
// "(dry run: nothing written)", and a second check is clean.
func TestPatchOtherSpecOnly(t *testing.T) {
	root := hostCopy(t, "stale-etc-cdi")
	stale := filepath.Join(root, "etc/cdi/nvidia.json")
	unpatched, err := os.ReadFile(stale)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, code := runCLI(t, "--root", root, "cdi", "patch"); code != 0 {
		t.Fatalf("first patch: exit %d", code)
	}
	if err := os.WriteFile(stale, unpatched, 0o644); err != nil { // the stale copy comes back
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "--root", root, "cdi", "patch")
	if code != 0 || strings.Contains(out, "dry run") || !strings.Contains(out, "already patched, unchanged, and ") || !strings.Contains(out, "/etc/cdi/nvidia.json: add vulkan-icd") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
	if after, _ := os.ReadFile(stale); string(after) == string(unpatched) {
		t.Error("the stale spec was not written")
	}
	if out, _, code := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200"); code != 0 || strings.Contains(out, "missing-device") {
		t.Errorf("check after the patch: exit %d\n%s", code, out)
	}
}

// TestCheckNamesSpecsLeftAsTheyAre: the DRA driver's per-claim spec and its
// VFIO spec are served GPU specs nodeprep does not patch; cdi check and cdi
// patch name each with the reason, in text and in JSON, before and after
// the patch, and the exit status stays that of the findings.
func TestCheckNamesSpecsLeftAsTheyAre(t *testing.T) {
	root := hostCopy(t, "dra-driver")
	claim := "/var/run/cdi/k8s.gpu.nvidia.com-claim_3f2a9c1e-7b4d-4e8a-9c2f-1d5e6b7a8c90.yaml"
	vfio := "/var/run/cdi/k8s.gpu.nvidia.com-device_vfio.yaml"
	names := func(what, out string) {
		t.Helper()
		for _, want := range []string{
			"note not-patched " + claim + " (k8s.gpu.nvidia.com/claim) is left as it is: a DRA per-claim spec",
			"note not-patched " + vfio + " (k8s.gpu.nvidia.com/device) is left as it is: VFIO passthrough",
		} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), want) { // columns are padded
				t.Errorf("%s does not say %q:\n%s", what, want, out)
			}
		}
	}
	out, _, code := runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200")
	if code != 1 {
		t.Fatalf("check before the patch: exit %d, want 1\n%s", code, out)
	}
	names("check", out)
	out, _, code = runCLI(t, "--root", root, "cdi", "patch")
	if code != 0 {
		t.Fatalf("patch: exit %d\n%s", code, out)
	}
	names("patch", out)
	out, _, code = runCLI(t, "--root", root, "cdi", "check", "--simulate", "dgx-h200")
	if code != 0 || !strings.HasSuffix(out, ": ok\n") {
		t.Fatalf("check after the patch: exit %d, want 0 and ok\n%s", code, out)
	}
	names("check after the patch", out)
	out, _, _ = runCLI(t, "--root", root, "-o", "json", "cdi", "check", "--simulate", "dgx-h200")
	var res struct {
		NotPatched []struct{ Spec, Kind, Reason string } `json:"notPatched"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.NotPatched) != 2 || res.NotPatched[0].Spec != claim || res.NotPatched[1].Spec != vfio || res.NotPatched[0].Reason == "" {
		t.Errorf("notPatched = %+v", res.NotPatched)
	}
}

// TestPatchFixesLine: cdi check's last line says how many findings cdi
// patch fixes, which codes it does not, and when it writes nothing yet;
// none for no finding.
func TestPatchFixesLine(t *testing.T) {
	t.Parallel()
	fix := func(code string) cdi.Finding {
		return cdi.Finding{Severity: cdi.SeverityError, Code: code, FixedByPatch: true}
	}
	keep := func(code string) cdi.Finding { return cdi.Finding{Severity: cdi.SeverityWarning, Code: code} }
	tests := []struct {
		name string
		fs   cdi.Findings
		held int
		want string
	}{
		{"no finding", nil, 0, ""},
		{"all", cdi.Findings{fix("missing-icd"), fix("missing-glvnd")}, 0,
			"nodeprep cdi patch fixes 2 of these 2 (run it, or let nodeprep up do it at boot)"},
		{"some", cdi.Findings{fix("missing-icd"), keep("shadowed-device"), keep("missing-all-device"), keep("shadowed-device")}, 0,
			"nodeprep cdi patch fixes 1 of these 4, all but shadowed-device, missing-all-device (run it, or let nodeprep up do it at boot)"},
		{"none", cdi.Findings{keep("missing-device")}, 0, "nodeprep cdi patch fixes none of these"},
		{"held", cdi.Findings{keep("no-icd-on-host"), fix("missing-glvnd")}, 1,
			"nodeprep cdi patch fixes 1 of these 2, all but no-icd-on-host, once the errors among those are fixed (until then nodeprep up writes no patch)"},
		{"partly held", cdi.Findings{keep("missing-device"), fix("missing-glvnd"), fix("missing-icd")}, 1,
			"nodeprep cdi patch fixes 2 of these 3, all but missing-device (run it, or let nodeprep up do it at boot); 1 of them only once the errors among the others are fixed"},
	}
	for _, tt := range tests {
		if got := patchFixesLine(tt.fs, tt.held); got != tt.want {
			t.Errorf("%s:\n%q\nwant\n%q", tt.name, got, tt.want)
		}
	}
}

// TestCDICheckWalkthrough: on the README's tree cdi check ends by saying
// that cdi patch fixes every one of its 11 findings.
func TestCDICheckWalkthrough(t *testing.T) {
	t.Parallel()
	stdout, _, code := runCLI(t, "--root", hostCopy(t, "nixos-h200"), "cdi", "check", "--simulate", "dgx-h200")
	want := "/var/run/cdi/nvidia-container-toolkit.json: 7 errors, 4 warnings\nnodeprep cdi patch fixes 11 of these 11 (run it, or let nodeprep up do it at boot)\n"
	if code != ExitCheckFailed || !strings.HasSuffix(stdout, want) {
		t.Errorf("exit %d, stdout\n%s\nwant it to end\n%s", code, stdout, want)
	}
}
