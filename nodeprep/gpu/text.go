package gpu

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes inv as the table `nodeprep inspect` prints: a header
// with the driver, NVML and CUDA versions, one row per GPU (index, UUID,
// name, PCI bus id, memory in MiB, compute capability, MIG mode, NVLink
// fabric (FabricText), health) under single-token column names (INDEX UUID
// NAME BUS_ID MEMORY_MIB CC MIG FABRIC HEALTH), then one line per MIG
// device. Whether the inventory is
// simulated is the caller's to say (inspect says it on stderr). Errors
// are w's.
func (inv *Inventory) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "driver %s, NVML %s, CUDA %s, %d GPUs\n",
		orDash(inv.DriverVersion), orDash(inv.NVMLVersion), orDash(inv.CUDADriverVersion), len(inv.GPUs))
	if len(inv.GPUs) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "INDEX\tUUID\tNAME\tBUS_ID\tMEMORY_MIB\tCC\tMIG\tFABRIC\tHEALTH")
		for _, g := range inv.GPUs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d.%d\t%s\t%s\t%s\n",
				g.Index, orDash(g.UUID), orDash(g.Name), orDash(g.PCIBusID), g.MemoryMiB,
				g.ComputeMajor, g.ComputeMinor, migText(g.MIG), FabricText(g.Fabric), healthText(g.Health))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, g := range inv.GPUs {
		if g.MIG == nil {
			continue
		}
		for _, d := range g.MIG.Devices {
			fmt.Fprintf(&b, "GPU %d MIG %d: %s %s, %d MiB\n", g.Index, d.Index, d.UUID, d.Profile, d.MemoryMiB)
		}
	}
	for _, m := range inv.Warnings() {
		fmt.Fprintf(&b, "warning: %s\n", m)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func migText(m *MIG) string {
	switch {
	case m == nil:
		return "-"
	case m.Current != m.Pending:
		return onOff(m.Current) + "→" + onOff(m.Pending)
	case m.Current:
		return fmt.Sprintf("on(%d)", len(m.Devices))
	}
	return "off"
}

// FabricText is a fabric in one token: "-" when not read, "none" when
// not supported (no NVLink fabric), "not-started", "in-progress",
// "completed" (success, no problem in the health mask), "error" (completed
// with an error status) or "degraded" (completed, with problems).
func FabricText(f *Fabric) string {
	switch {
	case f == nil:
		return "-"
	case f.State == FabricNotSupported:
		return "none"
	case f.State != FabricCompleted:
		return strings.ReplaceAll(f.State, " ", "")
	case f.Status != nil && *f.Status != 0:
		return "error"
	case fabricVerdict(f) != "":
		return "degraded"
	}
	return "completed"
}

func healthText(h Health) string {
	if h.Healthy {
		return "ok"
	}
	return "FAILED: " + strings.Join(h.Reasons, "; ")
}

// Warnings returns what `inspect` and `cdi check` warn about: each GPU in
// MIG mode with no MIG device configured (NVML hands out no compute on such
// a GPU, so a pod asking for it gets nothing useful).
func (inv *Inventory) Warnings() []string {
	var out []string
	for _, g := range inv.GPUs {
		if g.MIG != nil && g.MIG.Current && len(g.MIG.Devices) == 0 {
			out = append(out, fmt.Sprintf("GPU %d (%s) has MIG mode on but no MIG device: pods asking for it get nothing useful (create instances with nvidia-smi mig -cgi … -C, or turn MIG off)", g.Index, g.UUID))
		}
	}
	return out
}
