package ctrfs_test

import (
	"errors"
	"slices"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi/ctrfs"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// tree makes a host root with files ("" content) and links (target).
func tree(t *testing.T, files map[string]string, links map[string]string) *hostfs.Root {
	t.Helper()
	dir := t.TempDir()
	testkit.WriteFiles(t, dir, files, links)
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func mounts(pairs ...string) []*specs.Mount {
	var out []*specs.Mount
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, &specs.Mount{HostPath: pairs[i], ContainerPath: pairs[i+1]})
	}
	return out
}

// TestResolve follows container paths through mounts and links the way the
// container sees them, not the host.
func TestResolve(t *testing.T) {
	t.Parallel()
	const store = "/nix/store/h-nvidia/lib"
	host := tree(t, map[string]string{
		store + "/libGLX_nvidia.so.550":   "real",
		"/nix/store/h-env/share/icd.json": "{}",
		"/other/libGLX_nvidia.so.0":       "other",
	}, map[string]string{
		"/nix/store/h-env/lib/libGLX_nvidia.so.0": store + "/libGLX_nvidia.so.0", // absolute, into the store
		store + "/libGLX_nvidia.so.0":             "libGLX_nvidia.so.550",        // relative
		"/nix/store/h-env/lib/loop":               "loop",
		"/nix/store/h-env/lib/up":                 "../share/icd.json",
		"/run/opengl-driver":                      "/nix/store/h-env", // the mount source is followed on the host
	})
	tests := []struct {
		name   string
		mounts []*specs.Mount
		path   string
		want   string // Entry.Path, or "" for dangling
		host   string // Entry.HostPath
		miss   string // DanglingError.Unresolved
		links  int
	}{
		{name: "directory mount, link into an unmounted store path", mounts: mounts("/run/opengl-driver", "/run/opengl-driver"),
			path: "/run/opengl-driver/lib/libGLX_nvidia.so.0", miss: store + "/libGLX_nvidia.so.0", links: 1},
		{name: "the store file mounted too", mounts: mounts("/run/opengl-driver", "/run/opengl-driver", store+"/libGLX_nvidia.so.550", store+"/libGLX_nvidia.so.550", store+"/libGLX_nvidia.so.0", store+"/libGLX_nvidia.so.0"),
			path: "/run/opengl-driver/lib/libGLX_nvidia.so.0", want: store + "/libGLX_nvidia.so.0", host: store + "/libGLX_nvidia.so.550", links: 1},
		{name: "store lib folder mounted: relative link inside it", mounts: mounts("/run/opengl-driver", "/run/opengl-driver", store, store),
			path: "/run/opengl-driver/lib/libGLX_nvidia.so.0", want: store + "/libGLX_nvidia.so.550", host: store + "/libGLX_nvidia.so.550", links: 2},
		{name: "relative link up a folder", mounts: mounts("/run/opengl-driver", "/opt/drv"),
			path: "/opt/drv/lib/up", want: "/opt/drv/share/icd.json", host: "/nix/store/h-env/share/icd.json", links: 1},
		{name: "a later mount at the same path wins", mounts: mounts(store+"/libGLX_nvidia.so.550", "/usr/lib/libGLX.so", "/other/libGLX_nvidia.so.0", "/usr/lib/libGLX.so"),
			path: "/usr/lib/libGLX.so", want: "/usr/lib/libGLX.so", host: "/other/libGLX_nvidia.so.0"},
		{name: "a deeper mount lies on a folder mount, whatever the spec order", mounts: mounts("/other/libGLX_nvidia.so.0", "/opt/drv/lib/libGLX_nvidia.so.0", "/run/opengl-driver", "/opt/drv"),
			path: "/opt/drv/lib/libGLX_nvidia.so.0", want: "/opt/drv/lib/libGLX_nvidia.so.0", host: "/other/libGLX_nvidia.so.0"},
		{name: "nothing mounted there", mounts: mounts("/run/opengl-driver", "/run/opengl-driver"), path: "/usr/lib/libEGL.so.1", miss: "/usr/lib/libEGL.so.1"},
		{name: "a file is not a folder", mounts: mounts(store+"/libGLX_nvidia.so.550", "/x/lib"), path: "/x/lib/y", miss: "/x/lib/y"},
		{name: "link loop", mounts: mounts("/run/opengl-driver", "/d"), path: "/d/lib/loop", miss: "/d/lib/loop", links: 40},
		{name: "mount source missing", mounts: mounts("/nope", "/n"), path: "/n/x", miss: "/n/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := ctrfs.New(host, nil, tt.mounts).Resolve(tt.path)
			if tt.want == "" {
				var de *ctrfs.DanglingError
				if !errors.As(err, &de) || !errors.Is(err, ctrfs.ErrDangling) {
					t.Fatalf("Resolve(%s) = %+v, %v; want dangling", tt.path, e, err)
				}
				if de.Unresolved != tt.miss || len(de.Links) != tt.links {
					t.Errorf("dangling at %s after %d links, want %s after %d: %v", de.Unresolved, len(de.Links), tt.miss, tt.links, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%s): %v", tt.path, err)
			}
			if e.Path != tt.want || e.HostPath != tt.host || len(e.Links) != tt.links {
				t.Errorf("Resolve(%s) = %+v, want path %s host %s after %d links", tt.path, e, tt.want, tt.host, tt.links)
			}
		})
	}
}

