// Package ctrfs is the container's file view: what a path names inside a
// container started with a CDI spec's mounts, as the loaders in it will
// open it. The view is the image's root plus the bind mounts, applied in
// the order the CDI library gives the runtime (mounts sorted by the depth
// of their container path, stable: pkg/cdi container-edits.go orderedMounts)
// so that a deeper or later mount lies on top; symlinks are followed inside
// the container, never on the host.
//
// That difference is the point: /run/opengl-driver mounted as a directory
// covers /run/opengl-driver/lib/libGLX_nvidia.so.0, but on NixOS that entry
// is a link to /nix/store/…/libGLX_nvidia.so.0, which exists in the
// container only if a mount puts it there. The host says "exists"; the
// container says "dangling". cdi's checks ask this view.
package ctrfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// maxLinks is the kernel's limit on links followed in one lookup
// (MAXSYMLINKS, 40): more is ELOOP.
const maxLinks = 40

// Mount is one bind mount of the view: a host path at a container path.
type Mount struct {
	HostPath      string // host path of the source; the runtime follows its links on the host
	ContainerPath string // where it appears in the container
}

// FS is a container's file view. The zero value is not usable; call New.
type FS struct {
	host   *hostfs.Root
	image  *hostfs.Root // nil: an empty image
	mounts []Mount      // in the order the runtime applies them
	// sources are the mounts' host sources resolved on this machine,
	// by index into mounts ("" when the source does not exist); resolved
	// are the same as host paths.
	sources, resolved []string
	// links are the symlinks the spec's hooks create, container path →
	// target (see WithLinks).
	links map[string]string
}

// Link is a symlink a hook creates in the container after the mounts are
// in place (nvidia-cdi-hook create-symlinks --link Target::Link): Link is
// the container path of the link, Target what it points to, relative to
// Link's directory or absolute.
type Link struct {
	Target string
	Link   string
}

// WithLinks returns the view with the links a spec's hooks create laid on
// top: a path that is a link's container path names that link, whatever
// an image or a mount holds there (the hook replaces what it finds, and
// fails where it cannot: on a mount point). f itself is not changed.
func (f *FS) WithLinks(links []Link) *FS {
	g := *f
	g.links = make(map[string]string, len(f.links)+len(links))
	for k, v := range f.links {
		g.links[k] = v
	}
	for _, l := range links {
		if path.IsAbs(l.Link) {
			g.links[path.Clean(l.Link)] = l.Target
		}
	}
	return &g
}

// New returns the view of a container whose image root is image (nil for
// an image with nothing in it, so that only the mounts count) and whose
// bind mounts are mounts, in spec order; New orders them as the CDI library
// does.
func New(host *hostfs.Root, image *hostfs.Root, mounts []*specs.Mount) *FS {
	f := &FS{host: host, image: image}
	for _, m := range mounts {
		f.mounts = append(f.mounts, Mount{HostPath: m.HostPath, ContainerPath: path.Clean(m.ContainerPath)})
	}
	slices.SortStableFunc(f.mounts, func(a, b Mount) int { return depth(a.ContainerPath) - depth(b.ContainerPath) })
	for _, m := range f.mounts {
		src, res := "", ""
		if p, err := host.Path(m.HostPath); err == nil {
			if _, err := os.Stat(p); err == nil {
				src = p
				res = hostPathOf(host, p)
			}
		}
		f.sources = append(f.sources, src)
		f.resolved = append(f.resolved, res)
	}
	return f
}

