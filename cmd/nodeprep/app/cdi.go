package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
)

func newCDICommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cdi",
		Short: "Patch or check the CDI spec so containers get Vulkan, EGL and glvnd",
	}
	cmd.AddCommand(newCDIPatchCommand(g), newCDICheckCommand(g), newCDIWatchCommand(g))
	return cmd
}

// specFlags are the inputs cdi patch and cdi check share.
type specFlags struct {
	spec       string
	specDirs   []string
	driverRoot string
	glvndDirs  []string
	arch       string
}

func (f *specFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.spec, "spec", cdi.DefaultSpecPath, "host path of the CDI spec")
	fs.StringArrayVar(&f.specDirs, "spec-dir", nil, "a CDI spec directory the container runtime reads (repeatable, lowest priority first, as containerd's cdi_spec_dirs; default: the cdi_spec_dirs of the containerd config k3s renders, else /etc/cdi and /var/run/cdi)")
	fs.StringVar(&f.driverRoot, "driver-root", "/run/opengl-driver", "host directory of the driver's graphics files")
	fs.StringVar(&f.arch, "arch", runtime.GOARCH, "host architecture as GOARCH names it (amd64, arm64): picks the ICD manifest and the multiarch library directory")
	fs.StringArrayVar(&f.glvndDirs, "glvnd-dir", nil, "host directory holding libEGL.so.1 and the other glvnd dispatch libraries (repeatable; default <driver-root>/lib)")
}

// options resolves flags over the config file.
func (f *specFlags) options(g *globals, cmd *cobra.Command) cdi.FileOptions {
	fs := cmd.Flags()
	c := g.cfg.CDI
	dirs := flagOr(fs, "spec-dir", f.specDirs, c.SpecDirs)
	if len(dirs) == 0 {
		dirs = runtimeSpecDirs(g) // what k3s's containerd reads
	}
	return cdi.FileOptions{
		Spec:     flagOr(fs, "spec", f.spec, c.Spec),
		SpecDirs: dirs,
		Discover: cdi.DiscoverOptions{
			DriverRoot: flagOr(fs, "driver-root", f.driverRoot, c.DriverRoot),
			GlvndDirs:  flagOr(fs, "glvnd-dir", f.glvndDirs, c.GlvndDirs),
			Arch:       f.arch,
			Paths:      containerPaths(c.ContainerPaths, f.arch),
		},
	}
}

// containerPaths fills the config's empty container paths with the
// defaults for arch; a config that sets libDir keeps it.
func containerPaths(p cdi.ContainerPaths, arch string) cdi.ContainerPaths {
	if p.LibDir == cdi.DefaultContainerPaths(runtime.GOARCH).LibDir {
		p.LibDir = cdi.DefaultContainerPaths(arch).LibDir
	}
	return p
}

type cdiPatchOptions struct {
	specFlags
	outputs     repatchFlags
	dryRun      bool
	diff        bool
	check       bool
	changesOnly bool
	wait        time.Duration
}

// repatchFlags are the outputs a re-patch keeps current (cdi patch, cdi
// watch): the status report up wrote and its metrics.
type repatchFlags struct {
	statusFile  string
	metricsFile string
	deviceNames []string
}

func (f *repatchFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.statusFile, "status-file", "/run/nodeprep/status.json", "host path of the status report up wrote: read for the node's GPUs, its cdi stage judged again and rewritten when the verdict or a spec changes (\"\" = none)")
	fs.StringVar(&f.metricsFile, "metrics-file", "", "host path of a Prometheus textfile for node_exporter, rewritten with the status (default: up.metricsFile)")
	fs.StringSliceVar(&f.deviceNames, "device-names", []string{nodepolicy.DeviceNameUUID}, "device names the specs must serve per GPU of the status report: uuid and/or index")
}

// options resolves the flags over the config file.
func (f *repatchFlags) options(g *globals, cmd *cobra.Command, cdiOpts cdi.FileOptions) nodeprep.RepatchOptions {
	fs := cmd.Flags()
	return nodeprep.RepatchOptions{
		CDI:         cdiOpts,
		DeviceNames: flagOr(fs, "device-names", f.deviceNames, g.cfg.CDI.DeviceNames),
		StatusFile:  flagOr(fs, "status-file", f.statusFile, g.cfg.Up.StatusFile),
		MetricsFile: flagOr(fs, "metrics-file", f.metricsFile, g.cfg.Up.MetricsFile),
		Log:         g.log,
		Version:     currentVersion().Version,
		Runtime:     runtimeJudge(g, cdiOpts),
	}
}

