package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFirstBuildNote: `make build` and `make unit` say that a first build
// compiles everything (and where docs/development.md says what that costs)
// only when it does — when the build cache lacks go-nvml's cgo package for
// these flags (scripts/first-build-note.sh): an empty GOCACHE gets the
// note, the warm cache of this run gets nothing.
func TestFirstBuildNote(t *testing.T) {
	if testing.Short() {
		t.Skip("builds go-nvml when the cache lacks it; skipped with -short")
	}
	repo := filepath.Join("..", "..")
	script := filepath.Join("scripts", "first-build-note.sh") // from repo
	warm := exec.Command("go", "build", "-trimpath", "github.com/NVIDIA/go-nvml/pkg/nvml")
	warm.Dir = repo
	if out, err := warm.CombinedOutput(); err != nil {
		t.Fatalf("go build go-nvml: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"cold", []string{"GOCACHE=" + t.TempDir()}, "NOTE\n"},
		{"warm", nil, ""},
	} {
		cmd := exec.Command("bash", script, "NOTE", "-trimpath")
		cmd.Dir, cmd.Env = repo, append(os.Environ(), tc.env...)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != tc.want {
			t.Errorf("%s cache: %q, %v; want %q", tc.name, out, err, tc.want)
		}
	}
	if _, err := exec.LookPath("make"); err != nil {
		return
	}
	for _, target := range []string{"build", "unit"} {
		cmd := exec.Command("make", "-n", target)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "first-build-note.sh") || strings.Contains(string(out), "echo \"building nodeprep (first build") {
			t.Errorf("make -n %s: the note is not left to first-build-note.sh (%v):\n%s", target, err, out)
		}
	}
}

// TestColdCostsInOnePlace: what a cold run costs is written in one place
// each — the whole runs in the README, each step in docs/development.md's
// "What a cold run costs", which the README links — so the notes the
// Makefile and the scripts print point there and carry no minutes of
// their own that would go stale.
func TestColdCostsInOnePlace(t *testing.T) {
	t.Parallel()
	repo := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Skipf("no README here (the Nix build copies only the Go tree): %v", err)
	}
	dev, err := os.ReadFile(filepath.Join(repo, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dev), "\n## What a cold run costs\n") || !strings.Contains(string(readme), "(docs/development.md#what-a-cold-run-costs)") {
		t.Error(`README.md does not link docs/development.md's "## What a cold run costs"`)
	}
	files, _ := filepath.Glob(filepath.Join(repo, "scripts", "*.sh"))
	files = append(files, filepath.Join(repo, "Makefile"))
	minutes := regexp.MustCompile(`(≈|about) ?\d+(\.\d+)?(–\d+)? ?min`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := minutes.FindString(line); m != "" {
				t.Errorf("%s:%d says %q: what a step costs belongs in docs/development.md only; point there", f, i+1, m)
			}
		}
	}
}
