package main_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heartbeatScript is scripts/heartbeat.sh, from this package's directory.
var heartbeatScript = filepath.Join("..", "..", "scripts", "heartbeat.sh")

// heartbeatLine is one line the heartbeat prints for the label "step".
var heartbeatLine = regexp.MustCompile(`(?m)^step: still running \(\d+ s\)`)

// heartbeatCommand returns the heartbeat around argv with an interval of
// every seconds, in dir, marked by an environment variable that
// heartbeatLeft looks for.
func heartbeatCommand(t *testing.T, dir string, every int, argv ...string) (*exec.Cmd, string) {
	t.Helper()
	script, err := filepath.Abs(heartbeatScript)
	if err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("NODEPREP_HEARTBEAT_TEST=%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	cmd := exec.Command("bash", append([]string{script, "step"}, argv...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), fmt.Sprintf("HEARTBEAT_SECONDS=%d", every), mark)
	return cmd, mark
}

// heartbeatLeft lists the processes that carry mark in their environment:
// what a heartbeat left running.
func heartbeatLeft(t *testing.T, mark string) []string {
	t.Helper()
	envs, err := filepath.Glob("/proc/[0-9]*/environ")
	if err != nil || len(envs) == 0 {
		t.Fatalf("no /proc to look for processes in (%v)", err)
	}
	var left []string
	for _, f := range envs {
		env, err := os.ReadFile(f)
		if err != nil {
			continue // gone, or not ours
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if string(kv) == mark {
				cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(f), "cmdline"))
				left = append(left, filepath.Base(filepath.Dir(f))+": "+string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
			}
		}
	}
	return left
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestHeartbeat: scripts/heartbeat.sh, which the Makefile's long steps and
// build-tools.sh's component builds run under, prints "LABEL: still
// running (N s)" on stderr every HEARTBEAT_SECONDS while its command runs,
// names the Go test binaries running under it by package directory, leaves
// the command's output and exit status as they are, and stops at once when
// the command exits, leaving no process behind.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	t.Run("beats", func(t *testing.T) {
		t.Parallel()
		cmd, mark := heartbeatCommand(t, ".", 1, "sh", "-c", "echo out; echo err >&2; sleep 4.5")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		if stdout.String() != "out\n" {
			t.Errorf("stdout %q, want the command's own, \"out\\n\"", stdout.String())
		}
		if n := len(heartbeatLine.FindAllString(stderr.String(), -1)); n < 2 || !strings.HasPrefix(stderr.String(), "err\n") {
			t.Errorf("stderr has the command's \"err\" then %d heartbeat lines, want it first and at least 2:\n%s", n, stderr.String())
		}
		if left := heartbeatLeft(t, mark); len(left) != 0 {
			t.Errorf("left running: %q", left)
		}
	})
	t.Run("exit status", func(t *testing.T) {
		t.Parallel()
		cmd, mark := heartbeatCommand(t, ".", 1, "sh", "-c", "exit 3")
		out, err := cmd.CombinedOutput()
		if code := exitCode(t, err); code != 3 || len(out) != 0 {
			t.Errorf("exit %d, output %q; want 3 and nothing", code, out)
		}
		if left := heartbeatLeft(t, mark); len(left) != 0 {
			t.Errorf("left running: %q", left)
		}
	})
	t.Run("stops at once", func(t *testing.T) {
		t.Parallel()
		// With the default 30 s, a command of 1 s: the heartbeat must not
		// hold the call (nor its output pipe) until its next beat.
		cmd, mark := heartbeatCommand(t, ".", 30, "sleep", "1")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if took := time.Since(start); err != nil || len(out) != 0 || took > 15*time.Second {
			t.Errorf("took %v, %v, output %q; want about 1 s, success, nothing", took, err, out)
		}
		if left := heartbeatLeft(t, mark); len(left) != 0 {
			t.Errorf("left running: %q", left)
		}
	})
	t.Run("names test binaries", func(t *testing.T) {
		t.Parallel()
		// What go test runs: PKG.test, in the package's directory.
		dir := t.TempDir()
		sleep, err := exec.LookPath("sleep")
		if err != nil {
			t.Skip(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "some", "pkg"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(sleep, filepath.Join(dir, "some", "pkg", "pkg.test")); err != nil {
			t.Fatal(err)
		}
		cmd, _ := heartbeatCommand(t, dir, 1, "sh", "-c", "cd some/pkg && ./pkg.test 2.5")
		out, err := cmd.CombinedOutput()
		if err != nil || !regexp.MustCompile(`(?m)^step: still running \(\d+ s\): testing some/pkg$`).Match(out) {
			t.Errorf("%v; want a line naming the test binary's package some/pkg:\n%s", err, out)
		}
	})
	t.Run("HEARTBEAT_SECONDS=0", func(t *testing.T) {
		t.Parallel()
		cmd, _ := heartbeatCommand(t, ".", 0, "sh", "-c", "sleep 1.5; exit 4")
		out, err := cmd.CombinedOutput()
		if code := exitCode(t, err); code != 4 || len(out) != 0 {
			t.Errorf("exit %d, output %q; want 4 and no heartbeat", code, out)
		}
	})
}

// TestHeartbeatSignals: SIGTERM to the heartbeat, or SIGINT to its process
// group as Ctrl-C sends it, ends the command and the heartbeat at once, by
// that signal, leaving no process behind.
func TestHeartbeatSignals(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal
		group bool
	}{
		{"SIGTERM", syscall.SIGTERM, false},
		{"Ctrl-C", syscall.SIGINT, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.sig == syscall.SIGINT && sigintIgnored(t) {
				t.Skip("this test runs with SIGINT ignored (started in the background), which its children inherit")
			}
			cmd, mark := heartbeatCommand(t, ".", 1, "sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Neither read may hang the test: a heartbeat that never
			// beats, or never ends, is killed after a while.
			kill := time.AfterFunc(30*time.Second, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
			defer kill.Stop()
			r := bufio.NewReader(stderr)
			first, err := r.ReadString('\n')
			if err != nil || !heartbeatLine.MatchString(first) {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				cmd.Wait()
				t.Fatalf("first line %q, %v; want a heartbeat", first, err)
			}
			target := cmd.Process.Pid
			if tc.group {
				target = -target
			}
			start := time.Now()
			if err := syscall.Kill(target, tc.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(r)
			err = cmd.Wait()
			took := time.Since(start)
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != tc.sig || took > 10*time.Second {
				t.Errorf("after %v: %v in %v; want it ended by %v at once\n%s", tc.sig, err, took, tc.sig, rest)
			}
			if left := heartbeatLeft(t, mark); len(left) != 0 {
				t.Errorf("left running: %q", left)
			}
		})
	}
}

// sigintIgnored says whether this process ignores SIGINT (SigIgn in
// /proc/self/status, bit 2).
func sigintIgnored(t *testing.T) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SigIgn:\s*([0-9a-f]+)$`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no SigIgn in /proc/self/status")
	}
	var mask uint64
	fmt.Sscanf(string(m[1]), "%x", &mask)
	return mask&(1<<(syscall.SIGINT-1)) != 0
}

// TestLongStepsHaveHeartbeat: every Makefile step that can take minutes
// runs under scripts/heartbeat.sh (make -n prints each command), and
// build-tools.sh builds each component under it, named in the label.
func TestLongStepsHaveHeartbeat(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	repo := filepath.Join("..", "..")
	cmd := exec.Command("make", "-n", "build", "vet", "lint", "unit", "rootfs", "demo")
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n: %v\n%s", err, out)
	}
	for _, long := range []string{" build -trimpath", " vet ./...", "staticcheck ./...", " test -count=1", "make-test-rootfs.sh", "demo.sh"} {
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, long) {
				continue
			}
			found = true
			if !strings.Contains(line, "heartbeat.sh") {
				t.Errorf("make runs %q without scripts/heartbeat.sh: %s", long, line)
			}
		}
		if !found {
			t.Errorf("make -n prints no command with %q:\n%s", long, out)
		}
	}
	script, err := os.ReadFile(filepath.Join(repo, "scripts", "build-tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"\$hb" "build-tools \(\$c\)" go build `).Match(script) {
		t.Error(`scripts/build-tools.sh does not run go build under heartbeat.sh ("$hb" "build-tools ($c)" go build …)`)
	}
}
