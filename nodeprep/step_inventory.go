package nodeprep

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// inventoryStep is the inventory stage: NVML's GPUs (or a simulated
// server's), of which the healthy go on to the later stages. It only
// plans: it writes nothing.
var inventoryStep = step{name: StageInventory, plan: (*env).inventory}

// inventory reads the inventory into the report; the stage warns of an
// unhealthy GPU, which it leaves out, and of a GPU in MIG mode with no MIG
// device, and fails when no GPU is healthy.
func (e *env) inventory(st *StageResult) error {
	inv, err := e.opts.Inventory()
	if err != nil {
		return err
	}
	e.report.Inventory = inv
	e.report.Simulated = inv.Simulated
	if e.report.Command == "" {
		for _, g := range inv.GPUs {
			e.report.ExpectedGPUs = append(e.report.ExpectedGPUs, g.UUID)
		}
	}
	healthy := inv.Healthy()
	for _, g := range inv.GPUs {
		if !g.Health.Healthy {
			st.Status = StatusWarning
			st.Reasons = append(st.Reasons, fmt.Sprintf("GPU %d (%s) unhealthy: %s; it is left out", g.Index, g.UUID, strings.Join(g.Health.Reasons, ", ")))
		}
	}
	// A GPU in MIG mode with no MIG device passes NVML's health checks
	// but gives a pod nothing to compute on: `inspect` and `cdi check`
	// warn, and so does `up`, in its summary and its reasons.
	if w := inv.Warnings(); len(w) > 0 {
		st.Status = StatusWarning
		st.Reasons = append(st.Reasons, w...)
	}
	st.Summary = fmt.Sprintf("%s (%d healthy), driver %s, CUDA %s", count(len(inv.GPUs), "GPU"), len(healthy), inv.DriverVersion, inv.CUDADriverVersion)
	if n := len(inv.Warnings()); n > 0 {
		st.Summary += fmt.Sprintf(", %s in MIG mode without a MIG device", count(n, "GPU"))
	}
	if inv.Simulated {
		st.Summary += ", simulated " + inv.Server
	}
	if len(healthy) == 0 {
		// The first unhealthy GPU's reasons go into the error, which is
		// the verdict's line and the Node condition's message: "no
		// healthy GPU" alone does not say what to fix (a fabric manager
		// that has not registered the GPUs fails every GPU at once).
		err := fault.CheckFailed(errors.New("no healthy GPU"))
		if n := len(inv.GPUs); n > 0 {
			g := inv.GPUs[0]
			err = fault.CheckFailed(fmt.Errorf("no healthy GPU: GPU %d (%s): %s%s", g.Index, g.UUID, strings.Join(g.Health.Reasons, ", "), more(n-1, "unhealthy GPU")))
		}
		st.Reasons = append([]string{err.Error()}, st.Reasons...)
		return err
	}
	only := *inv
	only.GPUs = healthy
	e.inv = &only
	return nil
}

// more is ", and N more <what>s" for n > 0, "" otherwise.
func more(n int, what string) string {
	if n <= 0 {
		return ""
	}
	return ", and " + count(n, "more "+what)
}
