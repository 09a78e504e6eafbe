package cdi

import (
	"fmt"
	"path"
	"slices"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi/ctrfs"
)

// The NVIDIA CDI hooks whose effects on the container nodeprep counts, as
// nvidia-ctk cdi generate writes them (nvidia-container-toolkit
// internal/discover hooks.go, symlinks.go, ldconfig.go; v1.17 and v1.20).
// The hook program is nvidia-cdi-hook (argv: nvidia-cdi-hook NAME ARGS…)
// or, before nvidia-cdi-hook existed and with --nvidia-cdi-hook-path
// pointing at it, nvidia-ctk (argv: nvidia-ctk hook NAME ARGS…).
const (
	HookCreateSymlinks = "create-symlinks" // --link TARGET::LINK, repeatable
	HookUpdateLdcache  = "update-ldcache"  // --folder DIR, repeatable
)

// HookEdits are what a spec's NVIDIA hooks create in the container after
// the runtime has made its mounts.
type HookEdits struct {
	// Links are the create-symlinks hooks' links, in spec order.
	Links []ctrfs.Link `json:"links,omitempty" yaml:"links,omitempty"`
	// Folders are the update-ldcache hooks' folders (cleaned), added to the
	// container's linker cache; the hook's ldconfig makes the soname links
	// of the libraries in them.
	Folders []string `json:"folders,omitempty" yaml:"folders,omitempty"`
	// Ldcache is true when the spec has an update-ldcache hook at all.
	Ldcache bool `json:"ldcache,omitempty" yaml:"ldcache,omitempty"`
}

// ParseHook reads one hook: its NVIDIA hook name (HookCreateSymlinks,
// HookUpdateLdcache, any other nvidia-cdi-hook subcommand such as
// "enable-cuda-compat", or "" for a hook that is not one) and what it
// creates. Flags are read as urfave/cli reads them: "--link V", "--link=V",
// and the single-dash forms. A --link value that is not TARGET::LINK, or
// whose LINK is not absolute, is left out: the hook itself fails on it
// ("invalid symlink specification"), which nodeprep does not judge.
func ParseHook(h *specs.Hook) (name string, edits HookEdits) {
	if h == nil || len(h.Args) < 2 {
		return "", edits
	}
	args := h.Args[1:]
	switch path.Base(h.Args[0]) {
	case "nvidia-ctk":
		if args[0] != "hook" || len(args) < 2 {
			return "", edits
		}
		args = args[1:]
	case "nvidia-cdi-hook":
	default:
		// Another program (e.g. a wrapper script) named by path: the
		// subcommand is still the first argument when the path's base is
		// one of the two.
		switch path.Base(h.Path) {
		case "nvidia-cdi-hook":
		case "nvidia-ctk":
			if args[0] != "hook" || len(args) < 2 {
				return "", edits
			}
			args = args[1:]
		default:
			return "", edits
		}
	}
	name, args = args[0], args[1:]
	switch name {
	case HookCreateSymlinks:
		for _, v := range flagValues(args, "link") {
			target, link, ok := strings.Cut(v, "::")
			if !ok || strings.Contains(link, "::") || !path.IsAbs(link) {
				continue
			}
			edits.Links = append(edits.Links, ctrfs.Link{Target: target, Link: path.Clean(link)})
		}
	case HookUpdateLdcache:
		edits.Ldcache = true
		for _, v := range flagValues(args, "folder") {
			if v != "" {
				edits.Folders = append(edits.Folders, path.Clean(v))
			}
		}
	}
	return name, edits
}

