package app

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// statusOptions are `nodeprep status`'s flags.
type statusOptions struct {
	statusFile string
}

func newStatusCommand(g *globals) *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the last verdict from the status file, read-only (runs no check)",
		Long: `status reads the status file that up, health and the re-patch after boot
write (--status-file, else the config's up.statusFile, /run/nodeprep/status.json;
under --root) and prints its verdict line, when and by which command and
version it was written, and each failed stage's first reason. -o json or
-o yaml print the whole report, as it is in the file.

It is the last report written, not always the last run's: an up that
refuses before its checks (a usage error, an output it cannot write, a
missing --rootfs, a held lock) changes no file, so an older verdict, or
none, stays. Its error is on the terminal, or in journalctl -u nodeprep.

It runs no check, writes nothing and takes no lock: it answers while up or
health runs (with the verdict last written). To run the checks again, run
nodeprep up (on NixOS, systemctl restart nodeprep).

Exit status: 0 the status says ready (tainted included), 1 it says not
ready, 65 the file is not a status report (torn, not JSON, no verdict, over
16 MiB), 69 there is no status file: no nodeprep up has written one (since
boot, for the default file under /run), or it is a dangling symlink.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, g) },
	}
	cmd.Flags().StringVar(&o.statusFile, "status-file", "/run/nodeprep/status.json", "host path of the status report to read (default: up.statusFile)")
	return cmd
}

func (o *statusOptions) run(cmd *cobra.Command, g *globals) error {
	file := flagOr(cmd.Flags(), "status-file", o.statusFile, g.cfg.Up.StatusFile)
	rep, err := nodeprep.ReadStatus(g.host, file)
	if err != nil {
		return statusAdvice(err)
	}
	now := time.Now()
	if err := g.print(rep, func(w io.Writer) error { return writeStatusText(w, rep, now) }); err != nil {
		return fault.CantWrite(fmt.Errorf("printing the status: %w", err))
	}
	if !rep.Ready {
		return silentIfPrinted(g, fault.CheckFailed(fmt.Errorf("%s: %s", file, rep.Verdict)))
	}
	return nil
}

// statusAdvice is ReadStatus's error err with what to do about it, its
// fault kind (the exit code) kept. A missing file is not proof that up
// never ran: an up that refuses before its first stage (a usage error, an
// output it cannot write, a missing --rootfs, a held lock) writes nothing,
// so the advice says where its error went.
func statusAdvice(err error) error {
	switch {
	case errors.Is(err, nodeprep.ErrNoStatus):
		return fmt.Errorf("%w: nodeprep up has not run, or it refused before writing anything (bad flags or config, an output it cannot write, a missing --rootfs, a held lock); "+
			"to see why, run nodeprep up, or systemctl status nodeprep and journalctl -u nodeprep", err)
	case errors.Is(err, bounded.ErrNotRegular):
		return fmt.Errorf("%w: nodeprep up cannot replace it either (it exits 73): remove it, then run nodeprep up", err)
	case errors.Is(err, fault.ErrMalformed):
		return fmt.Errorf("%w: it is not a report nodeprep wrote, and only nodeprep reads it: run nodeprep up to write a new one", err)
	}
	return err
}

// refusedNote is the last line of `nodeprep status`'s text: the report
// is the last one written, and a run that refused before its checks wrote
// none.
const refusedNote = "a later run that refused before its checks is not shown (journalctl -u nodeprep)"

// writeStatusText writes the report's verdict as `nodeprep status` prints
// it: the verdict line (a failed stage named, its reason on its own line,
// as up's last line does), when and by what the report was written (its
// age at now), each failed stage's first reason (with how many more it
// has) and refusedNote.
//
//	not ready: selftest failed
//	written 2026-11-01T10:12:03Z (4m12s ago) by nodeprep up, version 0.4.0
//	✗ selftest  GPU-228ca55b-… matched no Vulkan adapter
//	a later run that refused before its checks is not shown (journalctl -u nodeprep)
func writeStatusText(w io.Writer, r *nodeprep.Report, now time.Time) error {
	var b strings.Builder
	var failed []nodeprep.StageResult
	for _, s := range r.Stages {
		if s.Status == nodeprep.StatusFailed {
			failed = append(failed, s)
		}
	}
	verdict := r.Verdict
	if len(failed) > 0 && len(failed[0].Reasons) > 0 && verdict == "not ready: "+failed[0].Name+": "+failed[0].Reasons[0] {
		verdict = "not ready: " + failed[0].Name + " failed"
	}
	b.WriteString(verdict + "\n")

	written := r.StartedAt.Add(time.Duration(r.DurationMS * float64(time.Millisecond))).UTC().Truncate(time.Second)
	fmt.Fprintf(&b, "written %s", written.Format(time.RFC3339))
	if age := now.Sub(written).Round(time.Second); age >= 0 {
		fmt.Fprintf(&b, " (%s ago)", age)
	}
	by := "up"
	if r.Command != "" {
		by = r.Command
	}
	version := r.Version
	if version == "" {
		version = "unknown"
	}
	fmt.Fprintf(&b, " by nodeprep %s, version %s", by, version)
	if r.Simulated && r.Inventory != nil {
		fmt.Fprintf(&b, ", simulated GPUs (%s)", r.Inventory.Server)
	}
	b.WriteString("\n")
	for _, s := range failed {
		reason := s.Summary
		if len(s.Reasons) > 0 {
			reason = s.Reasons[0]
		}
		if more := len(s.Reasons) - 1; more > 0 {
			reason += fmt.Sprintf(" (and %d more: nodeprep status -o json lists them)", more)
		}
		fmt.Fprintf(&b, "✗ %-9s %s\n", s.Name, reason)
	}
	// An up that refuses before its first stage writes nothing, by design:
	// this report can be older than the last run.
	b.WriteString(refusedNote + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}
