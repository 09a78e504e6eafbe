package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func TestContainerUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	err := Run([]string{"--root", t.TempDir(), "selftest", "--simulate", "dgx-h200", "--container"}, IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	if got := ExitCode(err); got != ExitUsage || !strings.Contains(err.Error(), "--container needs --rootfs") {
		t.Fatalf("exit %d (%v), want %d: --container needs --rootfs", got, err, ExitUsage)
	}
}

// TestRootfsRelative: --rootfs names a directory on this machine, and a
// relative one is taken from the working directory, as a shell user means
// it (it was refused: "want an absolute path"). up's preflight names the
// directory it resolved to; an existing relative directory passes it, and
// the missing runtime is then what stops the run.
func TestRootfsRelative(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	up := func(rootfs string) (string, int) {
		_, stderr, code := runCLI(t, "--root", hostCopy(t, "nixos-h200"), "up", "--simulate", "dgx-h200", "--allow-cpu-adapter",
			"--container", "--rootfs", rootfs, "--oci-runtime", "/nonexistent/runc")
		return stderr, code
	}
	stderr, code := up("no-such-rootfs")
	if want := "rootfs " + filepath.Join(wd, "no-such-rootfs") + ":"; code != ExitUnavailable || !strings.Contains(stderr, want) {
		t.Errorf("--rootfs no-such-rootfs: exit %d, want %d naming %q:\n%s", code, ExitUnavailable, want, stderr)
	}
	rel, err := filepath.Rel(wd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stderr, code = up(rel)
	if code != ExitUnavailable || strings.Contains(stderr, "rootfs") || !strings.Contains(stderr, "/nonexistent/runc") {
		t.Errorf("--rootfs %s (a directory): exit %d, want %d for the missing runtime only:\n%s", rel, code, ExitUnavailable, stderr)
	}
}

// TestSelftestReportShape: the container report is a section of the host
// report, in JSON and YAML alike.
func TestSelftestReportShape(t *testing.T) {
	t.Parallel()
	both := selftestReport{
		Report:    &selftest.Report{Passed: true, Matches: []selftest.Match{}},
		Container: &container.Report{Passed: false, Runtime: "/usr/sbin/runc", Containers: []container.Container{}},
	}
	j, err := json.Marshal(both)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(both)
	if err != nil {
		t.Fatal(err)
	}
	for name, unmarshal := range map[string]func() (map[string]any, error){
		"json": func() (m map[string]any, err error) { return m, json.Unmarshal(j, &m) },
		"yaml": func() (m map[string]any, err error) { return m, yaml.Unmarshal(y, &m) },
	} {
		m, err := unmarshal()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m["passed"] != true || m["vulkan"] == nil {
			t.Errorf("%s: host fields not at the top level: %v", name, m)
		}
		c, ok := m["container"].(map[string]any)
		if !ok || c["runtime"] != "/usr/sbin/runc" || c["passed"] != false {
			t.Errorf("%s: container section %v", name, m["container"])
		}
	}
}

func TestContainerExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kind selftest.ReasonKind
		code int
	}{
		{"runtime missing", container.ReasonRuntimeMissing, ExitUnavailable},
		{"rootfs missing", container.ReasonRootfsUnavailable, ExitUnavailable},
		{"device unresolvable", container.ReasonCDIUnresolvable, ExitCheckFailed},
		{"mount source missing", container.ReasonMountSourceMissing, ExitCheckFailed},
		{"no driver", selftest.ReasonIncompatibleDriver, ExitCheckFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := containerExit(&container.Report{Reasons: []selftest.Reason{{Kind: tc.kind, Message: "m"}}}, false)
			if got := ExitCode(err); got != tc.code || !errors.Is(err, container.ErrFailed) {
				t.Errorf("exit %d (%v), want %d wrapping ErrFailed", got, err, tc.code)
			}
		})
	}
	if err := containerExit(&container.Report{Passed: true}, true); err != nil {
		t.Errorf("passed: %v", err)
	}
}