func newCDIPatchCommand(g *globals) *cobra.Command {
	o := &cdiPatchOptions{}
	cmd := &cobra.Command{
		Use:   "patch",
		Short: "Add the Vulkan ICD, EGL vendor and glvnd mounts to the generated CDI spec, in place",
		Long: `patch adds the graphics files found under the driver root to the spec's
top-level containerEdits.mounts at the paths FHS loaders search, mounts any
library a manifest names that would not resolve in the container, raises
cdiVersion if the fields need it, validates the result with the CDI library
and replaces the file atomically. It is idempotent: a second run changes no
byte.

It patches every spec the runtime serves GPUs from (the generator's, the
device plugin's, the DRA driver's), and when a status report exists
(--status-file, written by up) it judges its cdi stage again and rewrites
the status and the metrics when a spec or the verdict changed: this is the
re-patch the NixOS module's path unit runs each time a spec is written
after boot (docs/runtime-view.md). A spec another writer replaces while it
is patched is read and patched again, never overwritten with an older one.

It prints one line per change (a mount added or replaced, cdiVersion
raised): each is one finding 'cdi check' reports on the same tree, an
error for an essential piece, a warning for an optional one. --dry-run
prints the same summary and the same problems and writes nothing; --diff
prints the unified diff of the file instead of the change list; --check
exits 1 when the spec would change; --changes-only prints nothing when
nothing was written and nothing is wrong (for the path unit's journal).`,
		Example: `  nodeprep cdi patch --dry-run
  nodeprep cdi patch --dry-run --diff
  nodeprep cdi patch --spec /var/run/cdi/nvidia-container-toolkit.json --driver-root /run/opengl-driver`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g, cmd)
		},
	}
	o.specFlags.add(cmd)
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "report what would change and why it would fail, write nothing")
	cmd.Flags().BoolVar(&o.diff, "diff", false, "print the unified diff of the spec instead of the list of changes")
	cmd.Flags().BoolVar(&o.check, "check", false, "write nothing; exit 1 if the spec would change (for CI)")
	cmd.Flags().BoolVar(&o.changesOnly, "changes-only", false, "print nothing when no spec was written and no problem found")
	o.outputs.add(cmd)
	addWaitFlag(cmd, &o.wait)
	return cmd
}

func (o *cdiPatchOptions) run(ctx context.Context, g *globals, cmd *cobra.Command) error {
	opts := o.options(g, cmd)
	dry := o.dryRun || o.check
	var res *cdi.PatchResult
	if dry {
		plan, err := specset.PlanPatch(g.host, opts)
		if err != nil {
			return err
		}
		res = plan.Result
	} else {
		unlock, err := lock(ctx, g, cmd, o.wait)
		if err != nil {
			return err
		}
		defer unlock() //nolint:errcheck // released on exit anyway
		rp, err := nodeprep.Repatch(ctx, g.host, o.outputs.options(g, cmd, opts))
		if err != nil {
			return err
		}
		res = rp.Patch
		if rp.StatusWritten {
			g.log.Debug("status updated", "file", rp.Report.StatusFile, "verdict", rp.Report.Verdict)
		}
	}
	quiet := o.changesOnly && !written(res) && res.Findings.Errors() == 0
	if !quiet {
		err := g.print(res, func(w io.Writer) error { return writePatchText(w, res, o.diff) })
		if err != nil {
			return err
		}
	}
	if errs := res.Findings.Errors(); errs > 0 {
		return silentIfPrinted(g, fault.CheckFailed(fmt.Errorf("patching CDI spec %q: %s could not be fixed", res.Spec, count(errs, "problem"))))
	}
	if o.check && res.Changed {
		return fault.CheckFailed(fmt.Errorf("CDI spec %q is not patched (%s pending; run nodeprep cdi patch)", res.Spec, count(len(res.Changes), "change")))
	}
	return nil
}

// written reports whether the patch wrote the named spec or another one.
func written(res *cdi.PatchResult) bool {
	if res.Written {
		return true
	}
	return slices.ContainsFunc(res.Related, func(r *cdi.PatchResult) bool { return r.Written })
}

