package cdi

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// GlibcLibraries are the libraries of glibc that must come from the same
// build as the dynamic loader that loads them: libc.so.6 and its companions,
// which call into the loader through GLIBC_PRIVATE symbols, and the loaders
// themselves (any ld-linux*.so.*). One of the host's in the container's
// linker cache is loaded by the image's loader in place of the image's own.
var GlibcLibraries = []string{"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}

// nixGlibcFolder matches the library folder of a Nix glibc package
// (/nix/store/<hash>-glibc-2.39-52/lib, …/lib64).
var nixGlibcFolder = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^/nix/store/[a-z0-9]{32}-glibc-[^/]*/lib(64)?$`)
})

// isGlibcLibrary reports whether a file name is one of GlibcLibraries or a
// dynamic loader.
func isGlibcLibrary(name string) bool {
	return slices.Contains(GlibcLibraries, name) || strings.HasPrefix(name, "ld-linux") && strings.Contains(name, ".so.")
}

// ldcacheGlibc reports every mount that puts a glibc into a folder the
// spec's update-ldcache hook adds to the container's linker cache (its
// --folder arguments): a directory mounted at (or above) the folder whose
// host side holds glibc's libraries or is a Nix glibc's lib folder, or one
// of GlibcLibraries mounted into the folder. The hook's ldconfig then lists
// the host's libc.so.6 before the image's, and every program of the image
// loads it with the image's dynamic loader and dies with "symbol lookup
// error: … undefined symbol: __tunable_is_initialized, version
// GLIBC_PRIVATE" (NVIDIA/k8s-device-plugin#1182, NixOS). Patch does not
// change the generator's hooks, so it is an error Patch reports and does
// not fix. Mounts of the top-level edits and of every device count (a
// container with any device gets them).
func (a *analyzer) ldcacheGlibc() {
	hooks := SpecHooks(a.spec, true)
	if len(hooks.Folders) == 0 {
		return
	}
	mounts := slices.Clone(a.spec.ContainerEdits.Mounts)
	for _, d := range a.spec.Devices {
		mounts = append(mounts, d.ContainerEdits.Mounts...)
	}
	seen := map[string]bool{}
	for _, folder := range hooks.Folders {
		for _, m := range mounts {
			cp := path.Clean(m.ContainerPath)
			desc := m.HostPath
			if path.Clean(m.HostPath) != cp {
				desc += " at " + cp
			}
			var what string
			switch {
			case cp == folder || strings.HasPrefix(folder, cp+"/"):
				host := path.Join(m.HostPath, strings.TrimPrefix(folder, cp))
				if libs := a.glibcIn(host); len(libs) > 0 {
					what = fmt.Sprintf("the spec mounts %s, which puts the host's %s there", desc, strings.Join(libs, ", "))
				}
			case path.Dir(cp) == folder && (isGlibcLibrary(path.Base(cp)) || isGlibcLibrary(path.Base(a.resolve(m.HostPath)))):
				what = fmt.Sprintf("the spec mounts the host's %s into it", desc)
			}
			if what == "" || seen[folder+"\x00"+what] {
				continue
			}
			seen[folder+"\x00"+what] = true
			a.findings = append(a.findings, errorf(CodeLdcacheGlibc,
				"the spec's %s hook adds %s to the container's linker cache and %s: programs in the image then load the host's libc.so.6 with the image's dynamic loader and fail with \"undefined symbol: __tunable_is_initialized, version GLIBC_PRIVATE\" (NVIDIA/k8s-device-plugin#1182); nodeprep cdi patch does not change the generator's hooks: %s",
				HookUpdateLdcache, folder, what, ldcacheGlibcFix(folder)))
		}
	}
}

// glibcIn returns glibc's libraries in the host directory dir (all of
// GlibcLibraries it holds; "glibc" for a Nix glibc lib folder that holds
// none of them), none when it is not a glibc folder.
func (a *analyzer) glibcIn(dir string) []string {
	names := a.cache.list(dir)
	var out []string
	for _, n := range GlibcLibraries {
		if names[n] {
			out = append(out, n)
		}
	}
	if len(out) == 0 && (nixGlibcFolder().MatchString(dir) || nixGlibcFolder().MatchString(a.resolve(dir))) {
		out = append(out, "glibc")
	}
	return out
}

// ldcacheGlibcFix says how to keep glibc out of the hook's folder: the
// generator's update-ldcache hook adds the folder of every library it
// mounted (nvidia-container-toolkit internal/discover/ldconfig.go,
// getLibraryPaths and uniqueFolders), so the spec must be generated without
// glibc's libraries among them; or without the hook (nvidia-ctk cdi
// generate --disable-hook update-ldcache; NixOS's generator unit passes
// each of hardware.nvidia-container-toolkit.disable-hooks, default
// [ "create-symlinks" ], as --disable-hook), which costs the driver's
// sonames in the cache (no-ldcache-hook).
func ldcacheGlibcFix(folder string) string {
	return fmt.Sprintf("regenerate the spec so that it mounts no library of %s (the hook adds the folder of every library the generator mounts) and mount glibc, if at all, outside the hook's folders; or generate it with --disable-hook update-ldcache (NixOS: add \"update-ldcache\" to hardware.nvidia-container-toolkit.disable-hooks), which also leaves the driver's libraries out of the container's linker cache", folder)
}
