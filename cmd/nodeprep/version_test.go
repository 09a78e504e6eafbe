package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTaggedBuildVersion builds nodeprep from a copy of this tree committed
// and tagged v0.8.7 in a scratch repository, the two ways a release is
// built: `make install PREFIX=…` (the version from git describe) and plain
// `go build` in the checkout, as `go install` does (the version Go stamps
// from the tag). Both say the release and the commit; a modified tree says
// dirty. The installed tree is checked by checkInstalled.
// Skipped where the tree is not a git checkout (the Nix sandbox) and with
// -short.
func TestTaggedBuildVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nodeprep five times; skipped with -short")
	}
	for _, tool := range []string{"git", "make", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	repo := filepath.Join("..", "..")
	if _, err := gitCmd(repo, "rev-parse", "--git-dir"); err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	src, bin := filepath.Join(t.TempDir(), "src"), t.TempDir()
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// The tree as it is: tracked and new files, not what git ignores.
	copyTree := exec.Command("sh", "-c", `git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$1"`, "sh", src)
	copyTree.Dir = repo
	if out, err := copyTree.CombinedOutput(); err != nil {
		t.Fatalf("copying the tree: %v: %s", err, out)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "release"}, {"tag", "v0.8.7"}} {
		if out, err := gitCmd(src, args...); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	rev, _ := gitCmd(src, "rev-parse", "HEAD")
	rev = strings.TrimSpace(rev)

	// -buildvcs=true: the build machine's go env may turn VCS stamping off.
	goBuild := func(out string) {
		cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/nodeprep")
		cmd.Dir, cmd.Env = src, append(os.Environ(), "GOFLAGS=-buildvcs=true")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
	}
	version := func(binary string) string {
		out, err := exec.Command(binary, "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", binary, err)
		}
		return string(out)
	}
	release := regexp.MustCompile(`^nodeprep v0\.8\.7 \(commit ` + rev + `, go[^,]+, [a-z0-9]+/[a-z0-9]+\)\n$`)

	goBuild(filepath.Join(bin, "go-build"))
	if got := version(filepath.Join(bin, "go-build")); !release.MatchString(got) {
		t.Errorf("go build of tag v0.8.7 at %s: --version %q", rev, got)
	}

	prefix := filepath.Join(t.TempDir(), "usr")
	mk := exec.Command("make", "-s", "install", "PREFIX="+prefix,
		"BIN="+filepath.Join(bin, "nodeprep"), "PROBE_BIN="+filepath.Join(bin, "nodeprep-probe"), "CLUSTER_BIN="+filepath.Join(bin, "nodeprep-cluster"))
	mk.Dir = src
	for _, kv := range os.Environ() { // the Makefile's own VERSION and COMMIT, not the caller's
		if !strings.HasPrefix(kv, "VERSION=") && !strings.HasPrefix(kv, "COMMIT=") {
			mk.Env = append(mk.Env, kv)
		}
	}
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	installed := filepath.Join(prefix, "bin", "nodeprep")
	if got := version(installed); !release.MatchString(got) {
		t.Errorf("make install of tag v0.8.7 at %s: --version %q", rev, got)
	}
	checkInstalled(t, repo, prefix)

	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("modified\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	goBuild(filepath.Join(bin, "dirty"))
	if got := version(filepath.Join(bin, "dirty")); !strings.Contains(got, "(commit "+rev+", dirty, ") {
		t.Errorf("go build of a modified tree: --version %q, want the commit and dirty", got)
	}
}

// gitCmd runs git in dir with a fixed identity and returns its output.
func gitCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "user.name=nodeprep test", "-c", "user.email=test@nodeprep.invalid", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkInstalled: what `make install PREFIX=prefix` put there is the
// layout the README and the Nix package promise — nodeprep,
// nodeprep-probe and nodeprep-cluster side by side in bin (so `nodeprep
// cluster` runs), every man page of docs/man/man1 in share/man/man1 (so
// `MANPATH=prefix/share/man man nodeprep` finds them), and the bash, zsh
// and fish completions.
func checkInstalled(t *testing.T, repo, prefix string) {
	t.Helper()
	for _, name := range []string{"nodeprep", "nodeprep-probe", "nodeprep-cluster"} {
		if st, err := os.Stat(filepath.Join(prefix, "bin", name)); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("bin/%s: %v (want mode 0755)", name, err)
		}
	}
	if out, err := exec.Command(filepath.Join(prefix, "bin", "nodeprep"), "cluster", "render", "--help").CombinedOutput(); err != nil {
		t.Errorf("installed nodeprep cluster render --help: %v\n%s", err, out)
	}
	pages, _ := filepath.Glob(filepath.Join(repo, "docs", "man", "man1", "*.1"))
	if len(pages) < 10 {
		t.Fatalf("docs/man/man1 holds %d pages", len(pages))
	}
	for _, p := range pages {
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(prefix, "share", "man", "man1", filepath.Base(p)))
		if err != nil || string(got) != string(want) {
			t.Errorf("share/man/man1/%s is not docs/man/man1's (%v)", filepath.Base(p), err)
		}
	}
	for _, c := range []string{"bash-completion/completions/nodeprep", "zsh/site-functions/_nodeprep", "fish/vendor_completions.d/nodeprep.fish"} {
		if data, err := os.ReadFile(filepath.Join(prefix, "share", c)); err != nil || !strings.Contains(string(data), "nodeprep") {
			t.Errorf("share/%s: %v, %d bytes", c, err, len(data))
		}
	}
	if _, err := exec.LookPath("man"); err != nil {
		return
	}
	man := exec.Command("man", "-w", "nodeprep-up")
	man.Env = append(os.Environ(), "MANPATH="+filepath.Join(prefix, "share", "man"))
	if out, err := man.Output(); err != nil || strings.TrimSpace(string(out)) != filepath.Join(prefix, "share", "man", "man1", "nodeprep-up.1") {
		t.Errorf("MANPATH=%s/share/man man -w nodeprep-up: %q, %v", prefix, out, err)
	}
}
