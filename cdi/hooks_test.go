package cdi_test

import (
	"slices"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/ctrfs"
)

const (
	ctkPath  = "/nix/store/5d6f7g8h9j0k1l2m3n4p5q6r7s8a9b0c-container-toolkit-1.15.0/bin/nvidia-ctk"
	glxSo0   = nvStore + "/lib/libGLX_nvidia.so.0"
	glxLink  = "libGLX_nvidia.so.550.54.15::" + glxSo0
	cudaLink = "libcuda.so.1::" + nvStore + "/lib/libcuda.so"
)

// TestParseHook reads the hooks as both toolkits write them: nvidia-cdi-hook
// NAME (1.17 and 1.20 with nvidia-cdi-hook), nvidia-ctk hook NAME (older,
// or --nvidia-cdi-hook-path pointing at nvidia-ctk), and urfave/cli's flag
// forms.
func TestParseHook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		hook    specs.Hook
		want    string
		links   []ctrfs.Link
		folders []string
	}{
		{name: "nvidia-cdi-hook create-symlinks", hook: specs.Hook{Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "create-symlinks", "--link", glxLink, "--link=" + cudaLink}},
			want: cdi.HookCreateSymlinks, links: []ctrfs.Link{{Target: "libGLX_nvidia.so.550.54.15", Link: glxSo0}, {Target: "libcuda.so.1", Link: nvStore + "/lib/libcuda.so"}}},
		{name: "nvidia-ctk hook create-symlinks, single dash", hook: specs.Hook{Path: ctkPath, Args: []string{"nvidia-ctk", "hook", "create-symlinks", "-link", "../card1::/dev/dri/by-path/pci-0000:18:00.0-card"}},
			want: cdi.HookCreateSymlinks, links: []ctrfs.Link{{Target: "../card1", Link: "/dev/dri/by-path/pci-0000:18:00.0-card"}}},
		{name: "bad link values are the hook's problem", hook: specs.Hook{Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "create-symlinks", "--link", "nocolons", "--link", "a::relative", "--link", "a::/b::c", "--link"}},
			want: cdi.HookCreateSymlinks},
		{name: "update-ldcache", hook: specs.Hook{Path: ctkPath, Args: []string{"nvidia-ctk", "hook", "update-ldcache", "--ldconfig-path", "/sbin/ldconfig", "--folder", nvStore + "/lib/", "--folder=/usr/lib64"}},
			want: cdi.HookUpdateLdcache, folders: []string{nvStore + "/lib", "/usr/lib64"}},
		{name: "argv0 not the program, path is", hook: specs.Hook{Path: "/opt/bin/nvidia-cdi-hook", Args: []string{"hook", "create-symlinks", "--link", glxLink}},
			want: cdi.HookCreateSymlinks, links: []ctrfs.Link{{Target: "libGLX_nvidia.so.550.54.15", Link: glxSo0}}},
		{name: "another nvidia hook", hook: specs.Hook{Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=550.54.15"}}, want: "enable-cuda-compat"},
		{name: "not an nvidia hook", hook: specs.Hook{Path: "/bin/sh", Args: []string{"sh", "create-symlinks", "--link", glxLink}}},
		{name: "nvidia-ctk without hook", hook: specs.Hook{Path: ctkPath, Args: []string{"nvidia-ctk", "create-symlinks"}}},
		{name: "no args", hook: specs.Hook{Path: "/usr/bin/nvidia-cdi-hook"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name, e := cdi.ParseHook(&tt.hook)
			if name != tt.want || !slices.Equal(e.Links, tt.links) || !slices.Equal(e.Folders, tt.folders) {
				t.Errorf("ParseHook = %q %+v, want %q links %v folders %v", name, e, tt.want, tt.links, tt.folders)
			}
			if e.Ldcache != (tt.want == cdi.HookUpdateLdcache) {
				t.Errorf("Ldcache = %v", e.Ldcache)
			}
		})
	}
}

// FuzzParseHook: any hook parses without panicking, and every link it
// reports has an absolute, clean container path.
func FuzzParseHook(f *testing.F) {
	f.Add("/usr/bin/nvidia-cdi-hook", "nvidia-cdi-hook\x00create-symlinks\x00--link\x00"+glxLink)
	f.Add(ctkPath, "nvidia-ctk\x00hook\x00update-ldcache\x00--folder=/x")
	f.Add("/usr/bin/nvidia-ctk", "nvidia-ctk\x00hook")
	f.Fuzz(func(t *testing.T, p, args string) {
		h := &specs.Hook{Path: p, Args: splitNUL(args)}
		_, e := cdi.ParseHook(h)
		for _, l := range e.Links {
			if l.Link == "" || l.Link[0] != '/' {
				t.Fatalf("link %+v is not a container path", l)
			}
		}
	})
}

