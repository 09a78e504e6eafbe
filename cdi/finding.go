package cdi

import (
	"encoding/json"
	"fmt"
	"sort"
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

// Errors counts the findings of severity error.
func (fs Findings) Errors() int {
	n := 0
	for _, f := range fs {
		if f.Severity == SeverityError {
			n++
		}
	}
	return n
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
