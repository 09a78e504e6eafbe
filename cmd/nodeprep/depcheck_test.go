package main_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type goPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
	GoFiles    []string
	Dir        string
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps=false", "-json", "github.com/nodeprep/nodeprep/...").Output()
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

// TestDependencies keeps the layering of DESIGN.md: cmd → nodeprep →
// {nodeprep/*, cdi}; only cmd/ imports cobra; the leaf packages never
// import the pipeline or the command layer.
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
			case imp == mod+"/nodeprep/testkit":
				t.Errorf("%s imports testkit, which only tests may import", p.ImportPath)
			case imp == mod+"/nodeprep" && (strings.HasPrefix(rel, "nodeprep/") || strings.HasPrefix(rel, "cdi")):
				t.Errorf("%s imports the pipeline package; dependencies run one way", p.ImportPath)
			}
		}
	}
}

// TestDomainPackagesStayQuiet: below cmd/ nothing reads flags, the
// environment or os.Args, or writes to os.Stdout/os.Stderr (comments aside).
func TestDomainPackagesStayQuiet(t *testing.T) {
	banned := []string{"os.Stdout", "os.Stderr", "os.Args", "os.Getenv(", "os.Environ(", "os.LookupEnv(", `"flag"`, "spf13/pflag"}
	for _, p := range listPackages(t) {
		// testkit is imported by tests only (TestDependencies): its -update
		// flag is a test binary's.
		if strings.Contains(p.ImportPath, "/cmd/") || p.ImportPath == "github.com/nodeprep/nodeprep/nodeprep/testkit" {
			continue
		}
		for _, f := range p.GoFiles {
			data, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			for n, line := range strings.Split(string(data), "\n") {
				if code, _, _ := strings.Cut(line, "//"); strings.TrimSpace(code) != "" {
					for _, b := range banned {
						if strings.Contains(code, b) {
							t.Errorf("%s:%d uses %s: domain packages take what they need as arguments", filepath.Join(p.ImportPath, f), n+1, b)
						}
					}
				}
			}
		}
	}
}
