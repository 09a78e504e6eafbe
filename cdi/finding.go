package cdi

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// Severity of a Finding.
type Severity string

// Severities. An error makes `nodeprep cdi check` exit 1; a warning does not.
const (
	SeverityError   Severity = "error"   // makes `cdi check` exit 1 and `cdi patch` write nothing
	SeverityWarning Severity = "warning" // reported only
)

// Finding codes: one per kind of problem, stable for scripts.
const (
	CodeMissingICD           = "missing-icd"              // Vulkan ICD manifest not mounted where the loader looks
	CodeMissingLayer         = "missing-implicit-layer"   // Vulkan implicit layer manifest not mounted
	CodeMissingEGLVendor     = "missing-egl-vendor"       // EGL vendor manifest not mounted where libglvnd looks
	CodeMissingEGLPlatform   = "missing-egl-platform"     // EGL external platform manifest not mounted
	CodeMissingGBM           = "missing-gbm"              // GBM backend not mounted
	CodeMissingGlvnd         = "missing-glvnd"            // glvnd dispatch library not mounted
	CodePartialGlvnd         = "partial-glvnd"            // only some of the four glvnd dispatch libraries
	CodeNoICDOnHost          = "no-icd-on-host"           // the driver root has no ICD manifest for this architecture
	CodeDanglingHostFile     = "dangling-host-file"       // a graphics file under the driver root is a dangling link
	CodeBadManifest          = "bad-manifest"             // a manifest on the host cannot be parsed
	CodeUnresolvedLibrary    = "unresolved-library"       // a manifest's library_path will not resolve in the container
	CodeMissingHostPath      = "missing-host-path"        // a spec hostPath does not exist on the host
	CodeVersionTooLow        = "cdi-version-too-low"      // cdiVersion lower than the fields need (F7)
	CodeDeviceNoEdits        = "device-no-edits"          // a device with no container edits (F8)
	CodeDuplicateMount       = "duplicate-container-path" // two mounts at one container path in one container
	CodeForeignMount         = "foreign-mount"            // another mount holds a container path nodeprep would use
	CodeInvalidSpec          = "invalid-spec"             // the CDI library refuses the spec
	CodeMissingDevice        = "missing-device"           // a device name the consumer asks for is absent (F6)
	CodeMissingDeviceNode    = "missing-device-node"      // a GPU's /dev/nvidia<minor> is not in its device's edits
	CodeNoLdcacheHook        = "no-ldcache-hook"          // no update-ldcache hook: bare sonames rely on the image's cache
	CodeSpecName             = "spec-name"                // a spec file runtimes will not load (not *.json or *.yaml)
	CodeDanglingInContainer  = "dangling-in-container"    // a path a loader opens is a link that leads nowhere inside the container
	CodeMissingDriverLibrary = "missing-driver-library"   // a library a mounted driver library needs (DT_NEEDED, or a Vulkan companion it dlopens) is not in the container
	CodeMixedDriverVersion   = "mixed-driver-version"     // driver libraries of more than one version, or not the driver's
	CodeContainerPathChanged = "container-path-changed"   // a mount nodeprep made is not at the configured cdi.containerPaths
	CodeOptionalLeftOut      = "optional-left-out"        // an optional piece (EGL platform, layer) whose library the host lacks: not mounted
	CodeConflictingSpecs     = "conflicting-specs"        // two specs in one CDI directory declare the same device: the library drops it
	CodeUnpatchableSpec      = "unpatchable-spec"         // a GPU spec the runtime serves that nodeprep cannot patch (read-only store)
	CodeSpecNotRead          = "spec-not-read"            // the named spec is in none of the runtime's CDI directories
	CodeShadowedDevice       = "shadowed-device"          // a later CDI directory serves the same device name
	CodePluginSpec           = "device-plugin-spec"       // the device plugin's own spec: it rewrites it when it starts
	CodeHookConflict         = "hook-conflict"            // a mount where a hook of the spec creates a link or folder: the hook fails, the container does not start
	CodeMissingAllDevice     = "missing-all-device"       // no nvidia.com/gpu=all, which docker/podman users and the NixOS manual ask for
	CodeAllDevicePartial     = "all-device-partial"       // nvidia.com/gpu=all lacks a GPU's device node
	CodeLdcacheGlibc         = "ldcache-glibc"            // the update-ldcache hook adds a folder the spec puts a glibc into: the host's libc.so.6 shadows the image's
	CodeMissingUVMNode       = "missing-uvm-node"         // the GPU devices get no /dev/nvidia-uvm or /dev/nvidia-uvm-tools: every CUDA call in the container fails
)

// Finding is one problem in a spec, as `nodeprep cdi check` prints it:
// "error  missing-icd  message".
type Finding struct {
	Severity Severity `json:"severity" yaml:"severity"` // error or warning
	Code     string   `json:"code" yaml:"code"`         // one of the Code* constants
	Message  string   `json:"message" yaml:"message"`   // what is wrong, naming the file or value
	// FixedByPatch is set by `nodeprep cdi check` (specset.CheckPatched)
	// on a finding that `nodeprep cdi patch` fixes: the spec patched in
	// memory, as the patch writes it, no longer has it. The patch writes
	// nothing while an error it does not fix remains in the spec or the
	// view, so such a finding goes once those errors are fixed.
	FixedByPatch bool `json:"fixedByPatch,omitempty" yaml:"fixedByPatch,omitempty"`
	// Omitted is set on the one finding that stands for the findings of
	// its code that Capped left out: how many there were (its Message
	// says so too). 0 on every other finding.
	Omitted int `json:"omitted,omitempty" yaml:"omitted,omitempty"`
}

