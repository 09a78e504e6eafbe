package cdi

import (
	"regexp"
	"strconv"
	"sync"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// HookApplicationProfile is the nvidia-cdi-hook subcommand that writes
// the container's EGL/Vulkan GPU visibility into
// /etc/nvidia/nvidia-application-profiles-rc.d (nvidia-container-toolkit
// v1.20.0 and later, cmd/nvidia-cdi-hook/update-application-profile).
const HookApplicationProfile = "update-application-profile"

// CodeProfileHookReadOnly is the finding that the spec carries toolkit
// 1.20.0's update-application-profile hook, which fails every container
// that mounts a read-only /etc/nvidia.
const CodeProfileHookReadOnly = "application-profile-hook-read-only"

// hookToolkit finds the toolkit's version in a hook program's NixOS store
// path (/nix/store/<hash>-nvidia-container-toolkit-1.20.0-tools/bin/…).
var hookToolkit = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`container-toolkit-(\d+)\.(\d+)\.(\d+)(?:[^0-9.]|$)`)
})

// ProfileHookFindings reports each update-application-profile hook of the
// spec (top level and devices) whose program is toolkit 1.20.0's, as its
// store path says: that hook makes etc/nvidia/nvidia-application-profiles-rc.d
// in the container root and exits non-zero when it cannot, so a container
// with a read-only /etc/nvidia (a ConfigMap mounted there, as device
// plugin deployments that pass --config-file=/etc/nvidia/… do) never
// starts ("mkdirat etc/nvidia/nvidia-application-profiles-rc.d: read-only
// file system"; NVIDIA/nvidia-container-toolkit#2026, awslabs/amazon-eks-ami#2790).
// v1.20.1 ignores EROFS and v1.20.2 EBUSY too (the hook's source at each
// tag). A warning: only pods with such a mount fail. A hook whose version
// is not in its path is not judged.
func ProfileHookFindings(spec *specs.Spec) Findings {
	var fs Findings
	seen := map[string]bool{}
	check := func(hooks []*specs.Hook) {
		for _, h := range hooks {
			if h == nil {
				continue
			}
			if name, _ := ParseHook(h); name != HookApplicationProfile || seen[h.Path] {
				continue
			}
			seen[h.Path] = true
			m := hookToolkit().FindStringSubmatch(h.Path)
			if m == nil {
				continue
			}
			major, _ := strconv.Atoi(m[1])
			minor, _ := strconv.Atoi(m[2])
			patch, _ := strconv.Atoi(m[3])
			if major != 1 || minor != 20 || patch != 0 {
				continue
			}
			fs = append(fs, warnf(CodeProfileHookReadOnly, "the spec's %s hook is toolkit %d.%d.%d's (%s), which fails every container that mounts a read-only /etc/nvidia, such as a device plugin given --config-file=/etc/nvidia/... from a ConfigMap (mkdirat etc/nvidia/nvidia-application-profiles-rc.d: read-only file system; NVIDIA/nvidia-container-toolkit#2026): the plugin does not start and no node advertises nvidia.com/gpu; fix: nvidia-container-toolkit 1.20.1 or later (1.20.2 ignores the read-only /etc/nvidia), or mount that config elsewhere (the device plugin chart whose values nodeprep cluster render writes mounts it at /config)",
				HookApplicationProfile, major, minor, patch, h.Path))
		}
	}
	check(spec.ContainerEdits.Hooks)
	for _, d := range spec.Devices {
		check(d.ContainerEdits.Hooks)
	}
	return fs
}