// writePatchText prints a patch's verdict, its changes (or with diff the
// unified diff) and its problems; a dry run reads as a real run would.
func writePatchText(w io.Writer, res *cdi.PatchResult, diff bool) error {
	var verb string
	switch {
	case res.Findings.Errors() > 0 && !res.Written:
		verb = "not patched: nothing written because of the problems below"
	case !res.Changed:
		verb = "already patched, unchanged"
	case !written(res) && res.Findings.Errors() > 0:
		verb = "not patched: nothing written because of the problems below"
	case res.Written:
		verb = "patched, " + count(len(res.Changes), "change")
	case written(res): // only other specs were written
		verb = "already patched, unchanged"
	default:
		verb = "would be patched, " + count(len(res.Changes), "change") + " (dry run: nothing written)"
	}
	relChanges, relSpecs := 0, 0
	for _, rel := range res.Related {
		if len(rel.Changes) > 0 {
			relChanges += len(rel.Changes)
			relSpecs++
		}
	}
	if relChanges > 0 && (written(res) || res.Findings.Errors() == 0) {
		verb += fmt.Sprintf(", and %s in %s the runtime also serves GPUs from", count(relChanges, "change"), count(relSpecs, "other spec"))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", res.Spec, verb)
	if res.Findings.Errors() > 0 && !written(res) {
		// Blocked: the problems are the answer; what a patch would add
		// after they are fixed is for the next run (or --diff) to say.
		if diff {
			b.WriteString(res.Diff)
		}
		if err := writeFindings(&b, res.Findings, res.Skipped); err != nil {
			return err
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	if diff {
		b.WriteString(res.Diff)
	} else {
		for _, c := range res.Changes {
			fmt.Fprintf(&b, "  %s\n", c)
		}
	}
	for _, rel := range res.Related {
		if diff {
			b.WriteString(rel.Diff)
			continue
		}
		for _, c := range rel.Changes {
			fmt.Fprintf(&b, "  %s: %s\n", rel.Spec, c)
		}
	}
	if err := writeFindings(&b, res.Findings, res.Skipped); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// notPatchedCode is the code of the note lines that name a GPU spec the
// runtime serves and nodeprep leaves as it is (cdi.SkippedSpec).
const notPatchedCode = "not-patched"

// writeFindings prints findings in aligned columns: severity, code,
// message; then a note line per spec left as it is, with the reason.
func writeFindings(w io.Writer, fs cdi.Findings, skipped []cdi.SkippedSpec) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Severity, f.Code, f.Message)
	}
	for _, s := range skipped {
		fmt.Fprintf(tw, "note\t%s\t%s (%s) is left as it is: %s\n", notPatchedCode, s.Spec, s.Kind, s.Reason)
	}
	return tw.Flush()
}

type cdiCheckOptions struct {
	specFlags
	inv         inventoryFlags
	deviceNames []string
}

func newCDICheckCommand(g *globals) *cobra.Command {
	o := &cdiCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Lint a CDI spec against the host and the GPU inventory; exit 1 with one line per problem",
		Long: `check reports, one per line in aligned columns (SEVERITY CODE MESSAGE), then a
count line, every graphics file missing from the spec, every manifest library that will not resolve in
the container, host paths that do not exist, a cdiVersion lower than the
fields need, devices with no container edits, duplicate container paths, and
every device name the consumer will ask for that the spec lacks (from the
NVML inventory; --simulate uses a simulated server), device findings in GPU
index order. When k3s is installed it also checks the containerd config k3s
renders: CDI enabled, the spec's directory in cdi_spec_dirs, nvidia runtime
handlers pointing at the NVIDIA container runtime (docs/k3s.md). It writes
nothing. Each error about a missing mount or the cdiVersion is one change
'cdi patch' makes.

It plans that patch in memory and checks the patched specs again, and its
last line says how many of the findings 'cdi patch' fixes and the codes of
those it does not (-o json and -o yaml: "fixedByPatch": true on each it
fixes); the patch writes nothing while an error it does not fix remains.
The exit status is the check's, before any patch.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(g, cmd)
		},
	}
	o.specFlags.add(cmd)
	o.inv.add(cmd.Flags())
	cmd.Flags().StringSliceVar(&o.deviceNames, "device-names", []string{nodepolicy.DeviceNameUUID}, "device names the spec must serve per GPU: uuid and/or index")
	return cmd
}

// inventoryFinding is the finding cdi check adds when the inventory cannot
// be read: the rest of the check still runs.
const inventoryFinding = "inventory-unavailable"

func (o *cdiCheckOptions) run(g *globals, cmd *cobra.Command) error {
	opts := o.options(g, cmd)
	var (
		expect []cdi.ExpectedDevice
		extra  cdi.Findings
	)
	inv, err := o.inv.inventory(g, cmd.Flags())
	switch {
	case err == nil:
		expect, err = nodepolicy.ExpectedCDIDevices(inv, flagOr(cmd.Flags(), "device-names", o.deviceNames, g.cfg.CDI.DeviceNames))
		if err != nil {
			return err
		}
		opts.Discover.DriverVersion = inv.DriverVersion
		extra = append(extra, nodepolicy.InventoryFindings(inv)...)
	case errors.Is(err, fault.ErrUnavailable):
		extra = append(extra, cdi.Finding{Severity: cdi.SeverityWarning, Code: inventoryFinding, Message: fmt.Sprintf("device names not checked: %v", err)})
	default:
		return err
	}
	opts.Expect = expect
	extra = append(extra, runtimeFindings(g, opts.Spec, opts.Discover.DriverRoot)...)
	res, held, err := specset.CheckPatched(g.host, opts)
	if err != nil {
		return err
	}
	res.Findings = oneFindingPerFault(append(res.Findings, extra...))
	errs := res.Findings.Errors()
	err = g.print(res, func(w io.Writer) error {
		if err := writeFindings(w, res.Findings, res.Skipped); err != nil {
			return err
		}
		verdict := "ok"
		if len(res.Findings) > 0 {
			verdict = fmt.Sprintf("%s, %s", count(errs, "error"), count(res.Findings.Total()-errs, "warning"))
		}
		// The count covers every GPU spec judged: say so when there are
		// others (their findings start with their path).
		subject := res.Spec
		if n := len(res.Related); n > 0 {
			subject += " and " + count(n, "other GPU spec")
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", subject, verdict); err != nil {
			return err
		}
		if line := patchFixesLine(res.Findings, held); line != "" {
			_, err = fmt.Fprintln(w, line)
		}
		return err
	})
	if err != nil {
		return err
	}
	if errs > 0 {
		return silentIfPrinted(g, fault.CheckFailed(fmt.Errorf("CDI spec %q: %s", res.Spec, count(errs, "error"))))
	}
	return nil
}

// patchFixesLine is cdi check's last line: how many of the findings fs
// `nodeprep cdi patch` fixes (cdi.Finding.FixedByPatch) and the codes of
// those it does not; held of the fixed ones are in a spec the patch does
// not write until the errors it does not fix are fixed. "" for no finding.
func patchFixesLine(fs cdi.Findings, held int) string {
	if len(fs) == 0 {
		return ""
	}
	fixed := 0
	var left []string
	for _, f := range fs {
		if f.FixedByPatch {
			fixed++
		} else if !slices.Contains(left, f.Code) {
			left = append(left, f.Code)
		}
	}
	if fixed == 0 {
		return "nodeprep cdi patch fixes none of these"
	}
	line := fmt.Sprintf("nodeprep cdi patch fixes %d of these %d", fixed, len(fs))
	if fixed < len(fs) {
		line += ", all but " + strings.Join(left, ", ")
	}
	switch {
	case held == 0:
		return line + " (run it, or let nodeprep up do it at boot)"
	case held == fixed:
		return line + ", once the errors among those are fixed (until then nodeprep up writes no patch)"
	}
	return line + fmt.Sprintf(" (run it, or let nodeprep up do it at boot); %d of them only once the errors among the others are fixed", held)
}

// silentIfPrinted keeps a check's summary error off stderr when the text
// output already listed the problems; JSON/YAML consumers still get the
// line on stderr.
func silentIfPrinted(g *globals, err error) error {
	if g.output == "text" {
		return silent(err)
	}
	return err
}

// oneFindingPerFault drops the CDI view's spec-not-read when the containerd
// check names the same fault from the runtime's side (containerd-spec-dir:
// cdi_spec_dirs leaves out the spec's directory), which also says what to
// change.
func oneFindingPerFault(fs cdi.Findings) cdi.Findings {
	if !slices.ContainsFunc(fs, func(f cdi.Finding) bool { return f.Code == containerd.CodeSpecDirMissing }) {
		return fs
	}
	return slices.DeleteFunc(fs, func(f cdi.Finding) bool { return f.Code == cdi.CodeSpecNotRead })
}
