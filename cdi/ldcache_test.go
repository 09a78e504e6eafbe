package cdi_test

import (
	"bytes"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// glibcStore is the Nix glibc of the NixOS host trees, whose lib folder
// NixOS's generator unit mounts at its own path.
const glibcStore = "/nix/store/1b2c3d4f5g6h7j8k9l0m1n2p3q4r5s6a-glibc-2.39-52"

// editSpec loads root's spec, lets edit change it and writes it back.
func editSpec(t *testing.T, root *hostfs.Root, edit func(*specs.Spec)) {
	t.Helper()
	_, spec := loadSpec(t, root)
	edit(spec)
	writeSpec(t, root, spec)
}

// addLdcacheFolder adds folder to the spec's update-ldcache hook (--folder).
func addLdcacheFolder(t *testing.T, spec *specs.Spec, folder string) {
	t.Helper()
	for _, h := range spec.ContainerEdits.Hooks {
		if name, _ := cdi.ParseHook(h); name == cdi.HookUpdateLdcache {
			h.Args = append(h.Args, "--folder", folder)
			return
		}
	}
	t.Fatal("the spec has no update-ldcache hook")
}

// TestLdcacheGlibc is NVIDIA/k8s-device-plugin#1182 in each shape: a glibc
// in a folder the update-ldcache hook adds to the container's linker cache
// (the host's libc.so.6 then shadows the image's: "undefined symbol:
// __tunable_is_initialized") is an ldcache-glibc error naming the hook, the
// folder and the issue, for check and patch alike (patch writes nothing);
// not the unrelated hook-conflict a directory mounted at the folder used to
// get, and not silence when only libc.so.6 is mounted. Glibc mounted
// outside the hook's folders (what NixOS's module does) and a directory of
// no glibc mounted at a hook folder are no finding.
func TestLdcacheGlibc(t *testing.T) {
	t.Parallel()
	ro := cdi.MountOptions
	tests := []struct {
		name   string
		edit   func(t *testing.T, s *specs.Spec)
		folder string // the folder the finding names; "" = no ldcache-glibc finding
		what   string // how it says glibc gets there
	}{
		{name: "the glibc folder mounted and in the hook", folder: glibcStore + "/lib",
			edit: func(t *testing.T, s *specs.Spec) { addLdcacheFolder(t, s, glibcStore+"/lib") },
			what: "the spec mounts " + glibcStore + "/lib, which puts the host's libc.so.6 there"},
		{name: "only libc.so.6 mounted into the hook's glibc folder", folder: glibcStore + "/lib",
			edit: func(t *testing.T, s *specs.Spec) {
				addLdcacheFolder(t, s, glibcStore+"/lib")
				s.ContainerEdits.Mounts = dropMounts(s.ContainerEdits.Mounts, glibcStore+"/lib", glibcStore+"/lib64")
				s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{HostPath: glibcStore + "/lib/libc.so.6", ContainerPath: glibcStore + "/lib/libc.so.6", Options: ro})
			},
			what: "the spec mounts the host's " + glibcStore + "/lib/libc.so.6 into it"},
		{name: "libc.so.6 mounted into the driver's folder", folder: nvStore + "/lib",
			edit: func(t *testing.T, s *specs.Spec) {
				s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{HostPath: glibcStore + "/lib/libc.so.6", ContainerPath: nvStore + "/lib/libc.so.6", Options: ro})
			},
			what: "the spec mounts the host's " + glibcStore + "/lib/libc.so.6 at " + nvStore + "/lib/libc.so.6 into it"},
		{name: "glibc's package mounted above the hook's folder, per device", folder: glibcStore + "/lib",
			edit: func(t *testing.T, s *specs.Spec) {
				addLdcacheFolder(t, s, glibcStore+"/lib")
				s.ContainerEdits.Mounts = dropMounts(s.ContainerEdits.Mounts, glibcStore+"/lib", glibcStore+"/lib64")
				s.Devices[0].ContainerEdits.Mounts = append(s.Devices[0].ContainerEdits.Mounts, &specs.Mount{HostPath: glibcStore, ContainerPath: glibcStore, Options: ro})
			},
			what: "the spec mounts " + glibcStore + ", which puts the host's libc.so.6 there"},
		{name: "glibc mounted outside the hook's folders (the NixOS module)", edit: func(*testing.T, *specs.Spec) {}},
		{name: "a directory of no glibc mounted at the hook's folder",
			edit: func(t *testing.T, s *specs.Spec) {
				s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{HostPath: "/run/opengl-driver/lib", ContainerPath: nvStore + "/lib", Options: ro})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, "nixos-h200")
			editSpec(t, root, func(s *specs.Spec) { tt.edit(t, s) })
			check := checkNixOS(t, root)
			if hasFinding(check.Findings, cdi.CodeHookConflict, "") {
				t.Errorf("a directory mounted at a folder of the ldcache hook is no hook conflict: %v", check.Findings)
			}
			if tt.folder == "" {
				if hasFinding(check.Findings, cdi.CodeLdcacheGlibc, "") {
					t.Errorf("ldcache-glibc without a glibc in a hook folder: %v", check.Findings)
				}
				return
			}
			want := "the spec's update-ldcache hook adds " + tt.folder + " to the container's linker cache and " + tt.what + ": programs in the image then load the host's libc.so.6 with the image's dynamic loader and fail with \"undefined symbol: __tunable_is_initialized, version GLIBC_PRIVATE\" (NVIDIA/k8s-device-plugin#1182); nodeprep cdi patch does not change the generator's hooks: regenerate the spec so that it mounts no library of " + tt.folder
			if !hasFinding(check.Findings, cdi.CodeLdcacheGlibc, want) {
				t.Errorf("no ldcache-glibc %q:\n%v", want, check.Findings)
			}
			if !hasFinding(check.Findings, cdi.CodeLdcacheGlibc, `--disable-hook update-ldcache (NixOS: add "update-ldcache" to hardware.nvidia-container-toolkit.disable-hooks)`) {
				t.Errorf("the finding does not name the generator's switch: %v", check.Findings)
			}
			before := readFile(t, root, specPath)
			res, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
			if err != nil {
				t.Fatal(err)
			}
			if !hasFinding(res.Findings, cdi.CodeLdcacheGlibc, want) || res.Written || !bytes.Equal(before, readFile(t, root, specPath)) {
				t.Errorf("patch: written %v, findings %v; want the error and nothing written", res.Written, res.Findings)
			}
		})
	}
}

// dropMounts returns ms without the mounts of the given host paths.
func dropMounts(ms []*specs.Mount, hostPaths ...string) []*specs.Mount {
	var out []*specs.Mount
	for _, m := range ms {
		keep := true
		for _, p := range hostPaths {
			keep = keep && m.HostPath != p
		}
		if keep {
			out = append(out, m)
		}
	}
	return out
}
