package cdi_test

import (
	"fmt"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// BenchmarkPatchNixOSH200 is the in-process patch of the 8-GPU NixOS spec
// (16 named devices + all): parse, discover, patch, encode. Target < 5 ms.
func BenchmarkPatchNixOSH200(b *testing.B) {
	root := hostTree(b, "nixos-h200")
	data, _ := loadSpec(b, root)
	benchPatch(b, root, data)
}

// BenchmarkPatchMIG64 patches a spec with 64 MIG devices (8 GPUs × 7
// instances, plus the GPUs and all), each with its own device nodes.
func BenchmarkPatchMIG64(b *testing.B) {
	root := hostTree(b, "nixos-h200")
	_, base := loadSpec(b, root)
	for gpu := 0; gpu < 8; gpu++ {
		for mig := 0; mig < 7; mig++ {
			base.Devices = append(base.Devices, specs.Device{
				Name: fmt.Sprintf("%d:%d", gpu, mig),
				ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{
					{Path: fmt.Sprintf("/dev/nvidia%d", gpu)},
					{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", 10+gpu*9+mig)},
				}},
			})
		}
	}
	data, err := cdi.Encode(base, cdi.FormatJSON)
	if err != nil {
		b.Fatal(err)
	}
	benchPatch(b, root, data)
}

// benchPatch times the in-process patch of the spec data on root with the
// NixOS amd64 options: parse, discover, patch (which must change the
// spec), encode.
func benchPatch(b *testing.B, root *hostfs.Root, data []byte) {
	opts := nixosOptions("amd64").Discover
	b.ReportAllocs()
	for b.Loop() {
		spec, err := cdi.ParseSpec(data)
		if err != nil {
			b.Fatal(err)
		}
		g, err := cdi.Discover(root, opts)
		if err != nil {
			b.Fatal(err)
		}
		if changes, _ := cdi.Patch(spec, g, root); len(changes) == 0 {
			b.Fatal("no change")
		}
		if _, err := cdi.Encode(spec, cdi.FormatJSON); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPatchFile is the whole in-process operation on the 8-GPU spec
// as a dry run: read, patch, validate with the CDI library, diff.
func BenchmarkPatchFile(b *testing.B) {
	root := hostTree(b, "nixos-h200")
	opts := nixosOptions("amd64")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cdi.PatchFile(root, opts, true); err != nil {
			b.Fatal(err)
		}
	}
}
