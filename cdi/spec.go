package cdi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// ParseSpec parses CDI spec data (JSON or YAML) with the CDI library's
// strict parser (unknown fields rejected). It does not validate: a spec
// whose cdiVersion is too low for its fields still parses, so that Patch can
// raise it (F7). Validate checks the rest.
func ParseSpec(data []byte) (*specs.Spec, error) {
	// The CDI library decodes only the first YAML document; a file with
	// more would lose the rest when written back.
	if moreThanOneDocument(data) {
		return nil, fmt.Errorf("more than one YAML document: a CDI spec file holds one spec")
	}
	spec, err := cdilib.ParseSpec(data)
	if err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, fmt.Errorf("no CDI spec data")
	}
	return spec, nil
}

// moreThanOneDocument reports whether data holds a second document after
// the first. JSON (what nvidia-ctk writes) is checked with encoding/json,
// which is cheap; anything else is decoded as YAML twice over.
func moreThanOneDocument(data []byte) bool {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		var first json.RawMessage
		if err := dec.Decode(&first); err == nil {
			_, err := dec.Token()
			return !errors.Is(err, io.EOF)
		}
		// Not valid JSON: let the YAML check and the library decide.
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first, second any
	if err := dec.Decode(&first); err != nil {
		return false
	}
	return !errors.Is(dec.Decode(&second), io.EOF)
}

// Format is a spec file's encoding.
type Format string

// Spec encodings; the CDI library picks them by file extension.
const (
	FormatJSON Format = "json" // *.json and anything not YAML
	FormatYAML Format = "yaml" // *.yaml and *.yml
)

// FormatOf returns the encoding of a spec file by its extension: ".yaml"
// and ".yml" are YAML, everything else JSON.
func FormatOf(name string) Format {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return FormatYAML
	}
	return FormatJSON
}

// Encode returns the spec's bytes in the given format: JSON indented by two
// spaces with a final newline (as nvidia-ctk writes it), or YAML.
func Encode(spec *specs.Spec, f Format) ([]byte, error) {
	if f == FormatYAML {
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(spec); err != nil {
			return nil, err
		}
		if err := enc.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(spec); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ValidateFile validates the spec file at path (on this machine) with the
// CDI library's own loader, exactly as a container runtime would read it:
// version, kind, device names, container edits. It returns the library's
// complaint.
func ValidateFile(path string) error {
	_, err := cdilib.ReadSpec(path, 0)
	return err
}

// ValidateBytes validates spec data with the CDI library, which validates
// only specs it reads from a file (pkg/cdi ReadSpec): the data goes into an
// anonymous memory file (memfd_create(2)) read back through /proc/self/fd,
// so nothing is written on any file system, not even under /tmp. The
// library parses JSON and YAML alike; f only names the file. It returns
// the library's complaint.
func ValidateBytes(data []byte, f Format) error {
	fd, err := unix.MemfdCreate("nodeprep-cdi."+string(f), unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("validating CDI spec: memfd_create: %w", err)
	}
	mf := os.NewFile(uintptr(fd), "memfd")
	defer mf.Close()
	if _, err := mf.Write(data); err != nil {
		return fmt.Errorf("validating CDI spec: %w", err)
	}
	return ValidateFile(fmt.Sprintf("/proc/self/fd/%d", fd))
}

// RequiredVersion returns the lowest cdiVersion the spec's fields need,
// by the CDI library's rules (specs-go MinimumRequiredVersion).
func RequiredVersion(spec *specs.Spec) string {
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return spec.Version
	}
	return v
}

// VersionLess reports whether CDI version a is lower than b ("0.4.0" <
// "0.5.0"); versions compare as semantic versions, with or without "v".
func VersionLess(a, b string) bool {
	return semver.Compare(canonVersion(a), canonVersion(b)) < 0
}

func canonVersion(v string) string {
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

// RaiseVersion sets spec.Version to max(declared, required) and reports
// whether it changed; it never lowers the version (F7).
func RaiseVersion(spec *specs.Spec) bool {
	req := RequiredVersion(spec)
	if spec.Version == "" || VersionLess(spec.Version, req) {
		spec.Version = req
		return true
	}
	return false
}

// EmptyEditDevices returns the names of devices with no container edits at
// all, which the CDI library treats as invalid (F8).
func EmptyEditDevices(spec *specs.Spec) []string {
	var out []string
	for _, d := range spec.Devices {
		e := d.ContainerEdits
		if len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Hooks) == 0 && len(e.Mounts) == 0 &&
			len(e.NetDevices) == 0 && e.IntelRdt == nil && len(e.AdditionalGIDs) == 0 {
			out = append(out, d.Name)
		}
	}
	return out
}
