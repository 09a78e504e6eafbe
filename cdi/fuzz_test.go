package cdi_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nodeprep/nodeprep/cdi"
)

// FuzzPatchIdempotent: any spec the CDI library accepts patches without a
// panic, the result is valid, and patch(patch(x)) == patch(x).
func FuzzPatchIdempotent(f *testing.F) {
	for _, s := range []string{"nixos-h200", "fhs-ubuntu", "broken-low-version", "broken-index-names"} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", "hosts", s, "run", "cdi", "nvidia-container-toolkit.json"))
		if err != nil {
			if data, err = os.ReadFile(filepath.Join("..", "testdata", "hosts", s, "var", "run", "cdi", "nvidia-container-toolkit.json")); err != nil {
				f.Fatalf("seed %s: %v", s, err)
			}
		}
		f.Add(data)
	}
	f.Add([]byte(`{"cdiVersion":"0.3.0","kind":"a.b/c","devices":[{"name":"x","containerEdits":{"env":["A=1"]}}]}`))
	f.Add([]byte("cdiVersion: 0.6.0\nkind: v.io/c\ndevices:\n- name: d\n  containerEdits:\n    mounts:\n    - {hostPath: /a, containerPath: /etc/vulkan/icd.d/nvidia_icd.json}\n"))
	root := hostTree(f, "nixos-h200")
	g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := cdi.ParseSpec(data)
		if err != nil || cdi.ValidateBytes(data, cdi.FormatYAML) != nil && cdi.RequiredVersion(spec) == spec.Version {
			return // not a spec the tool accepts
		}
		if len(cdi.EmptyEditDevices(spec)) > 0 {
			return // refused by PatchFile before patching
		}
		cdi.Patch(spec, g, root)
		once, err := cdi.Encode(spec, cdi.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		if err := cdi.ValidateBytes(once, cdi.FormatJSON); err != nil {
			if cdi.ValidateBytes(data, cdi.FormatYAML) == nil {
				t.Fatalf("patching a valid spec made it invalid: %v", err)
			}
			return
		}
		again, err := cdi.ParseSpec(once)
		if err != nil {
			t.Fatal(err)
		}
		if changes, _ := cdi.Patch(again, g, root); len(changes) != 0 {
			t.Fatalf("second patch changed %v", changes)
		}
		twice, _ := cdi.Encode(again, cdi.FormatJSON)
		if !bytes.Equal(once, twice) {
			t.Fatal("patch(patch(x)) != patch(x)")
		}
	})
}

// FuzzParseSpec: whatever ParseSpec accepts encodes and parses back to the
// same bytes (what PatchFile writes, it can read again unchanged).
func FuzzParseSpec(f *testing.F) {
	f.Add([]byte(`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}]}`))
	f.Add([]byte("cdiVersion: 0.6.0\nkind: a.com/b\nannotations: {x: y}\ndevices: []\n"))
	f.Add([]byte("{} {}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := cdi.ParseSpec(data)
		if err != nil {
			return
		}
		once, err := cdi.Encode(spec, cdi.FormatJSON)
		if err != nil {
			t.Fatal(err)
		}
		again, err := cdi.ParseSpec(once)
		if err != nil {
			t.Fatalf("our own encoding does not parse: %v\n%s", err, once)
		}
		twice, _ := cdi.Encode(again, cdi.FormatJSON)
		if !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", once, twice)
		}
	})
}

// FuzzParseSpecJSON: for JSON, ParseSpec (Kubernetes' strict JSON decoder,
// for memory) accepts what the CDI library's own parser accepts and gives
// the same spec; it may refuse more (a second document, duplicate keys),
// never less. Encoding both with Encode compares them.
func FuzzParseSpecJSON(f *testing.F) {
	f.Add([]byte(`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","major":195}]}}]}`))
	f.Add([]byte(`{"cdiVersion":"0.6.0","kind":"a.com/b","annotations":{"x":"\u00e9"},"devices":[]}`))
	f.Add([]byte(`{"CDIVersion":"0.6.0","kind":"a.com/b","devices":[]}`))
	f.Add([]byte(`{"kind":"a.com/b","kind":"c.com/d","devices":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return
		}
		ours, err := cdi.ParseSpec(data)
		lib, libErr := cdilib.ParseSpec(data)
		if err != nil || lib == nil {
			return
		}
		if libErr != nil {
			t.Fatalf("ParseSpec accepted what the library refuses (%v):\n%s", libErr, data)
		}
		a, _ := cdi.Encode(ours, cdi.FormatJSON)
		b, _ := cdi.Encode(lib, cdi.FormatJSON)
		if !bytes.Equal(a, b) {
			t.Fatalf("ParseSpec and the library differ:\n%s\n%s", a, b)
		}
	})
}
