package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type goPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
	GoFiles    []string
	CgoFiles   []string // files that import "C" (the probe's shim): not in GoFiles
	Dir        string
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	return listPackagesIn(t, "", "github.com/nodeprep/nodeprep/...")
}

// listPackagesIn runs go list in dir ("" = here) on pattern.
func listPackagesIn(t *testing.T, dir, pattern string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", pattern)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestDependencies keeps the layering of docs/development.md ("Layout"):
// cmd → nodeprep → {nodeprep/*, cdi}; only cmd/ imports cobra; the leaf
// packages never import the pipeline or the command layer;
// nodeprep/bounded imports the standard library only.
func TestDependencies(t *testing.T) {
	const mod = "github.com/nodeprep/nodeprep"
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		for _, imp := range p.Imports {
			switch {
			case strings.HasPrefix(imp, "github.com/spf13/cobra") && !strings.HasPrefix(rel, "cmd/"):
				t.Errorf("%s imports cobra; only cmd/ may", p.ImportPath)
			case strings.HasPrefix(imp, mod+"/cmd") && !strings.HasPrefix(rel, "cmd/"):
				t.Errorf("%s imports the command layer %s", p.ImportPath, imp)
			case rel == "nodeprep/manifest" && strings.HasPrefix(imp, mod+"/"):
				t.Errorf("%s imports %s: the manifest parser is a leaf both cdi and selftest import", p.ImportPath, imp)
			case rel == "nodeprep/bounded" && strings.Contains(strings.Split(imp, "/")[0], "."):
				t.Errorf("%s imports %s: the bounded reader is std only, for the lean child that links it", p.ImportPath, imp)
			case strings.HasPrefix(imp, mod+"/"+testenv) && !strings.HasPrefix(rel, testenv):
				t.Errorf("%s imports %s: the test harness (%s) is for tests only", p.ImportPath, imp, testenv)
			case imp == mod+"/nodeprep" && (strings.HasPrefix(rel, "nodeprep/") || strings.HasPrefix(rel, "cdi")):
				t.Errorf("%s imports the pipeline package; dependencies run one way", p.ImportPath)
			}
		}
	}
}

// testenv is the folder of what exists only for tests (docs/development.md,
// "Layout"): the real-component harness, host-tree copies, fake drivers.
const testenv = "nodeprep/testenv/"

// TestProductLinksNoTestHarness: none of the three binaries nodeprep ships
// links a package of the test harness, directly or through another
// package. TestDependencies catches the direct import; this catches one
// that a product package's own dependency brings in.
func TestProductLinksNoTestHarness(t *testing.T) {
	for _, bin := range []string{"cmd/nodeprep", "cmd/nodeprep-probe", "cmd/nodeprep-cluster"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/nodeprep/nodeprep/"+bin).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed %d packages: the check would pass for nothing", bin, len(deps))
		}
		for _, d := range deps {
			if strings.Contains(d, "/"+testenv) || strings.HasSuffix(d, "/"+strings.TrimSuffix(testenv, "/")) {
				t.Errorf("%s links %s, which exists only for tests", bin, d)
			}
		}
	}
}

// TestNodeprepLeavesOutKubernetes: the nodeprep binary (the one that runs
// at every boot) links neither the Kubernetes API types nor what they
// bring (net/http, crypto/tls, protobuf, CBOR); nodeprep-cluster does.
// A package of the list in nodeprep is a regression: start-up cost is
// paid for every linked package's init and pages (docs/faults.md,
// "Start-up").
func TestNodeprepLeavesOutKubernetes(t *testing.T) {
	banned := []string{"k8s.io/api/", "k8s.io/component-helpers/", "k8s.io/apimachinery/pkg/runtime", "net/http", "crypto/tls", "google.golang.org/protobuf/", "github.com/fxamacker/cbor/", "github.com/nodeprep/nodeprep/nodeprep/cluster", "github.com/nodeprep/nodeprep/cmd/nodeprep/clustercmd"}
	linked := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	has := func(pkgs []string, b string) string {
		for _, p := range pkgs {
			if p == strings.TrimSuffix(b, "/") || strings.HasPrefix(p, b) && strings.HasSuffix(b, "/") || p == b {
				return p
			}
		}
		return ""
	}
	lean := linked("github.com/nodeprep/nodeprep/cmd/nodeprep")
	for _, b := range banned {
		if p := has(lean, b); p != "" {
			t.Errorf("cmd/nodeprep links %s: it belongs in nodeprep-cluster only", p)
		}
	}
	full := linked("github.com/nodeprep/nodeprep/cmd/nodeprep-cluster")
	for _, want := range []string{"k8s.io/api/", "github.com/nodeprep/nodeprep/cmd/nodeprep/clustercmd"} {
		if has(full, want) == "" {
			t.Errorf("cmd/nodeprep-cluster does not link %s: the check above would pass for nothing", want)
		}
	}
}