// hostPathOf turns a path on this machine under host's root back into a
// host path (hostfs.Root.Resolve's inverse step, without resolving again).
func hostPathOf(host *hostfs.Root, p string) string {
	if host.Dir() == "/" {
		return p
	}
	if rel := strings.TrimPrefix(p, host.Dir()); rel != "" {
		return rel
	}
	return "/"
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// Entry is what a container path finally names.
type Entry struct {
	// Path is the container path after every link was followed.
	Path string `json:"path" yaml:"path"`
	// HostPath is the host path the file comes from ("" when it comes
	// from the image).
	HostPath string `json:"hostPath,omitempty" yaml:"hostPath,omitempty"`
	// Mount is the container path of the mount that provides it ("" for
	// the image).
	Mount string   `json:"mount,omitempty" yaml:"mount,omitempty"`
	Links []string `json:"links,omitempty" yaml:"links,omitempty"` // the links followed, "path → target"
	Dir   bool     `json:"dir,omitempty" yaml:"dir,omitempty"`     // it is a directory
}

// ErrDangling is wrapped by every DanglingError.
var ErrDangling = errors.New("does not exist in the container")

// DanglingError says where a lookup in the container found nothing.
type DanglingError struct {
	Path string // the container path looked up
	// Missing is the first container path with nothing at it.
	Missing string
	// Unresolved is the whole path being looked up when that happened:
	// Missing and the components still to walk, after the links followed.
	Unresolved string
	Links      []string // the links followed before, "path → target"
	Loop       bool     // too many links (ELOOP)
}

// Error says which path dangles, through which links, or that they loop.
func (e *DanglingError) Error() string {
	switch {
	case e.Loop:
		return fmt.Sprintf("%s: too many links in the container (%s)", e.Path, strings.Join(e.Links, ", "))
	case len(e.Links) > 0:
		return fmt.Sprintf("%s is a link (%s) to %s, which %s", e.Path, strings.Join(e.Links, ", "), e.Unresolved, ErrDangling)
	}
	return fmt.Sprintf("%s %s", e.Path, ErrDangling)
}

// Unwrap returns ErrDangling, so errors.Is finds it.
func (e *DanglingError) Unwrap() error { return ErrDangling }

// kind is what a container path holds before links are followed.
type kind int

const (
	kindNone kind = iota
	kindFile
	kindDir
	kindLink
)

// source is where a container path's bytes are on this machine.
type source struct {
	link     string // the target of a hook's link at this path ("" for none)
	machine  string // path on this machine ("" for a mount point's parent)
	hostPath string // host path, "" from the image
	mount    string // container path of the mount, "" from the image
}

// lstat returns what the container path p (links in its parents already
// followed) holds, without following a link at p itself.
func (f *FS) lstat(p string) (kind, source) {
	if t, ok := f.links[p]; ok {
		return kindLink, source{link: t}
	}
	for i := len(f.mounts) - 1; i >= 0; i-- {
		m := f.mounts[i]
		if p != m.ContainerPath && !strings.HasPrefix(p, strings.TrimSuffix(m.ContainerPath, "/")+"/") {
			continue
		}
		if f.sources[i] == "" {
			return kindNone, source{}
		}
		rel := strings.TrimPrefix(p, m.ContainerPath)
		src := source{machine: f.sources[i] + rel, hostPath: f.resolved[i] + rel, mount: m.ContainerPath}
		return statKind(src.machine), src
	}
	if f.image != nil {
		if ip := path.Join(f.image.Dir(), p); ip != "" {
			if k := statKind(ip); k != kindNone {
				return k, source{machine: ip}
			}
		}
	}
	// The runtime creates a mount point's parents, the hook a link's.
	for _, m := range f.mounts {
		if strings.HasPrefix(m.ContainerPath, strings.TrimSuffix(p, "/")+"/") {
			return kindDir, source{}
		}
	}
	for l := range f.links {
		if strings.HasPrefix(l, strings.TrimSuffix(p, "/")+"/") {
			return kindDir, source{}
		}
	}
	return kindNone, source{}
}

func statKind(machine string) kind {
	st, err := os.Lstat(machine)
	switch {
	case err != nil:
		return kindNone
	case st.Mode()&fs.ModeSymlink != 0:
		return kindLink
	case st.IsDir():
		return kindDir
	}
	return kindFile
}

// Resolve follows the container path p (absolute) through the view, links
// included, and returns what it names. A path with nothing at the end, or
// a link that leads nowhere, gives a *DanglingError (errors.Is
// ErrDangling).
func (f *FS) Resolve(p string) (Entry, error) {
	todo := split(p)
	cur := "/"
	var links []string
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		k, src := f.lstat(next)
		switch k {
		case kindNone:
			return Entry{}, &DanglingError{Path: p, Missing: next, Unresolved: path.Join(append([]string{next}, todo...)...), Links: links}
		case kindLink:
			if len(links) == maxLinks {
				return Entry{}, &DanglingError{Path: p, Missing: next, Unresolved: next, Links: links, Loop: true}
			}
			target, err := src.link, error(nil)
			if target == "" {
				target, err = os.Readlink(src.machine)
			}
			if err != nil {
				return Entry{}, &DanglingError{Path: p, Missing: next, Unresolved: next, Links: links}
			}
			links = append(links, next+" → "+target)
			if path.IsAbs(target) {
				cur = "/"
			}
			todo = append(split(target), todo...)
			continue
		case kindFile:
			if len(todo) > 0 {
				return Entry{}, &DanglingError{Path: p, Missing: path.Join(next, todo[0]), Unresolved: path.Join(append([]string{next}, todo...)...), Links: links}
			}
			return Entry{Path: next, HostPath: src.hostPath, Mount: src.mount, Links: links}, nil
		}
		cur = next
		if len(todo) == 0 {
			return Entry{Path: next, HostPath: src.hostPath, Mount: src.mount, Links: links, Dir: true}, nil
		}
	}
	return Entry{Path: "/", Dir: true}, nil
}

// HostPathOf returns the host path the mount covering the container path p
// maps it to, without following any link ("", false when no mount covers
// p): the file a runtime would find there on the host's side.
func (f *FS) HostPathOf(p string) (string, bool) {
	p = path.Clean(p)
	for i := len(f.mounts) - 1; i >= 0; i-- {
		m := f.mounts[i]
		if p == m.ContainerPath {
			return m.HostPath, true
		}
		if strings.HasPrefix(p, strings.TrimSuffix(m.ContainerPath, "/")+"/") {
			return path.Join(m.HostPath, strings.TrimPrefix(p, m.ContainerPath)), true
		}
	}
	return "", false
}

func split(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
