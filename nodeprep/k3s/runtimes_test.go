package k3s

import (
	"slices"
	"testing"
)

// TestRuntimeModel: every class k3s deploys names a handler k3s can
// register, none of them is nvidia-cdi (the handler k3s registers
// without a class), and the handler list is sorted without repeats.
func TestRuntimeModel(t *testing.T) {
	t.Parallel()
	if !slices.IsSorted(RuntimeHandlers) || len(slices.Compact(slices.Clone(RuntimeHandlers))) != len(RuntimeHandlers) {
		t.Errorf("RuntimeHandlers not sorted and unique: %v", RuntimeHandlers)
	}
	for _, rc := range RuntimeClasses {
		if !slices.Contains(RuntimeHandlers, rc.Handler) {
			t.Errorf("RuntimeClass %s names handler %s, which k3s never registers", rc.Name, rc.Handler)
		}
		if rc.Name == "nvidia-cdi" || rc.Handler == "nvidia-cdi" {
			t.Errorf("k3s's runtimes.yaml has no nvidia-cdi class, the model has %+v", rc)
		}
	}
	if !slices.Contains(RuntimeHandlers, "nvidia-cdi") || !slices.Contains(RuntimeHandlers, "runc") {
		t.Errorf("RuntimeHandlers lacks nvidia-cdi or runc: %v", RuntimeHandlers)
	}
}
