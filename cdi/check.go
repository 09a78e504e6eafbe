package cdi

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// ExpectedDevice is a device the consumer will ask the spec for: its name
// within the spec's kind ("GPU-<uuid>", "0", "MIG-<uuid>") and the device
// nodes its edits must carry ("/dev/nvidia0").
type ExpectedDevice struct {
	Name        string   `json:"name" yaml:"name"`                                   // name within the spec's kind
	DeviceNodes []string `json:"deviceNodes,omitempty" yaml:"deviceNodes,omitempty"` // container paths of device nodes its edits must carry
	// For says what asks for it ("GPU 0 (uuid)"), for the message.
	For string `json:"for,omitempty" yaml:"for,omitempty"`
	// MIG marks a MIG device: its edits must carry its /dev/nvidia-caps
	// nodes (the GPU instance's and compute instance's access capabilities).
	MIG bool `json:"mig,omitempty" yaml:"mig,omitempty"`
}

// Check lints a spec against the host and, when expect is non-empty, the
// inventory. It changes nothing and returns one finding per problem:
// every graphics file of g not mounted where its loader looks, every
// manifest library that will not resolve in the container, every hostPath
// missing on the host, a cdiVersion lower than the fields need, devices
// with no container edits, two mounts with one containerPath, expected
// devices or device nodes that are absent (F6), toolkit 1.20.0's
// update-application-profile hook (ProfileHookFindings), and g's own host
// findings.
func Check(spec *specs.Spec, g *Graphics, host *hostfs.Root, expect []ExpectedDevice) Findings {
	a := newAnalyzer(spec, g, host)
	_, fs := a.run(false)
	fs = append(fs, g.Findings...)
	fs = append(fs, lint(spec, a.cache.exist)...)
	fs = append(fs, CheckDevices(spec, expect)...)
	fs = append(fs, CheckMIGCaps(spec, host, expect)...)
	fs = append(fs, ProfileHookFindings(spec)...)
	if _, hook := a.ldcacheFolders(); !hook {
		fs = append(fs, warnf(CodeNoLdcacheHook, "the spec has no update-ldcache hook: libraries named by soname resolve only if the image's linker cache already lists their folder"))
	}
	return fs.sorted()
}

// Lint checks the spec on its own against the host: cdiVersion (F7), empty
// devices (F8), duplicate container paths, host paths that do not exist.
func Lint(spec *specs.Spec, host *hostfs.Root) Findings {
	return lint(spec, host.Exists)
}

// lint is Lint with the host asked through exists.
func lint(spec *specs.Spec, exists func(hostPath string) bool) Findings {
	var fs Findings
	if req := RequiredVersion(spec); VersionLess(spec.Version, req) {
		fs = append(fs, errorf(CodeVersionTooLow, "cdiVersion is %s but the spec's fields need %s: strict consumers refuse it", spec.Version, req))
	}
	for _, name := range EmptyEditDevices(spec) {
		fs = append(fs, errorf(CodeDeviceNoEdits, "device %s has no container edits, which the CDI library refuses: %s, or give the device a device node or mount", name, regenerate))
	}
	fs = append(fs, duplicateMounts("the spec's containerEdits", spec.ContainerEdits.Mounts, nil)...)
	for _, d := range spec.Devices {
		fs = append(fs, duplicateMounts("device "+d.Name, d.ContainerEdits.Mounts, spec.ContainerEdits.Mounts)...)
	}
	seen := map[string]bool{}
	missing := func(what, p string) {
		if p == "" || seen[p] {
			return
		}
		seen[p] = true
		if !exists(p) {
			fs = append(fs, errorf(CodeMissingHostPath, "%s %s does not exist on the host", what, p))
		}
	}
	edits := []specs.ContainerEdits{spec.ContainerEdits}
	for _, d := range spec.Devices {
		edits = append(edits, d.ContainerEdits)
	}
	for _, e := range edits {
		for _, m := range e.Mounts {
			missing("mount hostPath", m.HostPath)
		}
		for _, dn := range e.DeviceNodes {
			if dn.HostPath != "" {
				missing("device node hostPath", dn.HostPath)
			} else {
				missing("device node", dn.Path)
			}
		}
		for _, h := range e.Hooks {
			missing("hook", h.Path)
		}
	}
	return fs
}

// duplicateMounts reports containerPaths mounted twice in one container:
// twice within mounts, or in mounts and in base (the top-level edits every
// device also gets).
func duplicateMounts(where string, mounts, base []*specs.Mount) Findings {
	var fs Findings
	count := map[string]int{}
	for _, m := range mounts {
		count[path.Clean(m.ContainerPath)]++
	}
	for _, m := range base {
		if count[path.Clean(m.ContainerPath)] > 0 {
			count[path.Clean(m.ContainerPath)] += 1
		}
	}
	var dups []string
	for cp, n := range count {
		if n > 1 {
			dups = append(dups, cp)
		}
	}
	slices.Sort(dups)
	for _, cp := range dups {
		fs = append(fs, errorf(CodeDuplicateMount, "%s mounts %s %d times", where, cp, count[cp]))
	}
	return fs
}

