package main_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// walkthroughCommand is one line of the README's bring-up walkthrough: the
// shell command, and what its comment promises ("# 2. exit 1: errors":
// exit status 1 and "errors" in the output; no "exit": status 0).
type walkthroughCommand struct {
	line, says string
	code       int
}

// readmeWalkthrough extracts the commands of the first ```sh block under
// the README's "## Bringing a node up" heading.
func readmeWalkthrough(t *testing.T, readme string) []walkthroughCommand {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Skipf("no README here (the Nix build copies only the Go tree): %v", err)
	}
	defer f.Close()
	exit := regexp.MustCompile(`^(?:\d+\.\s*)?exit (\d+)(?::\s*(.*))?$`)
	var (
		cmds             []walkthroughCommand
		section, inBlock bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if inBlock {
				t.Fatal("README: the walkthrough's ```sh block does not end")
			}
			section = strings.HasPrefix(line, "## Bringing a node up")
		case section && !inBlock && line == "```sh":
			inBlock = true
		case inBlock && line == "```":
			return cmds
		case inBlock && strings.TrimSpace(line) != "":
			cmd, comment, _ := strings.Cut(line, "#")
			c := walkthroughCommand{line: strings.TrimSpace(cmd)}
			if m := exit.FindStringSubmatch(strings.TrimSpace(comment)); m != nil {
				c.code, _ = strconv.Atoi(m[1])
				c.says = m[2]
			}
			cmds = append(cmds, c)
		}
	}
	t.Fatal("README: no ```sh block under \"## Bringing a node up\"")
	return nil
}

// TestReadmeWalkthrough runs the README's bring-up walkthrough as written,
// on a machine without a GPU, in the checkout: every line, in order, in one
// shell (so `node=$(mktemp -d)` holds for the lines after it), with this
// test's nodeprep build for bin/nodeprep, a private TMPDIR, and none of the
// driver variables the other tests set (the loaders' default search must
// find Mesa's lavapipe and EGL, as on a newcomer's Debian machine). Each
// line exits as its comment says; every nodeprep command reads and writes
// only under the copy (--root "$node"); the pipeline ends ready; nothing
// is left in TMPDIR. It runs the walkthrough twice: a second run must
// start from a clean copy, not one nested in the first's.
func TestReadmeWalkthrough(t *testing.T) {
	testkit.Mesa(t)
	repo := testkit.RepoRoot(t)
	cmds := readmeWalkthrough(t, filepath.Join(repo, "README.md"))
	bin := testkit.Binary(t)
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "__EGL_VENDOR_LIBRARY_FILENAMES", "__EGL_VENDOR_LIBRARY_DIRS", "JOURNAL_STREAM", "TMPDIR":
			continue
		}
		env = append(env, kv)
	}
	// What the stages' own output must say when they succeed.
	says := map[string]string{"cdi check": ": ok\n", "selftest": "self-test passed", "up": "\nready (", "health": "\nready (", "status": "ready\nwritten "}
	var ran []string
	for _, c := range cmds {
		if fields := strings.Fields(c.line); fields[0] == "bin/nodeprep" {
			if !strings.Contains(c.line, ` --root "$node"`) {
				t.Errorf("README: %q does not read the copy (--root \"$node\"): it would change this machine", c.line)
			}
			ran = append(ran, fields[1])
		}
	}
	if got := strings.Join(ran, " "); got != "inspect cdi cdi cdi selftest join up health status" {
		t.Errorf("the walkthrough runs %q, want every stage then up, health and status", got)
	}
	if t.Failed() {
		return
	}
	tmp := t.TempDir() // both runs: a rerun on the same machine
	for run := 1; run <= 2; run++ {
		out := t.TempDir()
		// Each line in the one shell, its output and exit status kept apart.
		var script strings.Builder
		for i, c := range cmds {
			line := c.line
			if strings.HasPrefix(line, "bin/nodeprep ") {
				line = bin + strings.TrimPrefix(line, "bin/nodeprep")
			}
			fmt.Fprintf(&script, "{ %s\n} >%s/%d.out 2>&1; echo $? >%s/%d.code\n", line, out, i, out, i)
		}
		cmd := exec.Command("bash", "-c", script.String())
		cmd.Dir, cmd.Env = repo, append(env, "TMPDIR="+tmp)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, b)
		}
		for i, c := range cmds {
			output, _ := os.ReadFile(filepath.Join(out, fmt.Sprint(i)+".out"))
			codeText, _ := os.ReadFile(filepath.Join(out, fmt.Sprint(i)+".code"))
			code, err := strconv.Atoi(strings.TrimSpace(string(codeText)))
			if err != nil {
				t.Fatalf("run %d: README: %q did not run: %q", run, c.line, codeText)
			}
			if code != c.code || c.says != "" && !strings.Contains(string(output), c.says) {
				t.Fatalf("run %d: README: %q: exit %d, want %d saying %q\n%s", run, c.line, code, c.code, c.says, output)
			}
			if fields := strings.Fields(c.line); fields[0] == "bin/nodeprep" && c.code == 0 {
				name := fields[1]
				if name == "cdi" {
					name += " " + fields[2]
				}
				if want, ok := says[name]; ok && !strings.Contains(string(output), want) {
					t.Errorf("run %d: README: %q does not say %q:\n%s", run, c.line, want, output)
				}
			}
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("run %d: the walkthrough leaves %d entries in TMPDIR (its copy not removed?)", run, len(left))
		}
	}
}

// TestReadmeNixOSQuickStart: the README's NixOS quick start makes the
// flake follow the machine's nixpkgs (docs/nixos.md's flake does) and says
// which Go that nixpkgs must have, the go directive of go.mod; its nix
// block is valid Nix bindings (nix-instantiate --parse, where installed).
func TestReadmeNixOSQuickStart(t *testing.T) {
	t.Parallel()
	repo := testkit.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Skipf("no README here: %v", err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Quick start on NixOS\n")
	if !ok {
		t.Fatal("README has no \"## Quick start on NixOS\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "```nix\n")
	block, _, ok2 := strings.Cut(block, "```\n")
	if !ok || !ok2 {
		t.Fatal("the quick start has no ```nix block")
	}
	if !strings.Contains(block, `inputs.nodeprep.inputs.nixpkgs.follows = "nixpkgs";`) {
		t.Errorf("the quick start's flake inputs lack inputs.nodeprep.inputs.nixpkgs.follows = \"nixpkgs\":\n%s", block)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(string(gomod))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if want := "Go ≥ " + m[1] + "." + m[2]; !strings.Contains(section, want) || !strings.Contains(section, "buildGo"+m[1]+m[2]+"Module") {
		t.Errorf("the quick start does not say its nixpkgs needs %s (buildGo%s%sModule), go.mod's go directive", want, m[1], m[2])
	}
	if _, err := exec.LookPath("nix-instantiate"); err != nil {
		return
	}
	parse := exec.Command("nix-instantiate", "--parse", "-E", "{\n"+block+"}")
	if out, err := parse.CombinedOutput(); err != nil {
		t.Errorf("the quick start's nix block does not parse as bindings: %v\n%s", err, out)
	}
}
