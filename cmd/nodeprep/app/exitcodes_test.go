package app

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// documentedExitCodes reads docs/exit-codes.md's table: code → meaning.
func documentedExitCodes(t *testing.T) map[int]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testkit.RepoRoot(t), "docs/exit-codes.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \| (.*) \|$`).FindAllStringSubmatch(string(data), -1) {
		code, _ := strconv.Atoi(m[1])
		out[code] = m[2]
	}
	return out
}

// TestExitPathsDocumented walks exit paths, the ordinary and those the
// adversarial run found (issue 22: a config.yaml.d that is a regular file
// exited 69, which docs/exit-codes.md did not list; it is now 65, k3s would
// not start with it): each code is in the
// table, and its row names the case.
func TestExitPathsDocumented(t *testing.T) {
	t.Parallel()
	doc := documentedExitCodes(t)
	for _, c := range []int{ExitOK, ExitCheckFailed, ExitUsage, ExitMalformed, ExitUnavailable, ExitCantWrite, ExitLocked} {
		if _, ok := doc[c]; !ok {
			t.Errorf("exit code %d is not in docs/exit-codes.md", c)
		}
	}
	write := func(rel, data string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			p := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, root string)
		args    []string
		code    int
		doc     string // what the code's row says of this case
	}{
		{"patched", nil, []string{"cdi", "patch"}, ExitOK, "ok"},
		{"lint problems", nil, []string{"cdi", "check", "--simulate", "dgx-h200"}, ExitCheckFailed, "lint problems"},
		{"unknown flag", nil, []string{"cdi", "patch", "--bogus"}, ExitUsage, "unknown flag"},
		{"metrics file is the status file", nil, []string{"up", "--simulate", "dgx-h200", "--metrics-file", "/run/nodeprep/status.json"}, ExitUsage, "two outputs at one path"},
		{"status file names a directory", nil, []string{"up", "--simulate", "dgx-h200", "--status-file", "/run/nodeprep/"}, ExitUsage, "ending in `/`"},
		{"no status file", nil, []string{"status"}, ExitUnavailable, "no status file"},
		{"status file that is not a report", write("run/nodeprep/status.json", "{}\n"), []string{"status"}, ExitMalformed, "a status file that is not a report"},
		{"derived label", nil, []string{"join", "--simulate", "dgx-h200", "--label", "nvidia.com/gpu.count=99"}, ExitMalformed, "derives from facts"},
		{"config over its size limit", func(t *testing.T, root string) {
			write("etc/nodeprep/config.yaml", "")(t, root)
			if err := os.Truncate(filepath.Join(root, "etc/nodeprep/config.yaml"), 1<<20+1); err != nil {
				t.Fatal(err)
			}
		}, []string{"cdi", "patch"}, ExitMalformed, "size limit"},
		{"config.yaml.d is a regular file", write("etc/rancher/k3s/config.yaml.d", "x\n"), []string{"join", "--simulate", "dgx-h200"}, ExitMalformed, "a k3s configuration k3s would not start with"},
		{"FIFO at the lock", func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "run/nodeprep"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(filepath.Join(root, "run/nodeprep/lock"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"join", "--simulate", "dgx-h200"}, ExitCantWrite, "`/run/nodeprep/lock`"},
		{"locked", func(t *testing.T, root string) {
			h, _ := hostfs.New(root)
			unlock, err := h.Lock(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unlock() })
		}, []string{"cdi", "patch"}, ExitLocked, "holds the lock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostCopy(t, "nixos-h200")
			if tt.prepare != nil {
				tt.prepare(t, root)
			}
			stdout, stderr, code := runCLI(t, append([]string{"--root", root}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			row, ok := doc[code]
			if !ok {
				t.Fatalf("exit %d is not in docs/exit-codes.md", code)
			}
			if !strings.Contains(row, tt.doc) {
				t.Errorf("docs/exit-codes.md's row for %d does not say %q: %s", code, tt.doc, row)
			}
		})
	}
}