// String is the finding as `cdi check` prints it: "severity  code  message".
func (f Finding) String() string {
	return fmt.Sprintf("%-7s  %s  %s", f.Severity, f.Code, f.Message)
}

func errorf(code, format string, args ...any) Finding {
	return Finding{Severity: SeverityError, Code: code, Message: fmt.Sprintf(format, args...)}
}

func warnf(code, format string, args ...any) Finding {
	return Finding{Severity: SeverityWarning, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Findings is a list of findings.
type Findings []Finding

// MarshalJSON encodes no findings as [] rather than null, as the YAML
// encoder does, so that `jq '.findings[]'` works on a clean spec.
func (fs Findings) MarshalJSON() ([]byte, error) {
	if fs == nil {
		return []byte("[]"), nil
	}
	return json.Marshal([]Finding(fs))
}

// Errors counts the findings of severity error, those Capped left out
// included (a finding with Omitted set counts as that many).
func (fs Findings) Errors() int {
	n := 0
	for _, f := range fs {
		if f.Severity == SeverityError {
			n += f.weight()
		}
	}
	return n
}

// Total counts the findings, those Capped left out included.
func (fs Findings) Total() int {
	n := 0
	for _, f := range fs {
		n += f.weight()
	}
	return n
}

// weight is how many findings f stands for: Omitted for the finding
// that stands for those Capped left out, else 1.
func (f Finding) weight() int {
	if f.Omitted > 0 {
		return f.Omitted
	}
	return 1
}

// MaxPerCode is how many findings of one code a CDI view keeps in full
// (Capped): a directory of 36,000 junk *.json files gave 36,000
// invalid-spec findings, 17.6 MB in the status file, more than the
// status file's readers read (bounded.MaxStatus).
const MaxPerCode = 20

// omittedNouns say, per code, what a finding of the code is about, for
// the finding that counts those Capped left out; a code not here is
// "<code> findings".
var omittedNouns = map[string]string{
	CodeInvalidSpec:      "spec files the CDI library refuses (the runtime skips each)",
	CodeConflictingSpecs: "pairs of spec files that declare the same devices",
	CodeShadowedDevice:   "specs with a device a later CDI directory shadows",
	CodeUnpatchableSpec:  "specs nodeprep cannot patch",
	CodeSpecName:         "spec files runtimes do not load",
	CodePluginSpec:       "device plugin specs",
}

// Capped returns fs with at most max findings of each code in full, in
// their order; the others of a code are replaced by one finding of that
// code and severity (two when both severities are left out), where the
// first of them was, whose Omitted counts them and whose Message says how
// many there were ("and 35,980 more spec files the CDI library refuses
// …"). A finding that already stands for left-out findings (Omitted set)
// is folded into the new one, so capping a capped list, or a list merged
// from capped ones, leaves one such finding per code and severity with
// the sum. Errors and Total are the same before and after. fs is not
// modified; with no code over max the result is fs itself.
func (fs Findings) Capped(max int) Findings {
	kept := map[string]int{}
	over := false
	for _, f := range fs {
		if f.Omitted > 0 {
			over = true
			continue
		}
		kept[f.Code]++
		if kept[f.Code] > max {
			over = true
		}
	}
	if !over {
		return fs
	}
	clear(kept)
	type kind struct {
		code     string
		severity Severity
	}
	at := map[kind]int{} // the index in out of a kind's count
	out := make(Findings, 0, min(len(fs), max*8))
	for _, f := range fs {
		if f.Omitted == 0 && kept[f.Code] < max {
			kept[f.Code]++
			out = append(out, f)
			continue
		}
		k := kind{f.Code, f.Severity}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, Finding{Severity: f.Severity, Code: f.Code})
		}
		out[i].Omitted += f.weight()
	}
	for _, i := range at {
		f := &out[i]
		noun, ok := omittedNouns[f.Code]
		if !ok {
			noun = f.Code + " findings"
		}
		f.Message = fmt.Sprintf("and %s more %s, not listed: a list keeps the first %d of a kind", thousands(f.Omitted), noun, max)
	}
	return out
}

// thousands writes n with a comma between each group of three digits:
// 35,980.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// sorted returns the findings errors first, then by code; within a code
// they keep the order they were found in, which is the order of the
// graphics files and of the expected devices (GPU index), so output is
// stable and reads in GPU order.
func (fs Findings) sorted() Findings {
	out := append(Findings(nil), fs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Severity != b.Severity {
			return a.Severity == SeverityError
		}
		return a.Code < b.Code
	})
	return out
}

// Sorted returns the findings errors first, then by code and message, so
// output is stable.
func (fs Findings) Sorted() Findings { return fs.sorted() }
