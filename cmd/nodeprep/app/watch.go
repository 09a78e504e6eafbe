package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/cdi/specwatch"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
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
after it, and the event of its own write starts none. A pass that could not
run (the lock held past --wait, a write that failed) runs again after 0.1 s,
doubling to 5 s, at most 10 times. A spec directory removed and made again,
or replaced by a link to another directory, is watched again and looked at
whole. When the spec nodeprep patched is removed, the status turns not
ready, naming it. It prints one line per pass that wrote a spec or changed
the verdict, with the time from the first event to the spec on disk
(docs/runtime-view.md, "After boot"). When an inotify limit stops it, it
names the sysctl, its value and the fix, and exits 69.`,
		Example: `  nodeprep cdi watch
  nodeprep cdi watch --spec-dir /etc/cdi --spec-dir /var/run/cdi -v`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), g, cmd) },
	}
	o.specFlags.add(cmd)
	o.outputs.add(cmd)
	cmd.Flags().DurationVar(&o.settle, "settle", specwatch.DefaultSettle, fmt.Sprintf("quiet time after the last event before a pass (%s to %s)", specwatch.MinSettle, specwatch.MaxSettle))
	cmd.Flags().DurationVar(&o.wait, "wait", defaultWatchWait, fmt.Sprintf("how long each pass waits for another nodeprep's lock (up, health), 0 to %s; the config's wait, when not 0, replaces the default", config.ShortDuration(config.MaxWait)))
	return cmd
}

// defaultWatchWait is how long a pass of cdi watch waits for the lock
// when neither --wait nor the config's wait says: an up or health run
// takes about a second, and 10 when the API server hangs.
const defaultWatchWait = 30 * time.Second

// watchWait is the lock wait of a pass: --wait when given, else the
// config's wait when it is set (not 0: the config's zero means "the
// default", as for every key), else defaultWatchWait. The one-shot
// commands' default is 0 (fail at once, exit 75), which would make every
// pass that meets a health run fail.
func watchWait(flags *pflag.FlagSet, flagValue, configValue time.Duration) time.Duration {
	if flags.Changed("wait") || configValue == 0 {
		return flagValue
	}
	return configValue
}

// watchRetryable says whether a pass that failed with err is worth
// running again before the next event: a held lock, a write that failed,
// a spec replaced under every plan are; malformed input and a spec that
// does not exist are not (the writer's next write is an event).
func watchRetryable(err error) bool {
	return !errors.Is(err, fault.ErrMalformed) && !errors.Is(err, fault.ErrUsage) && !errors.Is(err, fs.ErrNotExist)
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
	Rearmed  bool     `json:"rearmed,omitempty"` // a spec directory was removed, recreated or re-linked: watched again, everything looked at
	Retry    int      `json:"retry,omitempty"`   // the failed passes before this one in a row, run again
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
	wait := watchWait(cmd.Flags(), o.wait, g.cfg.Wait)
	pass := func(ctx context.Context, t specwatch.Trigger) ([]specwatch.Written, error) {
		t0 := time.Now()
		line := watchLine{Trigger: t.Files, Wrote: []string{}, Initial: t.Initial, Rearmed: t.Rearmed, Retry: t.Retry}
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
			if rp != nil && rp.StatusWritten { // the spec is gone or the view unreadable: the status says so
				line.Ready, line.Verdict = &rp.Report.Ready, rp.Report.Verdict
			}
			return nil, err
		}
		line.Wrote, line.Retries, line.Errors = rp.Wrote, rp.Retries, rp.Patch.Findings.Errors()
		if rp.StatusWritten || (t.Initial && rp.Report != nil) {
			line.Ready, line.Verdict = &rp.Report.Ready, rp.Report.Verdict
		}
		return ownWrites(rp), nil
	}
	g.log.Debug("watching CDI spec directories", "dirs", dirs, "wait", wait.String())
	err := specwatch.Run(ctx, g.host, dirs, pass, specwatch.Options{Settle: o.settle, Log: g.log, Retryable: watchRetryable})
	return fault.Unavailable(err) // no inotify, or one of its limits hit
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
	switch {
	case l.Initial:
		what += " (at start)"
	case l.Rearmed:
		what += " after a spec directory or the path to it changed"
	case len(l.Trigger) > 0:
		what += fmt.Sprintf(" after %v changed", l.Trigger)
	}
	if l.Retry > 0 {
		what += fmt.Sprintf(" (retry %d)", l.Retry)
	}
	switch {
	case l.Err != "" && l.Verdict != "":
		fmt.Fprintf(w, "error: %s; status: %s\n", l.Err, l.Verdict)
	case l.Err != "":
		fmt.Fprintf(w, "error: %s\n", l.Err)
	case l.Verdict != "":
		fmt.Fprintf(w, "%s in %.1f ms; status: %s\n", what, l.Latency, l.Verdict)
	default:
		fmt.Fprintf(w, "%s in %.1f ms\n", what, l.Latency)
	}
}
