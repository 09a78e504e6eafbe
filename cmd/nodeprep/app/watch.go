package app

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cdi/specwatch"
	"github.com/nodeprep/nodeprep/nodeprep"
)

type cdiWatchOptions struct {
	specFlags
	outputs repatchFlags
	settle  time.Duration
	wait    time.Duration
}

func newCDIWatchCommand(g *globals) *cobra.Command {
	o := &cdiWatchOptions{}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Re-patch every GPU spec each time one is written in the runtime's CDI spec directories",
		Long: `watch runs 'cdi patch' once, then again each time a spec file appears, is
replaced or rewritten in one of the runtime's CDI spec directories (the
NVIDIA device plugin and the DRA driver write theirs after boot, without
the graphics mounts), until SIGTERM. Each pass takes the lock (waiting
--wait), patches the runtime's whole view, and rewrites the status report
and the metrics when a spec or the verdict changed, so nodeprep_ready turns
0 naming the spec when one that serves GPUs cannot be patched.

It is the trigger of the NixOS module's path unit (PathChanged= on each
spec directory, which runs 'cdi patch --changes-only'), run as one process:
events within --settle make one pass, an event during a pass starts another
after it, and the event of its own write starts none. It prints one line
per pass that wrote a spec or changed the verdict, with the time from the
first event to the spec on disk (docs/runtime-view.md, "After boot").`,
		Example: `  nodeprep cdi watch
  nodeprep cdi watch --spec-dir /etc/cdi --spec-dir /var/run/cdi -v`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g, cmd) },
	}
	o.specFlags.add(cmd)
	o.outputs.add(cmd)
	cmd.Flags().DurationVar(&o.settle, "settle", specwatch.DefaultSettle, "quiet time after the last event before a pass")
	cmd.Flags().DurationVar(&o.wait, "wait", 30*time.Second, "how long each pass waits for another nodeprep's lock (up, health)")
	return cmd
}

// watchLine is one pass the watch reports (-o json: one object per line).
type watchLine struct {
	Trigger  []string `json:"trigger"`           // the spec files whose events started the pass
	Wrote    []string `json:"wrote"`             // the specs written
	Ready    *bool    `json:"ready,omitempty"`   // the status report's verdict, when there is one
	Verdict  string   `json:"verdict,omitempty"` // the same in words
	Errors   int      `json:"errors"`            // error findings of the view
	Latency  float64  `json:"latencyMs"`         // first event → specs on disk and status written, ms
	PassTime float64  `json:"passMs"`            // the pass alone (lock, plan, write), ms
	Retries  int      `json:"retries,omitempty"` // plans made again: a writer replaced a spec meanwhile
	Err      string   `json:"error,omitempty"`   // the pass failed (nothing written)
	Initial  bool     `json:"initial,omitempty"` // the pass at start
}

func (o *cdiWatchOptions) run(ctx context.Context, g *globals, cmd *cobra.Command) error {
	opts := o.options(g, cmd)
	ropts := o.outputs.options(g, cmd, opts)
	dirs := slices.Clone(opts.SpecDirs)
	if len(dirs) == 0 {
		dirs = []string{"/etc/cdi", "/var/run/cdi"}
	}
	if d := path.Dir(opts.Spec); !slices.Contains(dirs, d) {
		dirs = append(dirs, d) // the generator rewrites the named spec too
	}
	wait := flagOr(cmd.Flags(), "wait", o.wait, g.cfg.Wait)
	pass := func(ctx context.Context, t specwatch.Trigger) ([]specwatch.Written, error) {
		t0 := time.Now()
		line := watchLine{Trigger: t.Files, Wrote: []string{}, Initial: t.Initial}
		defer func() {
			if len(line.Wrote) > 0 || line.Err != "" || line.Verdict != "" {
				o.report(g, line)
			}
		}()
		unlock, err := g.host.Lock(ctx, wait)
		if err != nil {
			line.Err = err.Error()
			return nil, err
		}
		defer unlock() //nolint:errcheck // closing the lock file releases it
		rp, err := nodeprep.Repatch(ctx, g.host, ropts)
		now := time.Now()
		line.PassTime = float64(now.Sub(t0).Microseconds()) / 1000
		line.Latency = float64(now.Sub(t.First).Microseconds()) / 1000
		if err != nil {
			line.Err = err.Error()
			return nil, err
		}
		line.Wrote, line.Retries, line.Errors = rp.Wrote, rp.Retries, rp.Patch.Findings.Errors()
		if rp.StatusWritten || (t.Initial && rp.Report != nil) {
			line.Ready, line.Verdict = &rp.Report.Ready, rp.Report.Verdict
		}
		return ownWrites(rp), nil
	}
	g.log.Debug("watching CDI spec directories", "dirs", dirs)
	return specwatch.Run(ctx, g.host, dirs, pass, specwatch.Options{Settle: o.settle, Log: g.log})
}

// ownWrites are the specs a re-patch wrote, for the watch to know its own
// events.
func ownWrites(rp *nodeprep.RepatchResult) []specwatch.Written {
	out := make([]specwatch.Written, len(rp.Wrote))
	for i, p := range rp.Wrote {
		out[i] = specwatch.Written{Path: p, Info: rp.Files[i]}
	}
	return out
}

// report prints one pass: a line of text, or a JSON object per line.
func (o *cdiWatchOptions) report(g *globals, l watchLine) {
	w := g.streams.Out
	if g.output == "json" || g.output == "yaml" {
		data, _ := json.Marshal(l)
		fmt.Fprintf(w, "%s\n", data)
		return
	}
	what := "checked"
	if len(l.Wrote) > 0 {
		what = fmt.Sprintf("re-patched %v", l.Wrote)
	}
	if l.Initial {
		what += " (at start)"
	} else if len(l.Trigger) > 0 {
		what += fmt.Sprintf(" after %v changed", l.Trigger)
	}
	switch {
	case l.Err != "":
		fmt.Fprintf(w, "error: %s\n", l.Err)
	case l.Verdict != "":
		fmt.Fprintf(w, "%s in %.1f ms; status: %s\n", what, l.Latency, l.Verdict)
	default:
		fmt.Fprintf(w, "%s in %.1f ms\n", what, l.Latency)
	}
}
