package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func newCDICommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cdi",
		Short: "Patch or check the CDI spec so containers get Vulkan, EGL and glvnd",
		Args:  noArgs,
	}
	cmd.AddCommand(newCDIPatchCommand(g), newCDICheckCommand(g))
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
	fs.StringArrayVar(&f.specDirs, "spec-dir", nil, "a CDI spec directory the container runtime reads (repeatable, lowest priority first, as containerd's cdi_spec_dirs; default /etc/cdi and /var/run/cdi)")
	fs.StringVar(&f.driverRoot, "driver-root", "/run/opengl-driver", "host directory of the driver's graphics files")
	fs.StringVar(&f.arch, "arch", runtime.GOARCH, "host architecture as GOARCH names it (amd64, arm64): picks the ICD manifest and the multiarch library directory")
	fs.StringArrayVar(&f.glvndDirs, "glvnd-dir", nil, "host directory holding libEGL.so.1 and the other glvnd dispatch libraries (repeatable; default <driver-root>/lib)")
}

// options resolves flags over the config file.
func (f *specFlags) options(g *globals, cmd *cobra.Command) cdi.FileOptions {
	fs := cmd.Flags()
	c := g.cfg.CDI
	return cdi.FileOptions{
		Spec:     flagOr(fs, "spec", f.spec, c.Spec),
		SpecDirs: flagOr(fs, "spec-dir", f.specDirs, c.SpecDirs),
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
	dryRun bool
	check  bool
	wait   time.Duration
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
byte. --dry-run prints the diff and writes nothing; --check exits 1 when the
spec would change.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), g, cmd)
		},
	}
	o.specFlags.add(cmd)
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "print a unified diff of the change, write nothing")
	cmd.Flags().BoolVar(&o.check, "check", false, "write nothing; exit 1 if the spec would change (for CI)")
	addWaitFlag(cmd, &o.wait)
	return cmd
}

func (o *cdiPatchOptions) run(ctx context.Context, g *globals, cmd *cobra.Command) error {
	opts := o.options(g, cmd)
	dry := o.dryRun || o.check
	if !dry {
		unlock, err := lock(ctx, g, cmd, o.wait)
		if err != nil {
			return err
		}
		defer unlock() //nolint:errcheck // released on exit anyway
	}
	res, err := specset.Patch(g.host, opts, dry)
	if err != nil {
		return err
	}
	err = g.print(res, func(w io.Writer) error {
		if o.dryRun {
			if !res.Changed {
				_, err := fmt.Fprintf(w, "%s: no change\n", res.Spec)
				return err
			}
			_, err := io.WriteString(w, res.Diff)
			return err
		}
		return writePatchText(w, res)
	})
	if err != nil {
		return err
	}
	if errs := res.Findings.Errors(); errs > 0 {
		return silentIfPrinted(g, fault.CheckFailed(fmt.Errorf("patching CDI spec %q: %d problem(s) could not be fixed", res.Spec, errs)))
	}
	if o.check && res.Changed {
		return fault.CheckFailed(fmt.Errorf("CDI spec %q is not patched (%d change(s) pending; run nodeprep cdi patch)", res.Spec, len(res.Changes)))
	}
	return nil
}

func writePatchText(w io.Writer, res *cdi.PatchResult) error {
	verb := "patched"
	switch {
	case res.Findings.Errors() > 0 && !res.Written:
		verb = "not patched: nothing written because of the problems below"
	case !res.Changed:
		verb = "already patched, unchanged"
	case !res.Written && res.Findings.Errors() > 0:
		verb = "not patched: nothing written because of the problems below"
	case !res.Written:
		verb = "would be patched"
	}
	if _, err := fmt.Fprintf(w, "%s: %s\n", res.Spec, verb); err != nil {
		return err
	}
	for _, c := range res.Changes {
		if _, err := fmt.Fprintf(w, "  %s\n", c); err != nil {
			return err
		}
	}
	for _, rel := range res.Related {
		for _, c := range rel.Changes {
			if _, err := fmt.Fprintf(w, "  %s: %s\n", rel.Spec, c); err != nil {
				return err
			}
		}
	}
	for _, f := range res.Findings {
		if _, err := fmt.Fprintf(w, "%s\n", f); err != nil {
			return err
		}
	}
	return nil
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
		Long: `check reports, one per line ("error|warning  CODE  message"), every graphics
file missing from the spec, every manifest library that will not resolve in
the container, host paths that do not exist, a cdiVersion lower than the
fields need, devices with no container edits, duplicate container paths, and
every device name the consumer will ask for that the spec lacks (from the
NVML inventory; --simulate uses a simulated server). It writes nothing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(g, cmd)
		},
	}
	o.specFlags.add(cmd)
	o.inv.add(cmd.Flags())
	cmd.Flags().StringSliceVar(&o.deviceNames, "device-names", []string{nodeprep.DeviceNameUUID}, "device names the spec must serve per GPU: uuid and/or index")
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
		expect, err = nodeprep.ExpectedCDIDevices(inv, flagOr(cmd.Flags(), "device-names", o.deviceNames, g.cfg.CDI.DeviceNames))
		if err != nil {
			return err
		}
		opts.Discover.DriverVersion = inv.DriverVersion
		extra = append(extra, nodeprep.InventoryFindings(inv)...)
	case errors.Is(err, fault.ErrUnavailable):
		extra = append(extra, cdi.Finding{Severity: cdi.SeverityWarning, Code: inventoryFinding, Message: fmt.Sprintf("device names not checked: %v", err)})
	default:
		return err
	}
	opts.Expect = expect
	res, err := specset.Check(g.host, opts)
	if err != nil {
		return err
	}
	res.Findings = append(res.Findings, extra...)
	err = g.print(res, func(w io.Writer) error {
		for _, f := range res.Findings {
			if _, err := fmt.Fprintln(w, f); err != nil {
				return err
			}
		}
		if len(res.Findings) == 0 {
			_, err := fmt.Fprintf(w, "%s: ok\n", res.Spec)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := res.Findings.Errors(); n > 0 {
		return silentIfPrinted(g, fault.CheckFailed(fmt.Errorf("CDI spec %q: %d error(s)", res.Spec, n)))
	}
	return nil
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
