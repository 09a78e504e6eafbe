package app_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testkit"
)

// TestDocsUpToDate: the command reference under docs/cli and the man pages
// under docs/man are what the commands generate today; go test -update
// (in cmd/nodeprep/app) rewrites them.
func TestDocsUpToDate(t *testing.T) {
	t.Parallel()
	docs := filepath.Join("..", "..", "..", "docs")
	tmp := t.TempDir()
	gotMD, gotMan := filepath.Join(tmp, "cli"), filepath.Join(tmp, "man")
	if err := generateDocs(gotMD, gotMan); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"cli", "man"} {
		want := filepath.Join(docs, dir)
		if *testkit.Update {
			if err := os.RemoveAll(want); err != nil {
				t.Fatal(err)
			}
			if err := generateDocs(map[string]string{"cli": want}[dir], map[string]string{"man": want}[dir]); err != nil {
				t.Fatal(err)
			}
		}
		compareDirs(t, filepath.Join(tmp, dir), want)
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