func TestContainerText(t *testing.T) {
	t.Parallel()
	rep := &container.Report{
		Runtime: "/usr/sbin/runc", Rootfs: "/rootfs", Spec: "/var/run/cdi/nvidia-container-toolkit.json",
		Containers: []container.Container{{
			Devices: []string{"nvidia.com/gpu=GPU-x"}, Notes: []string{"device node /dev/nvidia0 not created"}, DurationMS: 90,
			Selftest: &selftest.Report{Passed: true, Vulkan: selftest.VulkanReport{Loader: "libvulkan.so.1"}, EGL: selftest.EGLReport{Library: "libEGL.so.1"}},
		}},
		Passed: true, DurationMS: 91,
	}
	var b bytes.Buffer
	if err := writeContainerText(&b, rep, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"In-container self-test (runtime /usr/sbin/runc, rootfs /rootfs",
		"Container 0: nvidia.com/gpu=GPU-x (90 ms)",
		"  note: device node /dev/nvidia0 not created\n",
		"\n  Vulkan (loader libvulkan.so.1)\n",
		"\n  self-test passed (0 ms)\n",
		"in-container self-test passed (91 ms)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestContainerNoteSummary: without -v a container's notes are one line
// that counts them by kind; with -v each is its own line.
func TestContainerNoteSummary(t *testing.T) {
	t.Parallel()
	var notes []string
	for i := range 24 {
		notes = append(notes, fmt.Sprintf("device node /dev/nvidia%d (host /dev/nvidia%d) not created: not a character device (a host tree)", i, i))
	}
	notes = append(notes, "hook /usr/bin/nvidia-cdi-hook update-ldcache not run: not an executable here (a host tree)", "the probe runs as /nodeprep")
	rep := &container.Report{Containers: []container.Container{{Devices: []string{"nvidia.com/gpu=all"}, Notes: notes}}}
	var quiet, verbose bytes.Buffer
	if err := writeContainerText(&quiet, rep, false); err != nil {
		t.Fatal(err)
	}
	if err := writeContainerText(&verbose, rep, true); err != nil {
		t.Fatal(err)
	}
	want := "  note: 24 device nodes not created, 1 hook not run, 1 other adaptation (a host tree; -v lists them)\n"
	if strings.Count(quiet.String(), "note:") != 1 || !strings.Contains(quiet.String(), want) {
		t.Errorf("without -v:\n%s\nwant the one line %q", quiet.String(), want)
	}
	if got := strings.Count(verbose.String(), "  note: "); got != len(notes) {
		t.Errorf("with -v: %d note lines, want %d:\n%s", got, len(notes), verbose.String())
	}
}

// TestSelftestContainerRuntimeMissing runs the command with a runtime that
// does not exist: the host self-test still reports, the container section
// says why, and the exit status is 69.
func TestSelftestContainerRuntimeMissing(t *testing.T) {
	t.Parallel()
	icd, egl := testkit.Mesa(t)
	bin := nodeprepBinary(t)
	cmd := exec.Command(bin, "--root", t.TempDir(), "-o", "json", "selftest", "--simulate", "dgx-h200", "--allow-cpu-adapter",
		"--container", "--rootfs", t.TempDir(), "--oci-runtime", "/nonexistent/runc")
	cmd.Env = append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitUnavailable {
		t.Fatalf("%v, want exit %d; stderr %s", err, ExitUnavailable, stderr.String())
	}
	var got struct {
		Passed    bool              `json:"passed"`
		Container *container.Report `json:"container"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if !got.Passed {
		t.Errorf("the host self-test failed: %s", stdout.String())
	}
	if c := got.Container; c == nil || c.Passed || len(c.Reasons) != 1 || c.Reasons[0].Kind != container.ReasonRuntimeMissing {
		t.Errorf("container section %+v, want one runtime-missing reason", c)
	}
}
