package cdi_test

import (
	"flag"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
)

// hugeSpecOut, when set, makes TestHugeSpecGenerator write the 10,000-device
// spec there (scripts/bench-cdi.sh uses it for the whole-process numbers):
// the big spec is generated, never checked in.
var hugeSpecOut = flag.String("hugespec-out", "", "write the 10,000-device spec (≈ 50 MB) to this file")

// hugeDevices is the size of the big spec: 10,000 devices, ≈ 5 KB each.
const hugeDevices = 10000

// hugeSpec returns the 8-GPU NixOS spec grown to n named devices, each with
// what nvidia-ctk writes for a device (its device nodes) and, to reach the
// ≈ 5 KB per device a 50 MB spec has, the driver's libraries mounted under
// a directory of its own, an env entry and a hook. Every host path exists in
// the nixos-h200 host tree, so the spec lints clean and the patch writes.
func hugeSpec(tb testing.TB, base *specs.Spec, n int) []byte {
	tb.Helper()
	s := *base
	s.Devices = nil
	// The driver's library files (the generator's mounts of one file each
	// in the nvidia-x11 store path), not its folders or /dev/null.
	var libs []*specs.Mount
	for _, m := range base.ContainerEdits.Mounts {
		if strings.Contains(m.HostPath, "-nvidia-x11-") && strings.Contains(path.Base(m.HostPath), ".so") {
			libs = append(libs, m)
		}
	}
	libs = libs[:min(len(libs), 8)]           // ≈ 5 KB a device with the generator's mount options
	hook := base.ContainerEdits.Hooks[0].Path // nvidia-cdi-hook, present on the host
	for i := range n {
		gpu := i % 8
		e := specs.ContainerEdits{
			Env: []string{fmt.Sprintf("NVIDIA_DEVICE_%d=%d", i, gpu)},
			DeviceNodes: []*specs.DeviceNode{
				{Path: fmt.Sprintf("/dev/nvidia%d", gpu)},
				{Path: fmt.Sprintf("/dev/dri/card%d", gpu+1)},
				{Path: fmt.Sprintf("/dev/dri/renderD%d", 128+gpu)},
			},
			Hooks: []*specs.Hook{{
				HookName: "createContainer",
				Path:     hook,
				Args:     []string{"nvidia-cdi-hook", "create-symlinks", "--link", fmt.Sprintf("../card%d::/dev/dri/by-path/pci-0000:%02x:00.0-card", gpu+1, gpu)},
			}},
		}
		for _, m := range libs {
			e.Mounts = append(e.Mounts, &specs.Mount{
				HostPath:      m.HostPath,
				ContainerPath: fmt.Sprintf("/usr/local/nvidia/device-%05d/lib/%s", i, path.Base(m.HostPath)),
				Options:       m.Options,
			})
		}
		s.Devices = append(s.Devices, specs.Device{Name: fmt.Sprintf("dev%05d", i), ContainerEdits: e})
	}
	s.Devices = append(s.Devices, base.Devices...)
	data, err := cdi.Encode(&s, cdi.FormatJSON)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestHugeSpecGenerator: the generator's spec is valid for the CDI
// library, ≈ 5 KB a device, and patches; with -hugespec-out it writes the
// full 10,000-device spec for the whole-process benchmark.
func TestHugeSpecGenerator(t *testing.T) {
	root := hostTree(t, "nixos-h200")
	_, base := loadSpec(t, root)
	n := 100
	if *hugeSpecOut != "" {
		n = hugeDevices
	}
	data := hugeSpec(t, base, n)
	if per := len(data) / n; per < 4000 || per > 6000 {
		t.Errorf("%d bytes a device, want ≈ 5 KB", per)
	}
	if *hugeSpecOut != "" {
		if err := os.WriteFile(*hugeSpecOut, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := cdi.ValidateBytes(data, cdi.FormatJSON); err != nil {
		t.Fatal(err)
	}
	local, _ := root.Path(specPath)
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
	if err != nil || !res.Written || res.Findings.Errors() > 0 {
		t.Fatalf("patch: %v written=%v findings=%v", err, res != nil && res.Written, res)
	}
}

// BenchmarkPatchFileHuge patches the 10,000-device, ≈ 50 MB spec in place
// (read, patch, validate with the CDI library, write). Peak RSS is the
// whole process's, measured by scripts/bench-cdi.sh; here B/op and allocs.
func BenchmarkPatchFileHuge(b *testing.B) {
	root := hostTree(b, "nixos-h200")
	_, base := loadSpec(b, root)
	data := hugeSpec(b, base, hugeDevices)
	local, _ := root.Path(specPath)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		if err := os.WriteFile(local, data, 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
		if err != nil || !res.Written {
			b.Fatalf("patch: %v", err)
		}
	}
}
