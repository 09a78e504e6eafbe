package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFirstBuildNote: `make build` and `make unit` say a first build takes
// about 3 minutes only when it does — when the build cache lacks go-nvml's
// cgo package for these flags (scripts/first-build-note.sh): an empty
// GOCACHE gets the note, the warm cache of this run gets nothing.
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
