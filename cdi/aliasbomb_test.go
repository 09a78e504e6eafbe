package cdi

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// yamlSpecBomb is a YAML CDI spec of one size-byte variable aliased n
// times in a device's environment.
func yamlSpecBomb(size, n int) string {
	return "cdiVersion: \"0.6.0\"\nkind: nvidia.com/gpu\nannotations: {x: &a \"X=" + strings.Repeat("x", size) + "\"}\n" +
		"devices:\n- name: \"0\"\n  containerEdits:\n    env: [" + strings.Repeat("*a, ", n-1) + "*a]\n    deviceNodes: [{path: /dev/nvidia0}]\n"
}

// TestParseSpecAliasBomb: a YAML spec whose aliases expand past
// yamlbound.MaxCDISpec is refused before yaml.v3 decodes it (ours or the
// CDI library's), in any document; Load marks it malformed naming the
// file; aliases within the bound and JSON parse.
func TestParseSpecAliasBomb(t *testing.T) {
	t.Parallel()
	bomb := yamlSpecBomb(400_000, 400)
	for name, data := range map[string]string{
		"first document":  bomb,
		"second document": "cdiVersion: \"0.6.0\"\nkind: nvidia.com/gpu\ndevices: [{name: \"0\", containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}}]\n---\n" + bomb,
	} {
		if _, err := ParseSpec([]byte(data)); !errors.Is(err, yamlbound.ErrExpands) {
			t.Errorf("%s: ParseSpec = %v; want ErrExpands", name, err)
		}
	}
	if spec, err := ParseSpec([]byte(yamlSpecBomb(10, 3))); err != nil || len(spec.Devices[0].ContainerEdits.Env) != 3 {
		t.Errorf("aliases within the bound: %v", err)
	}

	root := testkit.HostFiles(t, map[string]string{"/var/run/cdi/nvidia.yaml": bomb})
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Load(host, "/var/run/cdi/nvidia.yaml")
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "/var/run/cdi/nvidia.yaml") {
		t.Errorf("Load of the bomb: %v; want malformed, ErrExpands, naming the file", err)
	}
}
