package app_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestDocsUpToDate: the command reference under docs/cli and the man pages
// under docs/man/man1 are what the commands generate today; go test -update
// (in cmd/nodeprep/app) rewrites them.
func TestDocsUpToDate(t *testing.T) {
	t.Parallel()
	docs := filepath.Join("..", "..", "..", "docs")
	tmp := t.TempDir()
	gotMD, gotMan := filepath.Join(tmp, "cli"), filepath.Join(tmp, "man", "man1")
	if err := generateDocs(gotMD, gotMan); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"cli", filepath.Join("man", "man1")} {
		want := filepath.Join(docs, dir)
		if *testkit.Update {
			if err := os.RemoveAll(want); err != nil {
				t.Fatal(err)
			}
			if err := generateDocs(map[string]string{"cli": want}[dir], map[string]string{filepath.Join("man", "man1"): want}[dir]); err != nil {
				t.Fatal(err)
			}
		}
		compareDirs(t, filepath.Join(tmp, dir), want)
	}
	// docs/man is a MANPATH entry: section directories only (a page
	// generated into docs/man itself, as before man1/, is never found).
	ents, err := os.ReadDir(filepath.Join(docs, "man"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "man1" {
			t.Errorf("docs/man/%s: docs/man holds only man1/ (go test ./cmd/nodeprep/app -run TestDocsUpToDate -update, then remove it)", e.Name())
		}
	}
}

// compareDirs fails for every file that differs, is missing or is extra in
// want (the checked-in copy) compared with got.
func compareDirs(t *testing.T, got, want string) {
	t.Helper()
	gotFiles, _ := filepath.Glob(filepath.Join(got, "*"))
	wantFiles, _ := filepath.Glob(filepath.Join(want, "*"))
	seen := map[string]bool{}
	for _, g := range gotFiles {
		name := filepath.Base(g)
		seen[name] = true
		a, _ := os.ReadFile(g)
		b, err := os.ReadFile(filepath.Join(want, name))
		switch {
		case err != nil:
			t.Errorf("%s is missing: the docs are stale (go test ./cmd/nodeprep/app -run TestDocsUpToDate -update)", filepath.Join(want, name))
		case string(a) != string(b):
			t.Errorf("%s is stale (go test ./cmd/nodeprep/app -run TestDocsUpToDate -update)", filepath.Join(want, name))
		}
	}
	for _, w := range wantFiles {
		if !seen[filepath.Base(w)] {
			t.Errorf("%s is no longer generated: remove it (go test ./cmd/nodeprep/app -run TestDocsUpToDate -update)", w)
		}
	}
	if len(gotFiles) == 0 {
		t.Errorf("nothing generated in %s", got)
	}
}

// TestManPath: docs/man is laid out as man(1) searches a MANPATH entry
// (man1/NAME.1), so `MANPATH=docs/man man nodeprep` reads the checked-in
// pages in a checkout, as the README says. Skipped without man(1).
func TestManPath(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("no man(1)")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "docs", "man"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"nodeprep", "nodeprep-up", "nodeprep-cdi-patch"} {
		cmd := exec.Command("man", "-w", page)
		cmd.Env = append(os.Environ(), "MANPATH="+dir)
		out, err := cmd.Output()
		if want := filepath.Join(dir, "man1", page+".1"); err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("MANPATH=%s man -w %s: %q, %v; want %s", dir, page, out, err, want)
		}
	}
}
