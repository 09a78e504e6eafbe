package drill

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes r for a person: the plan of a dry run, or each phase
// with its time, what the failover cost, and what was restored.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	list := func(s []string) string {
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, ", ")
	}
	if r.DryRun {
		fmt.Fprintf(&b, "drill %s (dry run: nothing changed; --run to act)\n", r.ID)
		fmt.Fprintf(&b, "would %s the on-prem nodes: %s\n", r.Mode, list(r.OnPrem))
		fmt.Fprintf(&b, "fallback nodes now: %s\n", list(r.FallbackBefore))
		fmt.Fprintf(&b, "phases: %s (canary on-prem), %s (nodes taken away, canary on the fallback: the RTO), %s (nodes back, canary on-prem), %s (added fallback nodes gone)\n",
			PhaseBaseline, PhaseFailover, PhaseReturn, PhaseReclaim)
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r.ID != "" {
		fmt.Fprintf(&b, "drill %s (%s of %s)\n", r.ID, r.Mode, list(r.OnPrem))
	}
	for _, p := range r.Phases {
		mark := "✓"
		if !p.OK {
			mark = "✗"
		}
		where := ""
		if p.Node != "" {
			where = " on " + p.Node
		}
		fmt.Fprintf(&b, "%s %-9s %8.3fs  %s%s\n", mark, p.Name, p.Seconds, p.Until, where)
	}
	if r.ID != "" {
		fmt.Fprintf(&b, "fallback added: %d node(s), %d GPU(s): %s\n", len(r.Added), r.AddedGPUs, list(r.Added))
	}
	fmt.Fprintf(&b, "restored: %s\n", list(r.Restored))
	fmt.Fprintf(&b, "deleted: %s\n", list(r.Deleted))
	if r.Error != "" {
		fmt.Fprintf(&b, "FAILED: %s\n", r.Error)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