// CheckDevices reports each expected device the spec lacks, by its
// fully-qualified name (kind=name, as a pod asks for it), and each expected
// device node missing from that device's edits (F6).
func CheckDevices(spec *specs.Spec, expect []ExpectedDevice) Findings {
	var fs Findings
	for _, want := range expect {
		i := slices.IndexFunc(spec.Devices, func(d specs.Device) bool { return d.Name == want.Name })
		if i < 0 {
			fs = append(fs, errorf(CodeMissingDevice, "%s=%s is not in the spec%s: pods asking for it fail with \"unresolvable CDI devices\"; %s", spec.Kind, want.Name, forSuffix(want.For), missingDeviceFix(want.Name)))
			continue
		}
		d := spec.Devices[i]
		for _, node := range want.DeviceNodes {
			has := slices.ContainsFunc(d.ContainerEdits.DeviceNodes, func(dn *specs.DeviceNode) bool { return dn.Path == node }) ||
				slices.ContainsFunc(spec.ContainerEdits.DeviceNodes, func(dn *specs.DeviceNode) bool { return dn.Path == node })
			if !has {
				fs = append(fs, errorf(CodeMissingDeviceNode, "%s=%s does not carry %s%s", spec.Kind, want.Name, node, forSuffix(want.For)))
			}
		}
	}
	return fs
}

// missingDeviceFix says how to make the spec serve a device of that name:
// generate it with the device-name strategy that makes such names
// (nvidia-ctk's: "GPU-<uuid>" and "MIG-<uuid>" come from uuid, "0" and
// "0:1" from index), or ask for the names the spec has (nodeprep's
// cdi.deviceNames). cdi patch never adds or renames devices: the
// generator's knowledge of the GPUs is what makes them.
func missingDeviceFix(name string) string {
	strategy := "index"
	if strings.HasPrefix(name, "GPU-") || strings.HasPrefix(name, "MIG-") {
		strategy = "uuid"
	}
	return fmt.Sprintf("generate the spec with device-name strategy %[1]s (NixOS: hardware.nvidia-container-toolkit.device-name-strategy = \"%[1]s\"; nvidia-ctk cdi generate --device-name-strategy=%[1]s), or set nodeprep's cdi.deviceNames (--device-names) to the names the spec serves", strategy)
}

func forSuffix(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf(" (%s)", s)
}

// MIGCapsDir is where the nvidia-caps device nodes live; a MIG device is
// opened through its GPU instance's and compute instance's nodes there
// (nvidia-container-toolkit: the access minors under
// /proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/access).
const MIGCapsDir = "/dev/nvidia-caps"

// CheckMIGCaps reports each expected MIG device of the spec whose edits
// carry no /dev/nvidia-caps node: the container cannot open the MIG
// instance. It names whether the host has the nodes (the spec is stale:
// regenerate it) or not (the caps nodes were never created). nodeprep does
// not add them itself: which nodes belong to which instance is the
// generator's knowledge, and adding every one would open every instance to
// every pod.
func CheckMIGCaps(spec *specs.Spec, host *hostfs.Root, expect []ExpectedDevice) Findings {
	var fs Findings
	hostCaps := -1
	for _, want := range expect {
		if !want.MIG {
			continue
		}
		i := slices.IndexFunc(spec.Devices, func(d specs.Device) bool { return d.Name == want.Name })
		if i < 0 {
			continue // CheckDevices names it
		}
		carries := func(e specs.ContainerEdits) bool {
			return slices.ContainsFunc(e.DeviceNodes, func(dn *specs.DeviceNode) bool { return strings.HasPrefix(dn.Path, MIGCapsDir+"/") })
		}
		if carries(spec.Devices[i].ContainerEdits) || carries(spec.ContainerEdits) {
			continue
		}
		if hostCaps < 0 {
			entries, _ := host.ReadDir(MIGCapsDir)
			hostCaps = len(entries)
		}
		if hostCaps > 0 {
			fs = append(fs, errorf(CodeMissingDeviceNode, "%s=%s carries no %s node although the host has %d: the container cannot open the MIG instance%s; regenerate the spec (nvidia-ctk cdi generate) after configuring MIG", spec.Kind, want.Name, MIGCapsDir, hostCaps, forSuffix(want.For)))
		} else {
			fs = append(fs, errorf(CodeMissingDeviceNode, "%s=%s carries no %s node and the host has none: the container cannot open the MIG instance%s (nvidia-ctk system create-dev-char-symlinks --create-all, or load nvidia-caps)", spec.Kind, want.Name, MIGCapsDir, forSuffix(want.For)))
		}
	}
	return fs
}
