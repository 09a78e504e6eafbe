package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// DefaultSpecPath is the host path of the spec nvidia-ctk generates on NixOS
// (nvidia-container-toolkit-cdi-generator.service).
const DefaultSpecPath = "/var/run/cdi/nvidia-container-toolkit.json"

// FileOptions name the spec file and where the graphics files are.
type FileOptions struct {
	// Spec is the host path of the spec (DefaultSpecPath).
	Spec string
	// SpecDirs are the runtime's CDI spec directories (host paths, lowest
	// priority first; containerd's cdi_spec_dirs); empty means the CDI
	// library's defaults. Only the specset package reads them.
	SpecDirs []string
	Discover DiscoverOptions // where to look for the graphics files
	// Expect are the devices the patched spec must serve (from the
	// inventory); PatchFile writes nothing when one is missing.
	Expect []ExpectedDevice
}

// PatchResult is what PatchFile did.
type PatchResult struct {
	Spec string `json:"spec" yaml:"spec"` // host path of the spec
	// Changed is true when the spec needed edits; Written when they were
	// written (false for a dry run).
	Changed  bool     `json:"changed" yaml:"changed"`
	Written  bool     `json:"written" yaml:"written"`   // see Changed
	Changes  []Change `json:"changes" yaml:"changes"`   // the edits made (or, unwritten, that would be made)
	Findings Findings `json:"findings" yaml:"findings"` // problems found, errors first; an error means nothing was written
	// Diff is a unified diff of the file, empty when unchanged.
	Diff     string    `json:"diff,omitempty" yaml:"diff,omitempty"`
	Graphics *Graphics `json:"graphics" yaml:"graphics"` // what Discover found
	// Related are the other GPU specs the runtime serves (package
	// specset), each patched the same way; their findings are in
	// Findings too, prefixed with their path.
	Related []*PatchResult `json:"related,omitempty" yaml:"related,omitempty"`
}

// CheckResult is what CheckFile found.
type CheckResult struct {
	Spec     string    `json:"spec" yaml:"spec"`         // host path of the spec
	Findings Findings  `json:"findings" yaml:"findings"` // one per problem, errors first
	Graphics *Graphics `json:"graphics" yaml:"graphics"` // what Discover found
	// Related are the other GPU specs the runtime serves (package
	// specset), each checked the same way; their findings are in Findings
	// too, prefixed with their path.
	Related []*CheckResult `json:"related,omitempty" yaml:"related,omitempty"`
}

// nameFindings warns about a spec file name the CDI library's directory
// scan skips (pkg/cdi spec-dirs.go: only ".json" and ".yaml").
func nameFindings(specPath string) Findings {
	if ext := path.Ext(specPath); ext != ".json" && ext != ".yaml" {
		return Findings{warnf(CodeSpecName, "%s ends in %q: container runtimes load only *.json and *.yaml from a CDI spec directory", specPath, ext)}
	}
	return nil
}

// Load reads and parses the spec at a host path. A missing file is an error
// marked fault.ErrUnavailable (the generator has not run); one that does not
// parse, fault.ErrMalformed naming the file and the CDI library's complaint.
func Load(host *hostfs.Root, specPath string) ([]byte, *specs.Spec, error) {
	data, err := host.ReadFile(specPath)
	if errors.Is(err, hostfs.ErrNotRegular) {
		return nil, nil, fault.Malformed(fmt.Errorf("reading CDI spec %q: %w", specPath, err))
	}
	if st, lerr := host.Lstat(specPath); errors.Is(err, fs.ErrNotExist) && lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
		target, rerr := host.Resolve(specPath)
		if rerr != nil {
			target = rerr.Error()
		}
		return nil, nil, fault.Unavailable(fmt.Errorf("reading CDI spec %q: it is a dangling link to %s: %w", specPath, target, err))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fault.Unavailable(fmt.Errorf("reading CDI spec %q: %w (has nvidia-container-toolkit-cdi-generator.service, nvidia-ctk cdi generate, run)", specPath, err))
	}
	if err != nil {
		return nil, nil, fault.Unavailable(fmt.Errorf("reading CDI spec %q: %w", specPath, err))
	}
	spec, err := ParseSpec(data)
	if err != nil {
		return nil, nil, fault.Malformed(fmt.Errorf("reading CDI spec %q: %w", specPath, err))
	}
	return data, spec, nil
}