func splitNUL(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// TestPatchLeavesHookLinks is issue 18's hook fault, on the spec the real
// nvidia-ctk 1.20.2 writes without --disable-hook (nixos-h200-hooks): the
// ICD names <nvidia-x11>/lib/libGLX_nvidia.so.0, which the spec's
// create-symlinks hook makes in the container. Patching used to bind-mount a file at that
// path, and the real hook then fails with "failed to create symlink:
// device or resource busy", so no container starts. The patch must count
// the hook's link as providing the library and never mount there; a spec
// an older nodeprep patched that way is an error for check, and patch
// takes its own mount away.
func TestPatchLeavesHookLinks(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200-hooks")
	_, spec := loadSpec(t, root)
	if _, ok := cdi.SpecHooks(spec, true).LinkAt(glxSo0); !ok {
		t.Fatalf("the generated spec has no create-symlinks hook making %s", glxSo0)
	}
	g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}

	before := cdi.Check(spec, g, root, nil)
	if hasFinding(before, cdi.CodeUnresolvedLibrary, glxSo0) {
		t.Errorf("check says %s does not resolve, but the hook links it: %v", glxSo0, before)
	}
	patched := cloneSpec(t, spec)
	changes, findings := cdi.Patch(patched, g, root)
	if findings.Errors() > 0 {
		t.Fatalf("patch: %v", findings)
	}
	for _, c := range changes {
		if c.ContainerPath == glxSo0 || c.To == glxSo0 {
			t.Errorf("patch mounts at the hook's link %s: %v", glxSo0, c)
		}
	}
	if m := mountAt(patched, glxSo0); m != nil {
		t.Errorf("patched spec mounts %s at %s", m.HostPath, glxSo0)
	}
	if after := cdi.Check(patched, g, root, nil); after.Errors() > 0 {
		t.Errorf("check after patch: %v", after)
	}
	if again, _ := cdi.Patch(cloneSpec(t, patched), g, root); len(again) > 0 {
		t.Errorf("second patch changes %v", again)
	}

	// The spec an older nodeprep wrote: the mount sits on the link.
	old := cloneSpec(t, patched)
	old.ContainerEdits.Mounts = append(old.ContainerEdits.Mounts, &specs.Mount{HostPath: "/run/opengl-driver/lib/libGLX_nvidia.so.0", ContainerPath: glxSo0, Options: cdi.MountOptions})
	if fs := cdi.Check(old, g, root, nil); !hasFinding(fs, cdi.CodeHookConflict, glxSo0) {
		t.Errorf("check of a mount on the hook's link: %v, want %s", fs, cdi.CodeHookConflict)
	}
	fixed, fs := cdi.Patch(old, g, root)
	if fs.Errors() > 0 || len(fixed) != 1 || fixed[0].Action != "remove" || fixed[0].ContainerPath != glxSo0 {
		t.Errorf("patch of it = %v %v, want the one mount removed", fixed, fs)
	}
	if mountAt(old, glxSo0) != nil {
		t.Error("the mount on the hook's link is still there")
	}

	// A mount the generator made there is not nodeprep's to remove.
	foreign := cloneSpec(t, patched)
	foreign.ContainerEdits.Mounts = append(foreign.ContainerEdits.Mounts, &specs.Mount{HostPath: glxSo0, ContainerPath: glxSo0})
	if _, fs := cdi.Patch(foreign, g, root); !hasFinding(fs, cdi.CodeHookConflict, "regenerate the spec") || mountAt(foreign, glxSo0) == nil {
		t.Errorf("patch with the generator's mount on the link: %v", fs)
	}
}

// TestPatchWithoutHook: the same tree without the hook (NixOS's newer
// generator unit passes --disable-hook create-symlinks) still gets the
// library mounted, as before.
func TestPatchWithoutHook(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	_, spec := loadSpec(t, root)
	g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if _, fs := cdi.Patch(spec, g, root); fs.Errors() > 0 || mountAt(spec, glxSo0) == nil {
		t.Errorf("without the hook, %s must be mounted: %v", glxSo0, fs)
	}
}

func cloneSpec(t *testing.T, s *specs.Spec) *specs.Spec {
	t.Helper()
	data, err := cdi.Encode(s, cdi.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cdi.ParseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
