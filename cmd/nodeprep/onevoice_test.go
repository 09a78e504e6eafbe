package main_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestSelftestContainerOneVoice runs the in-container self-test as the
// README shows it (--container --rootfs, lavapipe standing in, so
// --allow-cpu-adapter and --require-egl=false) on the demo's host tree,
// where the fake driver fails inside, and on a lavapipe host
// (scripts/make-lavapipe-host.sh), where it passes. Either way stderr holds
// at most one short line per problem in the one-voice form ("nodeprep:
// warning: …" / "nodeprep: error: …"), and what was adapted for a host tree
// is one note line per container on stdout; -v lists every adaptation.
func TestSelftestContainerOneVoice(t *testing.T) {
	rootfs := testkit.ContainerRootfs(t)
	icd, egl := lavapipe(t)
	env := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	lvp := filepath.Join(t.TempDir(), "lavapipe")
	testkit.LavapipeHost(t, lvp, simulatedUUIDs(t))
	for _, tc := range []struct {
		name, root string
		code       int
	}{
		{"demo tree", testkit.HostCopy(t, "nixos-h200"), 1},
		{"lavapipe host", lvp, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := run(t, nil, "cdi", "patch", "--root", tc.root); r.code != 0 {
				t.Fatalf("cdi patch: exit %d\n%s", r.code, r.stderr)
			}
			args := []string{"selftest", "--root", tc.root, "--simulate", "dgx-h200", "--allow-cpu-adapter",
				"--container", "--rootfs", rootfs, "--require-egl=false"}
			r := run(t, env, args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", r.code, tc.code, r.stdout, r.stderr)
			}
			if lines := nonEmptyLines(r.stderr); len(lines) > 2 {
				t.Errorf("stderr has %d lines, want at most 2:\n%s", len(lines), r.stderr)
			}
			for _, l := range nonEmptyLines(r.stderr) {
				if len(l) > 300 || !strings.HasPrefix(l, "nodeprep: warning: ") && !strings.HasPrefix(l, "nodeprep: error: ") {
					t.Errorf("stderr line (%d bytes) is not one short nodeprep: warning:/error: line: %.200q", len(l), l)
				}
			}
			containers, notes := strings.Count(r.stdout, "\nContainer "), strings.Count(r.stdout, "  note: ")
			if containers == 0 || notes != containers || !strings.Contains(r.stdout, "(a host tree; -v lists them)") {
				t.Errorf("%d containers, %d note lines, want one summary each:\n%s", containers, notes, r.stdout)
			}
			v := run(t, env, append(args, "-v")...)
			if n := strings.Count(v.stdout, "  note: "); n <= containers || strings.Contains(v.stdout, "-v lists them") {
				t.Errorf("-v lists %d notes for %d containers, want each adaptation:\n%s", n, containers, v.stdout)
			}
		})
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
