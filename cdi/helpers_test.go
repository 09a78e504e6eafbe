package cdi_test

import (
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

const specPath = cdi.DefaultSpecPath

// hostTree copies testdata/hosts/<scenario> to a temporary root (links kept)
// so tests can write to it.
func hostTree(t testing.TB, scenario string) *hostfs.Root {
	t.Helper()
	return testkit.HostTree(t, scenario)
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
	data, err := root.ReadFile(p, bounded.MaxCDISpec)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// golden compares got with testdata/cdi/<name>, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testkit.Golden(t, "cdi/"+name, got)
}