// flagValues returns every value of the string flag name in args:
// "--name V", "-name V", "--name=V", "-name=V". It stops at "--".
func flagValues(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		flag := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if flag == a {
			continue
		}
		if flag == name && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
			continue
		}
		if v, ok := strings.CutPrefix(flag, name+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// SpecHooks returns what the hooks of the spec's top-level edits and of
// every device (all: any device's hooks count, as every container with any
// device might run them; otherwise only hooks every device carries count,
// as for the mounts every container gets) create in the container.
func SpecHooks(spec *specs.Spec, all bool) HookEdits {
	var hooks []*specs.Hook
	hooks = append(hooks, spec.ContainerEdits.Hooks...)
	for i, d := range spec.Devices {
		for _, h := range d.ContainerEdits.Hooks {
			if all || everyDeviceHas(spec.Devices, i, h) {
				hooks = append(hooks, h)
			}
		}
	}
	var out HookEdits
	for _, h := range hooks {
		_, e := ParseHook(h)
		out.Ldcache = out.Ldcache || e.Ldcache
		for _, l := range e.Links {
			if !slices.Contains(out.Links, l) {
				out.Links = append(out.Links, l)
			}
		}
		for _, f := range e.Folders {
			if !slices.Contains(out.Folders, f) {
				out.Folders = append(out.Folders, f)
			}
		}
	}
	return out
}

func everyDeviceHas(devs []specs.Device, self int, h *specs.Hook) bool {
	if self != 0 {
		// Counted once, from the first device.
		return false
	}
	for _, d := range devs[1:] {
		if !slices.ContainsFunc(d.ContainerEdits.Hooks, func(o *specs.Hook) bool {
			return o.HookName == h.HookName && o.Path == h.Path && slices.Equal(o.Args, h.Args)
		}) {
			return false
		}
	}
	return true
}

// LinkAt returns the hook link whose container path is p, if any.
func (e HookEdits) LinkAt(p string) (ctrfs.Link, bool) {
	p = path.Clean(p)
	for _, l := range e.Links {
		if l.Link == p {
			return l, true
		}
	}
	return ctrfs.Link{}, false
}

// hookCreates says why a mount at containerPath would be in the way of one
// of the spec's hooks ("" when it would not): a create-symlinks link there
// (the hook removes what it finds and cannot remove a mount point: "failed
// to create symlink: device or resource busy"), or an update-ldcache
// folder (a file there hides the folder the hook's ldconfig scans).
func (a *analyzer) hookCreates(containerPath string) string {
	e := SpecHooks(a.spec, true)
	if l, ok := e.LinkAt(containerPath); ok {
		return fmt.Sprintf("the spec's %s hook creates a link there (→ %s), and a mount in its place makes the hook fail with \"device or resource busy\", so the container does not start", HookCreateSymlinks, l.Target)
	}
	if slices.Contains(e.Folders, path.Clean(containerPath)) {
		return fmt.Sprintf("it is a folder the spec's %s hook adds to the linker cache", HookUpdateLdcache)
	}
	return ""
}

// folderMount reports whether m mounts a host directory at a folder the
// spec's update-ldcache hook adds: the folder is then in the container as
// the hook expects, and its ldconfig scans it (what it finds there is
// ldcacheGlibc's concern). Only a file mounted there hides the folder.
func (a *analyzer) folderMount(m *specs.Mount) bool {
	if !slices.Contains(SpecHooks(a.spec, true).Folders, path.Clean(m.ContainerPath)) {
		return false
	}
	st, err := a.host.Stat(m.HostPath)
	return err == nil && st.IsDir()
}

// hookConflicts finds the mounts the spec already has where a hook of it
// creates a link or folder (hookCreates). With apply, a mount nodeprep made
// there is removed, so that the hook's link takes its place (the analysis
// that follows mounts what the link then lacks); any other is reported.
func (a *analyzer) hookConflicts(apply bool) {
	check := func(ms []*specs.Mount, top bool) []*specs.Mount {
		return slices.DeleteFunc(ms, func(m *specs.Mount) bool {
			why := a.hookCreates(m.ContainerPath)
			if why == "" || a.folderMount(m) {
				return false
			}
			if apply && top && a.nodeprepMount(m) {
				a.changes = append(a.changes, Change{Action: "remove", Role: "library", HostPath: m.HostPath, ContainerPath: path.Clean(m.ContainerPath), To: "a hook of the spec creates it"})
				return true
			}
			fix := "regenerate the spec"
			if top && a.nodeprepMount(m) {
				fix = "nodeprep cdi patch removes it"
			}
			a.findings = append(a.findings, errorf(CodeHookConflict, "%s is mounted at %s, but %s: %s", m.HostPath, path.Clean(m.ContainerPath), why, fix))
			return false
		})
	}
	a.spec.ContainerEdits.Mounts = check(a.spec.ContainerEdits.Mounts, true)
	for i := range a.spec.Devices {
		a.spec.Devices[i].ContainerEdits.Mounts = check(a.spec.Devices[i].ContainerEdits.Mounts, false)
	}
}
