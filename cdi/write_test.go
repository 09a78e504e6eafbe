package cdi_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// onlyFileInDir fails the test when the directory of p, a spec file,
// holds anything else: a write left a temporary file behind.
func onlyFileInDir(t *testing.T, p string) {
	t.Helper()
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Errorf("files left beside %s: %v", filepath.Base(p), entries)
	}
}

func TestPatchFileErrors(t *testing.T) {
	t.Parallel()
	t.Run("missing-spec", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		os.Remove(mustPath(t, root, specPath))
		_, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
		if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "cdi-generator") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("malformed-spec", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "broken-malformed-spec")
		before := readFile(t, root, specPath)
		_, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
		if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), specPath) {
			t.Fatalf("err = %v", err)
		}
		if !bytes.Equal(before, readFile(t, root, specPath)) {
			t.Errorf("spec changed")
		}
	})
	t.Run("missing-driver-root", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		opts := nixosOptions("amd64")
		opts.Discover.DriverRoot = "/run/no-such-driver"
		_, err := cdi.PatchFile(root, opts, false)
		if !errors.Is(err, fault.ErrUnavailable) {
			t.Fatalf("err = %v", err)
		}
	})
	// The spec itself a symlink: refused, the link and its target intact.
	t.Run("symlink-spec", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		p := mustPath(t, root, specPath)
		if err := os.Rename(p, p+".real"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(p)+".real", p); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(p + ".real")
		_, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
		if !errors.Is(err, fault.ErrCantWrite) {
			t.Fatalf("err = %v", err)
		}
		after, _ := os.ReadFile(p + ".real")
		if st, _ := os.Lstat(p); st.Mode()&fs.ModeSymlink == 0 || !bytes.Equal(before, after) {
			t.Errorf("symlinked spec modified")
		}
	})
	// Mode survives the rename; dry-run writes nothing and leaves no file.
	t.Run("mode-and-dry-run", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		p := mustPath(t, root, specPath)
		if err := os.Chmod(p, 0o640); err != nil {
			t.Fatal(err)
		}
		before := readFile(t, root, specPath)
		res, err := cdi.PatchFile(root, nixosOptions("amd64"), true)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Changed || res.Written || !strings.Contains(res.Diff, "+        \"containerPath\": \"/etc/vulkan/icd.d/nvidia_icd.json\"") {
			t.Errorf("dry run: changed=%v written=%v diff:\n%s", res.Changed, res.Written, res.Diff)
		}
		if !bytes.Equal(before, readFile(t, root, specPath)) {
			t.Errorf("dry run wrote")
		}
		if _, err := cdi.PatchFile(root, nixosOptions("amd64"), false); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(p)
		if st.Mode().Perm() != 0o640 {
			t.Errorf("mode = %v, want 0640", st.Mode().Perm())
		}
		onlyFileInDir(t, p)
	})
	// A failure after the temporary file was fully written (validation)
	// leaves the old file and no temporary behind.
	t.Run("failed-write-keeps-old", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		p := mustPath(t, root, specPath)
		before := readFile(t, root, specPath)
		boom := errors.New("boom")
		err := root.WriteFile(specPath, []byte("{}"), hostfsValidate(func(string) error { return boom }))
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		if !bytes.Equal(before, readFile(t, root, specPath)) {
			t.Errorf("old file changed")
		}
		onlyFileInDir(t, p)
	})
	// A mount nodeprep does not own at one of its container paths is kept
	// and reported; one it owns is replaced.
	t.Run("foreign-and-owned-mounts", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		os.MkdirAll(mustPath(t, root, "/etc"), 0o755)
		os.WriteFile(mustPath(t, root, "/etc/my-icd.json"), []byte("{}"), 0o644)
		addMounts(t, root,
			&specs.Mount{HostPath: "/etc/my-icd.json", ContainerPath: "/etc/vulkan/icd.d/nvidia_icd.json", Options: cdi.MountOptions},
			&specs.Mount{HostPath: "/run/opengl-driver/share/glvnd/egl_vendor.d/old.json", ContainerPath: "/usr/share/glvnd/egl_vendor.d/10_nvidia.json", Options: cdi.MountOptions})
		res, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
		if err != nil {
			t.Fatal(err)
		}
		if !hasFinding(res.Findings, cdi.CodeForeignMount, "/etc/my-icd.json") {
			t.Errorf("foreign mount not reported: %v", res.Findings)
		}
		_, patched := loadSpec(t, root)
		if m := mountAt(patched, "/etc/vulkan/icd.d/nvidia_icd.json"); m.HostPath != "/etc/my-icd.json" {
			t.Errorf("foreign mount replaced: %+v", m)
		}
		if m := mountAt(patched, "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"); m.HostPath != "/run/opengl-driver/share/glvnd/egl_vendor.d/10_nvidia.json" {
			t.Errorf("owned mount not replaced: %+v", m)
		}
	})
}

