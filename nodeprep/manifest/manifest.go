// Package manifest parses the loader manifests a GPU driver ships: Vulkan
// ICD and implicit layer manifests (Vulkan-Loader's LoaderDriverInterface
// and LoaderLayerInterface docs), glvnd EGL vendor manifests and EGL
// external platform manifests. It is the one parser cdi (what to mount) and
// selftest (why a driver did not load) share; it imports nothing of
// nodeprep's. It parses bytes: its callers read a manifest with
// bounded.ReadFile and bounded.MaxManifest.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Kind says which loader reads a manifest and so where it must
// appear in the container.
type Kind string

// Manifest kinds.
const (
	// KindICD is a Vulkan ICD manifest (Vulkan-Loader's LoaderDriverInterface
	// doc: searched in <XDG dirs>/vulkan/icd.d, /etc/vulkan/icd.d,
	// /usr/share/vulkan/icd.d).
	KindICD Kind = "vulkan-icd"
	// KindImplicitLayer is a Vulkan implicit layer manifest
	// (vulkan/implicit_layer.d).
	KindImplicitLayer Kind = "vulkan-implicit-layer"
	// KindEGLVendor is a glvnd EGL vendor manifest (libglvnd's EGL ICD
	// docs: /etc/glvnd/egl_vendor.d, /usr/share/glvnd/egl_vendor.d).
	KindEGLVendor Kind = "egl-vendor"
	// KindEGLPlatform is an EGL external platform manifest (NVIDIA's
	// eglexternalplatform: /etc/egl/egl_external_platform.d,
	// /usr/share/egl/egl_external_platform.d).
	KindEGLPlatform Kind = "egl-external-platform"
)

// Info is what nodeprep reads from a loader manifest: its format
// version, API version and the libraries it names.
type Info struct {
	FileFormatVersion string `json:"fileFormatVersion" yaml:"fileFormatVersion"` // the manifest's file_format_version ("1.0.1")
	// APIVersion is the Vulkan API version an ICD or layer declares; empty
	// for EGL manifests.
	APIVersion string `json:"apiVersion,omitempty" yaml:"apiVersion,omitempty"`
	// Libraries are the library_path values, in file order: an absolute
	// path, a bare soname ("libEGL_nvidia.so.0"), or a path relative to the
	// manifest.
	Libraries []string `json:"libraries" yaml:"libraries"`
}

// manifestFile is the union of the JSON shapes the four kinds use: ICD and
// EGL manifests have "ICD", layer manifests "layer" or (file format 1.0.1+)
// "layers". Unknown keys are allowed: layer manifests carry many.
type manifestFile struct {
	FileFormatVersion *string `json:"file_format_version"`
	ICD               *struct {
		LibraryPath *string `json:"library_path"`
		APIVersion  string  `json:"api_version"`
	} `json:"ICD"`
	Layer  *layerEntry  `json:"layer"`
	Layers []layerEntry `json:"layers"`
}

type layerEntry struct {
	Name        string  `json:"name"`
	LibraryPath *string `json:"library_path"`
	APIVersion  string  `json:"api_version"`
}

// ErrBad is returned (wrapped) by Parse for data that is
// not a manifest of the given kind.
var ErrBad = errors.New("not a valid manifest")

// Parse parses a loader manifest of the given kind. It requires
// file_format_version and, for ICD and EGL manifests, ICD.library_path; for
// layer manifests every layer's library_path (a meta-layer without one is
// skipped). Errors wrap ErrBad.
func Parse(kind Kind, data []byte) (*Info, error) {
	var m manifestFile
	if err := json.Unmarshal(data, &m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: %s is a JSON %s, want %s", ErrBad, orTop(te.Field), te.Value, jsonKind(te.Type.Kind().String()))
		}
		return nil, fmt.Errorf("%w: %w", ErrBad, err)
	}
	if m.FileFormatVersion == nil || *m.FileFormatVersion == "" {
		return nil, fmt.Errorf("%w: no file_format_version", ErrBad)
	}
	info := &Info{FileFormatVersion: *m.FileFormatVersion}
	switch kind {
	case KindICD, KindEGLVendor, KindEGLPlatform:
		if m.ICD == nil || m.ICD.LibraryPath == nil || *m.ICD.LibraryPath == "" {
			return nil, fmt.Errorf("%w: no ICD.library_path", ErrBad)
		}
		info.Libraries = []string{*m.ICD.LibraryPath}
		info.APIVersion = m.ICD.APIVersion
	case KindImplicitLayer:
		layers := m.Layers
		if m.Layer != nil {
			layers = append([]layerEntry{*m.Layer}, layers...)
		}
		if len(layers) == 0 {
			return nil, fmt.Errorf("%w: no layer", ErrBad)
		}
		for _, l := range layers {
			if l.LibraryPath == nil {
				continue // a meta-layer names other layers, no library
			}
			if *l.LibraryPath == "" {
				return nil, fmt.Errorf("%w: layer %q has an empty library_path", ErrBad, l.Name)
			}
			info.Libraries = append(info.Libraries, *l.LibraryPath)
			if info.APIVersion == "" {
				info.APIVersion = l.APIVersion
			}
		}
	default:
		return nil, fmt.Errorf("%w: unknown kind %q", ErrBad, kind)
	}
	return info, nil
}

func orTop(field string) string {
	if field == "" {
		return "the document"
	}
	return field
}

// jsonKind names a Go kind as JSON would: a struct is an object.
func jsonKind(k string) string {
	switch k {
	case "struct", "ptr", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return "a " + k
}
