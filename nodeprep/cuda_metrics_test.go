package nodeprep

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
)

// TestMetricsCUDA: the metrics carry the CUDA probe's result per GPU, by
// UUID, and the count of GPUs whose CUDA device passed.
func TestMetricsCUDA(t *testing.T) {
	t.Parallel()
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	st := &selftest.Report{}
	for i, g := range inv.GPUs {
		st.Matches = append(st.Matches, selftest.Match{GPU: g.Index, UUID: g.UUID, CUDA: i != 3})
	}
	data, err := Metrics(&Report{Inventory: inv, Selftest: st}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	out := string(data)
	for _, want := range []string{
		"nodeprep_selftest_cuda_matched 7\n",
		`nodeprep_selftest_gpu_cuda_ok{uuid="` + inv.GPUs[3].UUID + `"} 0` + "\n",
		`nodeprep_selftest_gpu_cuda_ok{uuid="` + inv.GPUs[0].UUID + `"} 1` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}
