package app

import (
	"bytes"
	"strings"
	"testing"
)

// runVoice runs nodeprep as Main does (the globals decide how the final
// error is printed) and returns stdout, stderr and the exit code.
func runVoice(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root, g := newRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	code = g.report(execute(root, g, args))
	return out.String(), errOut.String(), code
}

// saidOnce fails when stderr repeats a line, or says again what stdout
// already says: each message reaches the user once.
func saidOnce(t *testing.T, stdout, stderr string) {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if line == "" {
			continue
		}
		if seen[line] {
			t.Errorf("stderr repeats %q:\n%s", line, stderr)
		}
		seen[line] = true
		msg := line
		for _, p := range []string{"nodeprep: error: ", "nodeprep: warning: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		if _, after, ok := strings.Cut(msg, ": "); ok && len(after) > 30 && strings.Contains(stdout, after) {
			t.Errorf("stderr repeats what stdout says: %q", after)
		}
	}
}

// TestStderrVoice: in text mode every warning and error is one line in
// nodeprep's voice, said once; a failed up's reason is in its report
// (stdout) only.
func TestStderrVoice(t *testing.T) {
	t.Parallel()
	registered := map[string]string{"/var/lib/rancher/k3s/agent/client-kubelet.crt": "x"}
	tests := []struct {
		name   string
		root   func(t *testing.T) string
		args   []string
		code   int
		stderr []string // the exact stderr lines, by prefix
		stdout string   // in stdout, once
	}{
		{name: "up-failed", root: func(t *testing.T) string { return hostCopy(t, "broken-no-icd") },
			args: []string{"up", "--simulate", "dgx-h200"}, code: ExitCheckFailed, stdout: "no-icd-on-host: no Vulkan ICD manifest"},
		{name: "up-failed-json", root: func(t *testing.T) string { return hostCopy(t, "broken-no-icd") },
			args: []string{"up", "--simulate", "dgx-h200", "-o", "json"}, code: ExitCheckFailed,
			stderr: []string{"nodeprep: error: node not ready: CDI spec "}},
		{name: "join-require-unregistered", root: func(t *testing.T) string { return joinHost(t, registered) },
			args: []string{"join", "--gfd-labels=false", "--require-unregistered"}, code: ExitCheckFailed,
			stderr: []string{"nodeprep: error: the node has already registered"}},
		{name: "join-registered-warns", root: func(t *testing.T) string { return joinHost(t, registered) },
			args: []string{"join", "--gfd-labels=false"}, code: ExitOK,
			stderr: []string{"nodeprep: warning: the node has already registered"}},
		{name: "usage", root: func(t *testing.T) string { return t.TempDir() },
			args: []string{"inspect", "--bogus"}, code: ExitUsage, stderr: []string{"nodeprep: error: unknown flag: --bogus"}},
		{name: "check-failed", root: func(t *testing.T) string { return hostCopy(t, "nixos-h200") },
			args: []string{"cdi", "check", "--simulate", "dgx-h200"}, code: ExitCheckFailed, stdout: "missing-icd "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := runVoice(t, append([]string{"--root", tt.root(t)}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			saidOnce(t, stdout, stderr)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if stderr == "" {
				lines = nil
			}
			if len(lines) != len(tt.stderr) {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(tt.stderr), stderr)
			}
			for i, want := range tt.stderr {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("stderr line %d = %q, want prefix %q", i, lines[i], want)
				}
			}
			if tt.stdout != "" && strings.Count(stdout, tt.stdout) != 1 {
				t.Errorf("stdout says %q %d times, want once:\n%s", tt.stdout, strings.Count(stdout, tt.stdout), stdout)
			}
		})
	}
}

// TestStderrStructured: with -v, or under journald (JOURNAL_STREAM), the
// log is slog's key=value form and the final error is a record too.
func TestStderrStructured(t *testing.T) {
	registered := map[string]string{"/var/lib/rancher/k3s/agent/client-kubelet.crt": "x"}
	check := func(t *testing.T, args ...string) {
		t.Helper()
		_, stderr, code := runVoice(t, append([]string{"--root", joinHost(t, registered), "join", "--gfd-labels=false", "--require-unregistered"}, args...)...)
		if code != ExitCheckFailed || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "level=ERROR msg=") || strings.Contains(stderr, "nodeprep: error:") {
			t.Errorf("exit %d, stderr:\n%s\nwant one level=ERROR record", code, stderr)
		}
	}
	t.Run("verbose", func(t *testing.T) { check(t, "-v") })
	t.Run("journald", func(t *testing.T) {
		t.Setenv("JOURNAL_STREAM", "8:1234")
		check(t)
	})
}
