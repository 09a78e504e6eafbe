package selftest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func FuzzParseUUID(f *testing.F) {
	for _, s := range []string{uuidA, "MIG-" + uuidB[4:], "aaaaaaaa111122223333444444444444", "GPU-", "", "GPU-zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUUID(s)
		if err != nil {
			return
		}
		// Whatever parses formats to a form that parses to the same bytes.
		v, err := ParseUUID(FormatUUID(u))
		if err != nil || v != u {
			t.Fatalf("round trip of %q: %v %v", s, v, err)
		}
		if !sameUUID(s, FormatUUID(u)) {
			t.Fatalf("sameUUID(%q, %q) = false", s, FormatUUID(u))
		}
	})
}

func FuzzDecodeVulkanReport(f *testing.F) {
	good, _ := json.Marshal(VulkanReport{Loader: "libvulkan.so.1", Adapters: []Adapter{nv(0, uuidA), lavapipe(1)}})
	f.Add(good)
	f.Add([]byte(`{"loader":"x","adapters":[{"index":-1,"vendor":4318}]}`))
	f.Add([]byte(`{"loader":"x"} {}`))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeVulkanReport(data)
		if err != nil {
			return
		}
		// A decoded report evaluates without panicking and survives the
		// wire: what the child would print decodes to the same report.
		Evaluate(nil, ProbeResult[VulkanReport]{Report: r}, eglOK(), Policy{RequireEGL: true})
		Evaluate(simulatedInventory(), ProbeResult[VulkanReport]{Report: r}, eglOK(), Policy{AllowCPUAdapter: true})
		roundTrip(t, r, DecodeVulkanReport)
	})
}

func FuzzDecodeEGLReport(f *testing.F) {
	good, _ := json.Marshal(EGLReport{Library: "libEGL.so.1", Devices: []EGLDevice{mesaDevice, nvEGL(1, uuidA)}})
	f.Add(good)
	f.Add([]byte(`{"library":"x","devices":[{"index":3,"uuid":"nope"}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeEGLReport(data)
		if err != nil {
			return
		}
		Evaluate(realInventory(), vkOK(nv(0, uuidA)), ProbeResult[EGLReport]{Report: r}, Policy{RequireEGL: true})
		Evaluate(simulatedInventory(), vkOK(lavapipe(0)), ProbeResult[EGLReport]{Report: r}, Policy{AllowCPUAdapter: true})
		roundTrip(t, r, DecodeEGLReport)
	})
}

// roundTrip checks the report decoders' property: a decoded report, encoded
// as the probe child encodes it, decodes again, and to a report that
// encodes to the same bytes (nothing lost or invented on the wire).
func roundTrip[T any](t *testing.T, r *T, decode func([]byte) (*T, error)) {
	t.Helper()
	first, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decode(first)
	if err != nil {
		t.Fatalf("the encoding of a decoded report does not decode: %v\n%s", err, first)
	}
	second, err := json.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("round trip changed the report:\n%s\n%s", first, second)
	}
}

func FuzzParseICDManifest(f *testing.F) {
	f.Add([]byte(`{"file_format_version":"1.0.0","ICD":{"library_path":"libvulkan_lvp.so","api_version":"1.3.230"}}`))
	f.Add([]byte(`{"ICD":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		lib, err := parseICDManifest(data)
		if err == nil && lib == "" {
			t.Fatal("empty library path without an error")
		}
	})
}

func FuzzReadReport(f *testing.F) {
	f.Add([]byte("noise\n" + ReportPrefix + `{"loader":"x"}` + "\nmore"))
	f.Add([]byte(ReportPrefix))
	f.Add([]byte("no newline at all"))
	f.Add([]byte(strings.Repeat("x", 70000) + "\n" + ReportPrefix + "{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		report, other, found := ReadReport(bytes.NewReader(data), ReportPrefix)
		if found && !bytes.Contains(data, report) {
			t.Fatalf("report %q is not in the input", report)
		}
		if len(other) > 64<<10 || len(other) > len(data) {
			t.Fatalf("kept %d bytes of other output from %d bytes of input (cap 64 KiB)", len(other), len(data))
		}
		if !found && bytes.Contains(data, []byte("\n"+ReportPrefix+"{")) && len(data) < 64<<10 {
			t.Fatalf("missed a report line in %q", data)
		}
	})
}
