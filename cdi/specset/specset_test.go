package specset_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

func h200Expect() []cdi.ExpectedDevice {
	var out []cdi.ExpectedDevice
	for i := range 8 {
		out = append(out, cdi.ExpectedDevice{Name: gpu.SimulatedUUID("dgx-h200", i), DeviceNodes: []string{fmt.Sprintf("/dev/nvidia%d", i)}})
	}
	return out
}

func h200Options() cdi.FileOptions {
	return cdi.FileOptions{
		Spec:     cdi.DefaultSpecPath,
		Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"},
		Expect:   h200Expect(),
	}
}

func findingsText(fs cdi.Findings) []byte {
	var b bytes.Buffer
	for _, f := range fs {
		fmt.Fprintln(&b, f)
	}
	return b.Bytes()
}

// snapshot returns every regular file's bytes under root, by path.
func snapshot(t *testing.T, root *hostfs.Root) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root.Dir(), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		out[p] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestViewGolden checks and patches each host tree through the runtime's
// view and compares the findings before and after with golden files under
// testdata/cdi/view/. A tree whose view has an error must change no file;
// the others must pass check after one patch, and a second patch changes
// nothing.
func TestViewGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario string
		wantErr  bool     // patch refuses: nothing may change on disk
		patched  []string // specs the patch must write
		code     string   // a finding code the check must report
		absent   string   // a finding code the check must not report
		skipped  []string // specs check and patch must name as left as they are
	}{
		{scenario: "nixos-h200", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeMissingICD},
		{scenario: "dup-spec-copy", wantErr: true, code: cdi.CodeConflictingSpecs},
		{scenario: "plugin-kind", patched: []string{cdi.DefaultSpecPath, "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"}, code: cdi.CodePluginSpec},
		{scenario: "plugin-kind-store", wantErr: true, code: cdi.CodeUnpatchableSpec},
		{scenario: "dangling-dir-mount", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeDanglingInContainer},
		{scenario: "missing-companion", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeMissingDriverLibrary},
		{scenario: "modeset-not-in-spec", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeMissingDeviceNode},
		{scenario: "modeset-absent", wantErr: true, code: cdi.CodeMissingDeviceNode},
		{scenario: "mixed-driver-version", wantErr: true, code: cdi.CodeMixedDriverVersion},
		{scenario: "optional-platform-missing", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeOptionalLeftOut},
		{scenario: "coherent-sibling", patched: []string{cdi.DefaultSpecPath, "/var/run/cdi/nvidia-container-toolkit.coherent.json"}, code: cdi.CodeMissingICD},
		// Issue 19: the kinds and names consumers ask for after boot.
		{scenario: "no-all-device", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeMissingAllDevice},
		{scenario: "stale-etc-cdi", patched: []string{cdi.DefaultSpecPath, "/etc/cdi/nvidia.json"}, code: cdi.CodeMissingICD, absent: cdi.CodeMissingDevice},
		{scenario: "dra-driver", patched: []string{cdi.DefaultSpecPath, "/var/run/cdi/k8s.gpu.nvidia.com-device_base.yaml"}, code: cdi.CodeMissingICD,
			skipped: []string{"/var/run/cdi/k8s.gpu.nvidia.com-claim_3f2a9c1e-7b4d-4e8a-9c2f-1d5e6b7a8c90.yaml", "/var/run/cdi/k8s.gpu.nvidia.com-device_vfio.yaml"}},
		// Issue 32: the field faults named right.
		{scenario: "missing-eglcore", patched: []string{cdi.DefaultSpecPath}, code: cdi.CodeMissingDriverLibrary},
		{scenario: "ldcache-glibc-folder", wantErr: true, code: cdi.CodeLdcacheGlibc, absent: cdi.CodeHookConflict},
		{scenario: "ldcache-glibc-libc", wantErr: true, code: cdi.CodeLdcacheGlibc},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			t.Parallel()
			root := testkit.HostTree(t, tt.scenario)
			opts := h200Options()
			check, err := specset.Check(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			testkit.Golden(t, "cdi/view/"+tt.scenario+".check.txt", findingsText(check.Findings))
			if !slices.ContainsFunc(check.Findings, func(f cdi.Finding) bool { return f.Code == tt.code }) {
				t.Errorf("check has no %s finding: %v", tt.code, check.Findings)
			}
			if tt.absent != "" && slices.ContainsFunc(check.Findings, func(f cdi.Finding) bool { return f.Code == tt.absent }) {
				t.Errorf("check reports %s: %v", tt.absent, check.Findings)
			}

			if got := skippedPaths(check.Skipped); !slices.Equal(got, tt.skipped) {
				t.Errorf("check names %q as left as they are, want %q", got, tt.skipped)
			}

			before := snapshot(t, root)
			res, err := specset.Patch(root, opts, false)
			if err != nil {
				t.Fatal(err)
			}
			if got := skippedPaths(res.Skipped); !slices.Equal(got, tt.skipped) {
				t.Errorf("patch names %q as left as they are, want %q", got, tt.skipped)
			}
			testkit.Golden(t, "cdi/view/"+tt.scenario+".patch.txt", findingsText(res.Findings))
			if got := res.Findings.Errors() > 0; got != tt.wantErr {
				t.Fatalf("patch error findings = %v, want %v: %v", got, tt.wantErr, res.Findings)
			}
			if tt.wantErr {
				if res.Written {
					t.Error("patch reports a write despite errors")
				}
				if after := snapshot(t, root); !mapsEqual(before, after) {
					t.Error("patch with errors changed a file")
				}
				return
			}
			var written []string
			for _, r := range append([]*cdi.PatchResult{res}, res.Related...) {
				if r.Written {
					written = append(written, r.Spec)
				}
			}
			if !slices.Equal(written, tt.patched) {
				t.Errorf("written %v, want %v", written, tt.patched)
			}
			res2, err := specset.Patch(root, opts, false)
			if err != nil {
				t.Fatal(err)
			}
			if res2.Changed {
				t.Errorf("second patch changed something")
			}
			check2, err := specset.Check(root, opts)
			if err != nil {
				t.Fatal(err)
			}
			if n := check2.Findings.Errors(); n != 0 {
				t.Errorf("check after patch: %d errors:\n%s", n, findingsText(check2.Findings))
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestGPURole(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]specset.Role{
		"nvidia.com/gpu":                   specset.RoleGenerator,
		"nvidia.com/gpu.coherent":          specset.RoleGenerator,
		"k8s.device-plugin.nvidia.com/gpu": specset.RolePlugin,
		"k8s.device-plugin.nvidia.com/mig": specset.RolePlugin,
		"management.nvidia.com/gpu":        "",
		"nvidia.com/gpux":                  "",
		"intel.com/gpu":                    "",
		"nvidia.com":                       "",
	} {
		got, ok := specset.GPURole(kind)
		if got != want || ok != (want != "") {
			t.Errorf("GPURole(%q) = %q, %v; want %q", kind, got, ok, want)
		}
	}
}

// TestViewDirs: the view reads only the directories it is given, later
// ones winning a device name, and warns about a named spec outside them.
func TestViewDirs(t *testing.T) {
	t.Parallel()
	root := testkit.HostTree(t, "plugin-kind-store")
	v, err := specset.Load(root, []string{"/var/run/cdi"}, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	if v.Findings.Errors() != 0 || len(v.Specs) != 1 {
		t.Fatalf("view over /var/run/cdi only: %d specs, findings %v", len(v.Specs), v.Findings)
	}
	v, err = specset.Load(root, []string{"/etc/cdi"}, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, f := range v.Findings {
		codes = append(codes, f.Code)
	}
	if !slices.Contains(codes, cdi.CodeSpecNotRead) || !slices.Contains(codes, cdi.CodeUnpatchableSpec) {
		t.Errorf("view over /etc/cdi: findings %v, want spec-not-read and unpatchable-spec", v.Findings)
	}

	// The same spec in both directories: /var/run/cdi (later) wins the
	// names, /etc/cdi's copy is shadowed, which is no conflict.
	root = testkit.HostTree(t, "nixos-h200")
	data, err := root.ReadFile(cdi.DefaultSpecPath, bounded.MaxCDISpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root.Dir(), "etc/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFile("/etc/cdi/nvidia.json", data, hostfs.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	v, err = specset.Load(root, nil, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	if v.Findings.Errors() != 0 || !strings.Contains(string(findingsText(v.Findings)), cdi.CodeShadowedDevice) {
		t.Errorf("a copy in /etc/cdi: findings %v, want one shadowed-device warning", v.Findings)
	}
}

// skippedPaths are the paths of the specs a result names as left as they
// are, each with a reason (nil for none; a missing reason is a path of
// "<no reason>").
func skippedPaths(ss []cdi.SkippedSpec) []string {
	var out []string
	for _, s := range ss {
		if s.Reason == "" || s.Kind == "" {
			out = append(out, s.Spec+" <no reason>")
			continue
		}
		out = append(out, s.Spec)
	}
	return out
}

// TestUnpatchableShadowed: a spec in the read-only store is an error only
// when a pod can get it. Shadowed in every name by the generator's spec in
// a later directory it is never used (a warning says so); once it declares
// a name no later spec serves, pods asking for that name get it, and the
// error names that device.
func TestUnpatchableShadowed(t *testing.T) {
	t.Parallel()
	root := testkit.HostTree(t, "nixos-h200")
	gen, err := os.ReadFile(filepath.Join(root.Dir(), "run/cdi/nvidia-container-toolkit.json"))
	if err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(root.Dir(), "nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-static-cdi")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, "nvidia.json"), gen, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root.Dir(), "etc/cdi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-static-cdi/nvidia.json", filepath.Join(root.Dir(), "etc/cdi/nvidia.json")); err != nil {
		t.Fatal(err)
	}
	codes := func() []string {
		t.Helper()
		v, err := specset.Load(root, []string{"/etc/cdi", "/var/run/cdi"}, cdi.DefaultSpecPath)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range v.Findings {
			out = append(out, f.Code+": "+f.Message)
		}
		return out
	}
	got := codes()
	if slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, cdi.CodeUnpatchableSpec) }) ||
		!slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, cdi.CodeShadowedDevice) }) {
		t.Errorf("a store spec every name of which a later spec serves: %q, want shadowed-device and no unpatchable-spec", got)
	}
	// The generator's spec loses a device the store spec still declares.
	cut := strings.Replace(string(gen), `"name": "7"`, `"name": "seven"`, 1)
	if cut == string(gen) {
		t.Fatal(`the generated spec has no device "7"`)
	}
	if err := os.WriteFile(filepath.Join(root.Dir(), "run/cdi/nvidia-container-toolkit.json"), []byte(cut), 0o644); err != nil {
		t.Fatal(err)
	}
	got = codes()
	if !slices.ContainsFunc(got, func(s string) bool {
		return strings.HasPrefix(s, cdi.CodeUnpatchableSpec+": pods asking for nvidia.com/gpu=7 get /etc/cdi/nvidia.json")
	}) {
		t.Errorf("a store spec that serves nvidia.com/gpu=7: %q, want unpatchable-spec naming that device", got)
	}
}

// TestClaimWithoutBase: a DRA claim spec is left as it is because its
// devices come with the base spec's; when the view has no base spec (the
// driver has not written it, or the library refuses it), the reason says
// that pods with the claim get no GPU instead of calling the base patched.
func TestClaimWithoutBase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spoil func(path string) error
	}{
		{"no base spec", os.Remove},
		{"a base spec the library refuses", func(p string) error {
			return os.WriteFile(p, []byte("cdiVersion: 0.3.0\nkind: k8s.gpu.nvidia.com/device\ndevices: {\n"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := testkit.HostTree(t, "dra-driver")
			if err := tc.spoil(filepath.Join(root.Dir(), "run/cdi/k8s.gpu.nvidia.com-device_base.yaml")); err != nil {
				t.Fatal(err)
			}
			res, err := specset.Check(root, h200Options())
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Skipped) != 2 || !strings.Contains(res.Skipped[0].Reason, "not in the runtime's view") || strings.Contains(res.Skipped[0].Reason, "which is patched") {
				t.Errorf("skipped = %+v", res.Skipped)
			}
		})
	}
}
