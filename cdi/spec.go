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

	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/semver"
	"golang.org/x/sys/unix"
	k8sjson "sigs.k8s.io/json"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
)

// ParseSpec parses CDI spec data (JSON or YAML) strictly (unknown fields
// rejected); YAML whose aliases expand past yamlbound.MaxCDISpec is
// refused before it is decoded (CheckExpansion). It does not validate: a spec whose cdiVersion is too low for
// its fields still parses, so that Patch can raise it (F7). Validate checks
// the rest.
//
// YAML goes through the CDI library's own parser (pkg/cdi ParseSpec,
// yaml.v3 with known fields). JSON, what nvidia-ctk writes, is decoded
// with encoding/json into the same specs-go types, unknown fields
// rejected as the library rejects them (parseJSONSpec): yaml.v3 builds a
// node per scalar first and needs about 10 times a big spec's size; the
// JSON decoder needs about its size.
func ParseSpec(data []byte) (*specs.Spec, error) {
	if len(data) > bounded.MaxCDISpec {
		return nil, fmt.Errorf("%d bytes: larger than the %d MiB a CDI spec may have", len(data), bounded.MaxCDISpec>>20)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("the file is empty: no CDI spec in it (was the generator interrupted?)")
	}
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		spec, err := parseJSONSpec(trimmed)
		if err == nil || json.Valid(trimmed) {
			return spec, err // JSON with an unknown, duplicate or mistyped field
		}
		// Not valid JSON: let the YAML check and the library decide and
		// name the fault.
	}
	if err := CheckExpansion(data); err != nil {
		return nil, err
	}
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

// CheckExpansion returns an error wrapping yamlbound.ErrExpands when the
// YAML of spec data expands, aliases expanded, past
// yamlbound.MaxCDISpec in any of its documents, and nil otherwise; JSON,
// which has no aliases, is not parsed for it. Call it before any YAML
// decoder reads a spec, the CDI library's included: yaml.v3 guards only
// the ratio of aliases to nodes, which one big aliased string passes.
func CheckExpansion(data []byte) error {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		return nil
	}
	return yamlbound.Check(data, yamlbound.MaxCDISpec)
}

// CheckExpansionWithin is CheckExpansion that also draws what the YAML
// spec's aliases expand it to from budget, which the specs of one view
// share (yamlbound.Budget): each spec within yamlbound.MaxCDISpec, ten of
// 200 KB took 1 GiB together. Errors as CheckExpansion's, and the
// budget's (wrapping yamlbound.ErrExpands).
func CheckExpansionWithin(data []byte, budget *yamlbound.Budget) error {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed) {
		return nil
	}
	return budget.Check(data, yamlbound.MaxCDISpec)
}

// parseJSONSpec decodes one JSON object into a spec with Kubernetes'
// strict JSON decoder (sigs.k8s.io/json): field names matched with case,
// unknown and duplicate fields refused, as yaml.v3's known-fields mode
// refuses them, and nothing allowed after the object. It decodes from data
// in place (encoding/json's Decoder would copy it into a growing buffer).
func parseJSONSpec(data []byte) (*specs.Spec, error) {
	var spec specs.Spec
	strict, err := k8sjson.UnmarshalStrict(data, &spec)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return &spec, nil
}

// moreThanOneDocument reports whether YAML data holds a second document
// after the first.
func moreThanOneDocument(data []byte) bool {
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
	return encodeSized(spec, f, 0)
}

// encodeSized is Encode with the expected size of the result (0: unknown)
// for the buffer. JSON is written one device at a time, so a big spec
// costs about its encoded size once, not the compact copy, the indented
// copy and the growing buffers json.Encoder would hold; the bytes are
// exactly json.Encoder's with SetIndent("", "  ") and SetEscapeHTML(false).
func encodeSized(spec *specs.Spec, f Format, sizeHint int) ([]byte, error) {
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
	buf.Grow(sizeHint)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if len(spec.Devices) == 0 {
		if err := enc.Encode(spec); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	// The spec with an empty device list, split where the list goes: a
	// key at the top level is the only `\n  "devices": [` (inside a JSON
	// string a quote is escaped).
	shell := *spec
	shell.Devices = []specs.Device{}
	if err := enc.Encode(&shell); err != nil {
		return nil, err
	}
	const mark = "\n  \"devices\": []"
	at := bytes.LastIndex(buf.Bytes(), []byte(mark))
	if at < 0 {
		return nil, errors.New("encoding CDI spec: no device list in the encoded spec")
	}
	rest := bytes.Clone(buf.Bytes()[at+len(mark):])
	buf.Truncate(at + len(mark) - 1) // keep `"devices": [`
	dev := json.NewEncoder(&buf)
	dev.SetEscapeHTML(false)
	dev.SetIndent("    ", "  ")
	for i := range spec.Devices {
		buf.WriteString("\n    ")
		if err := dev.Encode(&spec.Devices[i]); err != nil {
			return nil, err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		if i < len(spec.Devices)-1 {
			buf.WriteByte(',')
		}
	}
	buf.WriteString("\n  ]")
	buf.Write(rest)
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

// validateBatch is how many devices ValidateSpec hands the CDI library at
// a time: enough that a typical spec goes in one piece, few enough that the
// library's YAML parse of a 10,000-device spec stays small.
const validateBatch = 256

// ValidateSpec validates a spec with the CDI library (ValidateBytes), in
// pieces when it has more than validateBatch devices: each piece is the
// spec with its version, kind, annotations and spec-level edits and a run
// of its devices, so every rule the library applies (version, names,
// edits, devices) is applied to every part, at a fraction of the memory
// (the library parses what it validates with yaml.v3). The rules that
// span devices, no device at all and a device name given twice, are
// checked here across the pieces, with the library's words.
func ValidateSpec(spec *specs.Spec) error {
	if len(spec.Devices) <= validateBatch {
		data, err := Encode(spec, FormatJSON)
		if err != nil {
			return err
		}
		return ValidateBytes(data, FormatJSON)
	}
	seen := make(map[string]bool, len(spec.Devices))
	for _, d := range spec.Devices {
		if seen[d.Name] {
			return fmt.Errorf("invalid spec, multiple device %q", d.Name)
		}
		seen[d.Name] = true
	}
	piece := *spec
	for i := 0; i < len(spec.Devices); i += validateBatch {
		piece.Devices = spec.Devices[i:min(i+validateBatch, len(spec.Devices))]
		data, err := Encode(&piece, FormatJSON)
		if err != nil {
			return err
		}
		if err := ValidateBytes(data, FormatJSON); err != nil {
			return err
		}
	}
	return nil
}

// ValidateBytes validates spec data with the CDI library, which validates
// only specs it reads from a file (pkg/cdi ReadSpec): the data goes into an
// anonymous memory file (memfd_create(2)) read back through /proc/self/fd,
// so nothing is written on any file system, not even under /tmp. The
// library parses JSON and YAML alike; f only names the file. It returns
// the library's complaint.
func ValidateBytes(data []byte, f Format) error {
	if len(data) > bounded.MaxCDISpec {
		return fmt.Errorf("validating CDI spec: %d bytes: larger than the %d MiB a CDI spec may have", len(data), bounded.MaxCDISpec>>20)
	}
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