// A result `cdi check` would refuse is never written: a mount whose host
// file is missing, two mounts at one container path, a device the
// consumer will ask for that is absent.
func TestPatchFileRefusesWhatCheckRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		edit   func(*specs.Spec)
		expect []cdi.ExpectedDevice
		code   string
	}{
		{name: "missing-host-path", edit: func(s *specs.Spec) {
			s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{HostPath: "/opt/other.json", ContainerPath: "/etc/vulkan/icd.d/nvidia_icd.json"})
		}, code: cdi.CodeMissingHostPath},
		{name: "duplicate", edit: func(s *specs.Spec) {
			m := *s.ContainerEdits.Mounts[0]
			s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &m)
		}, code: cdi.CodeDuplicateMount},
		{name: "expected-device", edit: func(*specs.Spec) {}, expect: []cdi.ExpectedDevice{{Name: "GPU-00000000-0000-0000-0000-00000000dead"}}, code: cdi.CodeMissingDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, "nixos-h200")
			_, spec := loadSpec(t, root)
			tt.edit(spec)
			writeSpec(t, root, spec)
			before := readFile(t, root, specPath)
			opts := nixosOptions("amd64")
			opts.Expect = tt.expect
			res, err := cdi.PatchFile(root, opts, false)
			if err != nil {
				t.Fatal(err)
			}
			if res.Written || !hasFinding(res.Findings, tt.code, "") {
				t.Errorf("written=%v findings=%v, want %s and no write", res.Written, codes(res.Findings), tt.code)
			}
			if !bytes.Equal(before, readFile(t, root, specPath)) {
				t.Error("spec changed")
			}
		})
	}
}

// A manifest decides what is mounted into every GPU container: a
// library_path naming a file that is not a shared library is refused.
func TestManifestCannotMountArbitraryFiles(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	os.MkdirAll(mustPath(t, root, "/etc"), 0o755)
	os.WriteFile(mustPath(t, root, "/etc/shadow"), []byte("root:x"), 0o600)
	icd := mustPath(t, root, nvStore+"/share/vulkan/icd.d/nvidia_icd.x86_64.json")
	os.WriteFile(icd, []byte(`{"file_format_version":"1.0.1","ICD":{"library_path":"/etc/shadow","api_version":"1.3.0"}}`), 0o644)
	res, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Written || !hasFinding(res.Findings, cdi.CodeBadManifest, "/etc/shadow") {
		t.Fatalf("written=%v findings=%v", res.Written, res.Findings)
	}
	_, spec := loadSpec(t, root)
	if mountAt(spec, "/etc/shadow") != nil {
		t.Error("/etc/shadow mounted")
	}
}

func TestMultiDocumentSpecRefused(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	p := mustPath(t, root, "/run/cdi/multi.yaml")
	doc := "cdiVersion: 0.5.0\nkind: a.com/b\ndevices:\n- name: x\n  containerEdits:\n    env: [A=1]\n"
	os.WriteFile(p, []byte(doc+"---\n"+strings.Replace(doc, "a.com/b", "c.com/d", 1)), 0o644)
	opts := nixosOptions("amd64")
	opts.Spec = "/var/run/cdi/multi.yaml"
	if _, err := cdi.PatchFile(root, opts, false); !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "more than one YAML document") {
		t.Fatalf("err = %v", err)
	}
}

func TestMoreThanOneDocument(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		data string
		bad  bool
	}{
		{`{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"env":["A=1"]}}]}`, false},
		{`{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"env":["A=1"]}}]} {"a":1}`, true},
		{"{\"cdiVersion\":\"0.5.0\",\"kind\":\"a.com/b\",\"devices\":[{\"name\":\"x\",\"containerEdits\":{\"env\":[\"A=1\"]}}]}\n---\nkind: x\n", true},
		{"cdiVersion: 0.5.0\nkind: a.com/b\ndevices:\n- name: x\n  containerEdits: {env: [A=1]}\n", false},
		{"cdiVersion: 0.5.0\n---\ncdiVersion: 0.6.0\n", true},
	} {
		_, err := cdi.ParseSpec([]byte(tt.data))
		if got := err != nil && strings.Contains(err.Error(), "more than one"); got != tt.bad {
			t.Errorf("%q: err = %v, want multi-document %v", tt.data, err, tt.bad)
		}
	}
}
