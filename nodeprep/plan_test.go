package nodeprep

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestPlanFirstBootHandlers: on a NixOS tree before k3s's first start
// (no containerd config rendered), up's plan judges the handlers k3s will
// register from its unit's PATH (join.k3sUnitPath): with the toolkit's
// runtimes there the node is ready; with none, the join stage fails naming
// where k3s looked, as up's does (one plan), and the plan writes nothing.
func TestPlanFirstBootHandlers(t *testing.T) {
	t.Parallel()
	const tools = "/nix/store/7g8h9j0k1l2m3n4p5q6r7s8a9b0c1d2f-nvidia-container-toolkit-1.17.8-tools/bin"
	tests := []struct {
		name  string
		path  []string
		ready bool
	}{
		{"toolkit on the unit's PATH", []string{tools, "/run/current-system/sw/bin"}, true},
		{"no runtime on the unit's PATH", []string{"/run/current-system/sw/bin"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := testkit.LayeredTree(t, "nixos-h200", "k3s-first-boot-nixos")
			before := testkit.Snapshot(t, host.Dir())
			opts := upOptions(simulated("dgx-h200"), nil)
			opts.DeviceNames = []string{"uuid", "index"}
			opts.CDI.Discover.GlvndDirs = []string{"/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib"}
			opts.Join.Unit = k3s.Unit{Path: tt.path}
			rep, err := Plan(context.Background(), host, opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Ready != tt.ready {
				t.Fatalf("ready %v, want %v: %s\n%+v", rep.Ready, tt.ready, rep.Verdict, rep.Stages)
			}
			if changes := testkit.Changes(before, testkit.Snapshot(t, host.Dir())); len(changes) > 0 {
				t.Errorf("the plan wrote %v", changes)
			}
			if rep.Stages[2].Name != StageSelftest || rep.Stages[2].Status != StatusSkipped {
				t.Errorf("selftest stage %+v, want skipped", rep.Stages[2])
			}
			if tt.ready {
				if rep.Join == nil || rep.CDI == nil {
					t.Errorf("the report has no planned join or patch: %+v", rep)
				}
				return
			}
			join := rep.Stages[3]
			if join.Status != StatusFailed || !slices.ContainsFunc(join.Reasons, func(r string) bool {
				return strings.HasPrefix(r, containerd.CodeNoHandler) && strings.Contains(r, "/run/current-system/sw/bin, /usr/local/nvidia/toolkit")
			}) {
				t.Errorf("join stage %+v, want it failed with %s naming where k3s looked", join, containerd.CodeNoHandler)
			}
			if !errors.Is(rep.Err(), fault.ErrCheckFailed) {
				t.Errorf("err %v, want a failed check (exit 1)", rep.Err())
			}
		})
	}
}
