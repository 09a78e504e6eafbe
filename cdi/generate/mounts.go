package generate

import (
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// Mount is one of NixOS's hardware.nvidia-container-toolkit.mounts: a host
// path and where the container sees it.
type Mount struct {
	HostPath      string
	ContainerPath string
}

// AddModuleMounts appends to s's common edits what NixOS's generator unit
// adds after nvidia-ctk has written the spec
// (nixos/modules/services/hardware/nvidia-container-toolkit in nixpkgs:
// a jq step per entry of its mounts option): each mount whose host path
// exists under root, in order, with options ro, nosuid, nodev, bind.
func AddModuleMounts(s *specs.Spec, root *hostfs.Root, mounts []Mount) {
	for _, m := range mounts {
		if !root.Exists(m.HostPath) {
			continue
		}
		s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{
			HostPath: m.HostPath, ContainerPath: m.ContainerPath,
			Options: []string{"ro", "nosuid", "nodev", "bind"},
		})
	}
}