// PatchFile patches the spec file in place (see Patch): it reads it,
// discovers the graphics files, edits, validates the result with the CDI
// library and replaces the file atomically, keeping its mode. When nothing
// needs to change it writes nothing (a second run changes no byte). With
// dryRun it validates and diffs but writes nothing. It is all or nothing:
// when any problem could not be fixed (an error finding, such as no ICD
// manifest on the host) it writes nothing either, and the caller reports
// the findings.
//
// Errors: those of Load and Discover; a device with no container edits, or a
// result the CDI library refuses → fault.ErrMalformed (nothing written);
// a failed write → fault.ErrCantWrite (the old file intact).
func PatchFile(host *hostfs.Root, opts FileOptions, dryRun bool) (*PatchResult, error) {
	old, spec, err := Load(host, opts.Spec)
	if err != nil {
		return nil, err
	}
	if empty := EmptyEditDevices(spec); len(empty) > 0 {
		return nil, fault.Malformed(fmt.Errorf("patching CDI spec %q: device %s has no container edits; nodeprep never writes such a device", opts.Spec, strings.Join(empty, ", ")))
	}
	g, err := Discover(host, opts.Discover)
	if err != nil {
		return nil, err
	}
	changes, findings := Patch(spec, g, host)
	// Whatever `cdi check` would call an error in the result blocks the
	// write: host paths that do not exist, duplicate container paths, and
	// devices the consumer will ask for.
	findings = append(findings, g.Findings...)
	findings = append(findings, Lint(spec, host)...)
	findings = append(findings, CheckDevices(spec, opts.Expect)...)
	findings = append(findings, CheckMIGCaps(spec, host, opts.Expect)...)
	findings = append(findings, nameFindings(opts.Spec)...)
	res := &PatchResult{Spec: opts.Spec, Changes: changes, Findings: findings.sorted(), Graphics: g}
	if len(changes) == 0 {
		return res, nil // nothing to write, whatever the findings say
	}
	format := FormatOf(opts.Spec)
	data, err := Encode(spec, format)
	if err != nil {
		return nil, fmt.Errorf("encoding CDI spec %q: %w", opts.Spec, err)
	}
	if bytes.Equal(data, old) {
		return res, nil
	}
	res.Changed = true
	res.Diff = udiff.Unified("a"+opts.Spec, "b"+opts.Spec, string(old), string(data))
	invalid := func(err error) error {
		return fault.Malformed(fmt.Errorf("patching CDI spec %q: the result is invalid, nothing written: %w", opts.Spec, err))
	}
	if dryRun || res.Findings.Errors() > 0 {
		if err := ValidateBytes(data, format); err != nil {
			return nil, invalid(err)
		}
		return res, nil
	}
	err = host.WriteFile(opts.Spec, data, hostfs.WriteOptions{
		Validate: func(tmp string) error {
			if err := ValidateFile(tmp); err != nil {
				return invalid(err)
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	res.Written = true
	return res, nil
}

// CheckFile lints the spec file (see Check) against opts.Expect and also
// runs the CDI library's own validation, reporting its complaint as an
// invalid-spec finding. It writes nothing. Errors are those of Load and
// Discover.
func CheckFile(host *hostfs.Root, opts FileOptions) (*CheckResult, error) {
	_, spec, err := Load(host, opts.Spec)
	if err != nil {
		return nil, err
	}
	g, err := Discover(host, opts.Discover)
	if err != nil {
		return nil, err
	}
	findings := append(Check(spec, g, host, opts.Expect), nameFindings(opts.Spec)...)
	p, err := host.Path(opts.Spec)
	if err == nil {
		err = ValidateFile(p)
	}
	if err != nil {
		findings = append(findings, errorf(CodeInvalidSpec, "the CDI library refuses %s: %v", opts.Spec, err))
	}
	return &CheckResult{Spec: opts.Spec, Findings: findings.sorted(), Graphics: g}, nil
}
