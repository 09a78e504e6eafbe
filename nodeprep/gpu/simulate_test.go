package gpu

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func TestSimulatedNames(t *testing.T) {
	t.Parallel()
	want := []string{"dgx-a100", "dgx-b200", "dgx-h100", "dgx-h200"}
	if got := SimulatedNames(); !slices.Equal(got, want) {
		t.Errorf("SimulatedNames() = %q, want %q", got, want)
	}
}

func TestSimulatedUnknown(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "dgx-a200", "DGX-H100"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, call := range []func(string) error{
				func(n string) error { _, err := Simulated(n); return err },
				func(n string) error { _, err := Simulate(n); return err },
			} {
				err := call(name)
				if !errors.Is(err, ErrUnknownServer) || !errors.Is(err, fault.ErrUsage) {
					t.Fatalf("error %v: want ErrUnknownServer marked usage", err)
				}
				for _, n := range SimulatedNames() {
					if !strings.Contains(err.Error(), n) {
						t.Errorf("error %q does not list %s", err, n)
					}
				}
			}
		})
	}
}

func TestSimulatedUUID(t *testing.T) {
	t.Parallel()
	// Pinned: golden files and flake checks depend on these never changing.
	if got, want := SimulatedUUID("dgx-h200", 0), "GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9"; got != want {
		t.Errorf("SimulatedUUID(dgx-h200, 0) = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for _, n := range SimulatedNames() {
		for i := range 8 {
			u := SimulatedUUID(n, i)
			if !uuidRE.MatchString(u) || seen[u] {
				t.Errorf("SimulatedUUID(%s, %d) = %q: malformed or repeated", n, i, u)
			}
			seen[u] = true
		}
	}
}

func BenchmarkSimulateH200(b *testing.B) {
	for b.Loop() {
		inv, err := Simulate("dgx-h200")
		if err != nil || len(inv.GPUs) != 8 {
			b.Fatalf("Simulate: %v", err)
		}
	}
}

// BenchmarkBuildH200 measures Build alone, without making the mock server.
func BenchmarkBuildH200(b *testing.B) {
	lib, err := Simulated("dgx-h200")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Build(lib); err != nil {
			b.Fatal(err)
		}
	}
}
