package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestDemoCleansUp runs scripts/demo.sh (what `make demo` runs) with the
// test's binary: it removes its temporary root on exit and says so, and
// keeps it with DEMO_KEEP=1.
func TestDemoCleansUp(t *testing.T) {
	icd, egl := lavapipe(t)
	for _, keep := range []bool{false, true} {
		tmp := t.TempDir()
		cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "demo.sh"))
		cmd.Env = append(os.Environ(), "NODEPREP="+testkit.Binary(t), "TMPDIR="+tmp, "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
		if keep {
			cmd.Env = append(cmd.Env, "DEMO_KEEP=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("demo (keep=%v): %v\n%s", keep, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		last := lines[len(lines)-1]
		left, _ := filepath.Glob(filepath.Join(tmp, "nodeprep-demo.*"))
		switch {
		case !keep && (len(left) != 0 || !strings.HasPrefix(last, "removed the host root ") || !strings.Contains(last, "DEMO_KEEP=1")):
			t.Errorf("demo left %v; last line %q", left, last)
		case keep && (len(left) != 1 || !strings.HasPrefix(last, "kept the host root "+left[0])):
			t.Errorf("DEMO_KEEP=1: left %v; last line %q", left, last)
		}
	}
}

// TestDemoDepsHaveBuildHeaders: `make demo`, the README's first command,
// installs only install-deps.sh's demo set before `make build`, so on a
// fresh Debian machine that set must bring every system header the cgo
// code of the three binaries includes. Each `#include <…>` of a
// non-standard package they link is found with gcc and its Debian package
// with dpkg; the C library's and the compiler's own headers come with gcc.
func TestDemoDepsHaveBuildHeaders(t *testing.T) {
	for _, tool := range []string{"dpkg", "gcc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: not a Debian build machine", tool)
		}
	}
	root := filepath.Join("..", "..")
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "install-deps.sh"), "demo", "--list").Output()
	if err != nil {
		t.Fatalf("install-deps.sh demo --list: %v", err)
	}
	demo := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		demo[p] = true
	}

	const files = `{{if not .Standard}}{{$d := .Dir}}` +
		`{{range .CgoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}` +
		`{{range .CFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}` +
		`{{range .HFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}`
	list := exec.Command("go", "list", "-deps", "-f", files, "./cmd/nodeprep", "./cmd/nodeprep-probe", "./cmd/nodeprep-cluster")
	list.Dir = root
	out, err = list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	include := regexp.MustCompile(`(?m)^\s*(?://\s*)?#\s*include\s*<([^>]+)>`)
	headers := map[string]string{} // header → the first file that includes it
	for _, f := range strings.Fields(string(out)) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range include.FindAllStringSubmatch(string(src), -1) {
			if _, ok := headers[m[1]]; !ok {
				headers[m[1]] = f
			}
		}
	}
	if headers["vulkan/vulkan.h"] == "" {
		t.Fatalf("found no #include <vulkan/vulkan.h> in the binaries' cgo code: the scan is broken (headers: %v)", headers)
	}

	for h, from := range headers {
		// gcc -H prints each header it opens, the top-level one after ". ";
		// -E: preprocess only, as eglext.h compiles only after egl.h.
		cc := exec.Command("gcc", "-E", "-H", "-o", os.DevNull, "-x", "c", "-")
		cc.Stdin = strings.NewReader("#include <" + h + ">\n")
		msg, err := cc.CombinedOutput()
		if err != nil {
			t.Errorf("<%s> (included by %s) is not on this machine: %v\n%s", h, from, err, msg)
			continue
		}
		path := ""
		for _, l := range strings.Split(string(msg), "\n") {
			if p, ok := strings.CutPrefix(l, ". "); ok {
				path = p
				break
			}
		}
		owner, err := exec.Command("dpkg", "-S", path).Output()
		if err != nil {
			t.Logf("<%s> at %q belongs to no Debian package; not checked", h, path)
			continue
		}
		pkg, _, _ := strings.Cut(string(owner), ":")
		if demo[pkg] || pkg == "libc6-dev" || pkg == "linux-libc-dev" || strings.HasPrefix(pkg, "libgcc-") {
			continue
		}
		t.Errorf("<%s> (included by %s) is in Debian's %s, which install-deps.sh's demo set lacks: make demo cannot build nodeprep on a fresh machine", h, from, pkg)
	}
}