// TestImage: paths no mount covers come from the image, and a mount's
// parents exist even in an empty image.
func TestImage(t *testing.T) {
	t.Parallel()
	host := tree(t, map[string]string{"/lib/libx.so": ""}, nil)
	image := tree(t, map[string]string{"/usr/lib/libc.so.6": ""}, map[string]string{"/lib": "usr/lib"})
	f := ctrfs.New(host, image, mounts("/lib/libx.so", "/usr/lib/x86_64-linux-gnu/libx.so"))
	for _, p := range []string{"/lib/libc.so.6", "/usr/lib/x86_64-linux-gnu/libx.so", "/usr/lib/x86_64-linux-gnu"} {
		if _, err := f.Resolve(p); err != nil {
			t.Errorf("Resolve(%s): %v", p, err)
		}
	}
	if _, err := ctrfs.New(host, nil, nil).Resolve("/lib/libc.so.6"); !errors.Is(err, ctrfs.ErrDangling) {
		t.Errorf("an empty image has /lib/libc.so.6: %v", err)
	}
	if got, ok := f.HostPathOf("/usr/lib/x86_64-linux-gnu/libx.so"); !ok || got != "/lib/libx.so" {
		t.Errorf("HostPathOf = %q %v", got, ok)
	}
	if _, ok := f.HostPathOf("/etc/x"); ok {
		t.Error("HostPathOf of an unmounted path")
	}
	if e, _ := f.Resolve("/usr/lib/x86_64-linux-gnu"); !e.Dir || !slices.Equal(e.Links, nil) {
		t.Errorf("mount parent: %+v", e)
	}
}

// TestHookLinks: a link a create-symlinks hook makes lies on top of the
// mounts, its target followed in the container, and its parents exist.
func TestHookLinks(t *testing.T) {
	t.Parallel()
	const store = "/nix/store/h-nvidia/lib"
	host := tree(t, map[string]string{store + "/libGLX_nvidia.so.550": "real", "/other/libGLX_nvidia.so.0": "other"}, nil)
	base := ctrfs.New(host, nil, mounts(store+"/libGLX_nvidia.so.550", store+"/libGLX_nvidia.so.550", "/other/libGLX_nvidia.so.0", "/usr/lib/x/libGLX_nvidia.so.0"))
	view := base.WithLinks([]ctrfs.Link{
		{Target: "libGLX_nvidia.so.550", Link: store + "/libGLX_nvidia.so.0"},
		{Target: "libGLX_nvidia.so.550", Link: "/usr/lib/x/libGLX_nvidia.so.0"}, // on a mount point
		{Target: "/nowhere/libfoo.so.1", Link: "/opt/new/libfoo.so"},
		{Target: "x", Link: "relative"}, // not a container path: ignored
	})
	tests := []struct {
		path, want, miss string
		links            int
	}{
		{path: store + "/libGLX_nvidia.so.0", want: store + "/libGLX_nvidia.so.550", links: 1},
		{path: "/usr/lib/x/libGLX_nvidia.so.0", miss: "/usr/lib/x/libGLX_nvidia.so.550", links: 1},
		{path: "/opt/new", want: "/opt/new"},
		{path: "/opt/new/libfoo.so", miss: "/nowhere/libfoo.so.1", links: 1},
	}
	for _, tt := range tests {
		e, err := view.Resolve(tt.path)
		if tt.want == "" {
			var de *ctrfs.DanglingError
			if !errors.As(err, &de) || de.Unresolved != tt.miss || len(de.Links) != tt.links {
				t.Errorf("Resolve(%s) = %+v, %v; want dangling at %s after %d links", tt.path, e, err, tt.miss, tt.links)
			}
			continue
		}
		if err != nil || e.Path != tt.want || len(e.Links) != tt.links {
			t.Errorf("Resolve(%s) = %+v, %v; want %s after %d links", tt.path, e, err, tt.want, tt.links)
		}
	}
	// The view without the links is unchanged: the store's .so.0 is not there.
	if _, err := base.Resolve(store + "/libGLX_nvidia.so.0"); !errors.Is(err, ctrfs.ErrDangling) {
		t.Errorf("base view resolves the hook's link: %v", err)
	}
}
