package cdi_test

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/cdi")

const specPath = cdi.DefaultSpecPath

// hostTree copies testdata/hosts/<scenario> to a temporary root (links kept)
// so tests can write to it.
func hostTree(t testing.TB, scenario string) *hostfs.Root {
	t.Helper()
	dst := filepath.Join(t.TempDir(), scenario)
	src := filepath.Join("..", "testdata", "hosts", scenario)
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v: %s", src, err, out)
	}
	root, err := hostfs.New(dst)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func nixosOptions(arch string) cdi.FileOptions {
	return cdi.FileOptions{Spec: specPath, Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: arch}}
}

func loadSpec(t testing.TB, root *hostfs.Root) ([]byte, *specs.Spec) {
	t.Helper()
	data, spec, err := cdi.Load(root, specPath)
	if err != nil {
		t.Fatal(err)
	}
	return data, spec
}

func readFile(t testing.TB, root *hostfs.Root, p string) []byte {
	t.Helper()
	data, err := root.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// golden compares got with testdata/cdi/<name>, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("..", "testdata", "cdi", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test ./cdi -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (go test ./cdi -update rewrites it)\n got:\n%s\nwant:\n%s", name, got, want)
	}
}