// TestDomainPackagesStayQuiet: below cmd/ nothing reads flags, the
// environment or os.Args, or writes to os.Stdout/os.Stderr (comments aside).
func TestDomainPackagesStayQuiet(t *testing.T) {
	for _, p := range listPackages(t) {
		// The test harness is imported by tests only (TestDependencies):
		// testkit's -update flag is a test binary's, upstream reads CI
		// from the test's environment.
		if strings.Contains(p.ImportPath, "/cmd/") || strings.Contains(p.ImportPath, "/"+testenv) {
			continue
		}
		for _, v := range noisyLines(t, p) {
			t.Error(v)
		}
	}
}

// noisyLines returns one message per line of p's Go files, cgo files
// included, that uses what domain packages must not.
func noisyLines(t *testing.T, p goPackage) []string {
	t.Helper()
	banned := []string{"os.Stdout", "os.Stderr", "os.Args", "os.Getenv(", "os.Environ(", "os.LookupEnv(", `"flag"`, "spf13/pflag"}
	var out []string
	for _, f := range append(append([]string(nil), p.GoFiles...), p.CgoFiles...) {
		data, err := os.ReadFile(filepath.Join(p.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			if code, _, _ := strings.Cut(line, "//"); strings.TrimSpace(code) != "" {
				for _, b := range banned {
					if strings.Contains(code, b) {
						out = append(out, fmt.Sprintf("%s:%d uses %s: domain packages take what they need as arguments", filepath.Join(p.ImportPath, f), n+1, b))
					}
				}
			}
		}
	}
	return out
}

// TestQuietCheckSeesCgoFiles: a cgo file (import "C", as the probe's
// probe.go) is listed in CgoFiles, not GoFiles, and the check reads it.
func TestQuietCheckSeesCgoFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":   "module example.com/noisy\n\ngo 1.22\n",
		"plain.go": "package noisy\n",
		"shim.go":  "package noisy\n\n// #include <stdlib.h>\nimport \"C\"\n\nimport \"os\"\n\nvar Home = os.Getenv(\"HOME\")\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkgs := listPackagesIn(t, dir, "./...")
	if len(pkgs) != 1 || len(pkgs[0].CgoFiles) != 1 {
		t.Fatalf("go list: %+v, want one package with one cgo file (is CGO_ENABLED off?)", pkgs)
	}
	got := noisyLines(t, pkgs[0])
	if len(got) != 1 || !strings.Contains(got[0], "shim.go:8 uses os.Getenv(") {
		t.Errorf("noisy lines %q, want shim.go:8's os.Getenv", got)
	}
}

// TestLayoutMatchesDevelopmentDoc holds docs/development.md's layout
// table against the code: every package of the module has a row, every
// row names a package, and a package imports only the rooms of nodeprep
// its row names ("every `nodeprep/*` product room" allows any room under
// nodeprep/ outside nodeprep/testenv/), and every room a row names is one
// the package imports: the table is the code as it is, not a wish. Tests'
// own imports are not
// judged: a test may import the harness and any room it tests through.
func TestLayoutMatchesDevelopmentDoc(t *testing.T) {
	const mod = "github.com/nodeprep/nodeprep"
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	begin, end := strings.Index(string(page), "<!-- layout:begin -->"), strings.Index(string(page), "<!-- layout:end -->")
	if begin < 0 || end < begin {
		t.Fatal("docs/development.md has no <!-- layout:begin --> … <!-- layout:end --> table")
	}
	code := regexp.MustCompile("`([^`]+)`")
	type row struct {
		allowed map[string]bool
		anyRoom bool
		seen    bool
	}
	rows := map[string]*row{}
	for _, line := range strings.Split(string(page[begin:end]), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		room := strings.Trim(strings.TrimSpace(cells[1]), "`")
		r := &row{allowed: map[string]bool{}, anyRoom: strings.Contains(cells[3], "every `nodeprep/*` product room")}
		for _, m := range code.FindAllStringSubmatch(cells[3], -1) {
			if m[1] != "nodeprep/*" {
				r.allowed[m[1]] = true
			}
		}
		rows[room] = r
	}
	if len(rows) < 20 {
		t.Fatalf("read %d rows from the layout table: the check would pass for nothing", len(rows))
	}
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		r := rows[rel]
		if r == nil {
			t.Errorf("package %s has no row in docs/development.md's layout table: say what it is and what it may import", rel)
			continue
		}
		r.seen = true
		used := map[string]bool{}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, mod+"/")
			used[dep] = true
			if r.allowed[dep] || r.anyRoom && strings.HasPrefix(dep, "nodeprep/") && !strings.HasPrefix(dep, testenv) {
				continue
			}
			t.Errorf("%s imports %s, which its row in docs/development.md's layout table does not name", rel, dep)
		}
		for dep := range r.allowed {
			if !used[dep] {
				t.Errorf("docs/development.md's layout table says %s may import %s, which it does not: the table draws the code as it is", rel, dep)
			}
		}
	}
	for room, r := range rows {
		if !r.seen {
			t.Errorf("docs/development.md's layout table names %s, which is no package", room)
		}
	}
}
