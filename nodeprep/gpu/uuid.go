package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// ValidUUID reports whether s is an NVML GPU UUID as the driver prints it:
// "GPU-" and an RFC 9562 UUID in its 36-character hyphenated form
// (github.com/google/uuid parses it).
func ValidUUID(s string) bool {
	rest, ok := strings.CutPrefix(s, "GPU-")
	if !ok || len(rest) != 36 {
		return false
	}
	_, err := uuid.Parse(rest)
	return err == nil
}

// printable returns s as it may be printed: unchanged when it is printable
// ASCII, else quoted with Go's escapes and without the quotes, so that no
// control byte a broken driver returned reaches a terminal or a log.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			q := strconv.QuoteToASCII(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

// checkUUIDs makes every GPU and MIG UUID safe to print and marks a GPU
// unhealthy (left out of the CDI check, the self-test and the labels) when
// its UUID is malformed or another GPU reported the same one: a device
// plugin asking for nvidia.com/gpu=GPU-<uuid> must get exactly one GPU.
// MIG UUIDs are checked for duplicates only (drivers before R470 wrote
// them as "MIG-GPU-<uuid>/<gi>/<ci>").
func checkUUIDs(inv *Inventory) {
	seen := map[string]int{} // UUID → index of the first GPU with it
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		raw := g.UUID
		g.UUID = printable(raw)
		var reasons []string
		switch first, dup := seen[raw]; {
		case raw == "" && slices.ContainsFunc(g.Health.Reasons, func(r string) bool { return r == ReasonLost || strings.HasPrefix(r, "reading UUID") }):
			// The UUID query failed: its reason is already there.
		case raw == "":
			// NVML said success (or not supported) and gave no UUID: a GPU
			// no one can ask for by UUID, and not "-" with health ok.
			reasons = append(reasons, "NVML reported no UUID (an empty string): want GPU- and an RFC 9562 UUID")
		case !ValidUUID(raw):
			reasons = append(reasons, fmt.Sprintf("NVML reported a malformed UUID %q", raw))
		case dup:
			reasons = append(reasons, fmt.Sprintf("NVML reported UUID %s for GPU %d too", g.UUID, first))
			other := &inv.GPUs[first]
			other.Health.Reasons = append(other.Health.Reasons, fmt.Sprintf("NVML reported UUID %s for GPU %d too", other.UUID, g.Index))
			other.Health.Healthy = false
		default:
			seen[raw] = i
		}
		if g.MIG != nil {
			migSeen := map[string]bool{}
			for j := range g.MIG.Devices {
				m := &g.MIG.Devices[j]
				if migSeen[m.UUID] {
					reasons = append(reasons, fmt.Sprintf("NVML reported MIG UUID %s twice", printable(m.UUID)))
				}
				migSeen[m.UUID] = true
				m.UUID = printable(m.UUID)
			}
		}
		if len(reasons) > 0 {
			g.Health.Reasons = append(g.Health.Reasons, reasons...)
			g.Health.Healthy = false
		}
	}
}
