package generate_test

import (
	"fmt"

	"github.com/nodeprep/nodeprep/cdi/generate"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// The spec the newer NixOS generator unit gets from nvidia-ctk 1.20 on a
// host tree with two GPUs of a simulated DGX H200.
func ExampleSpec() {
	root, err := hostfs.New("../../testdata/hosts/nixos-h200")
	if err != nil {
		panic(err)
	}
	host, err := generate.Simulated("dgx-h200", 2)
	if err != nil {
		panic(err)
	}
	const store = "/nix/store/"
	spec, err := generate.Spec(root, host, "1.20.2", []string{
		"--format", "json", "--discovery-mode", "auto", "--device-name-strategy", "index",
		"--ldconfig-path", store + "3c4d5f6g7h8j9k0l1m2n3p4q5r6s7a8b-glibc-2.39-52-bin/bin/ldconfig",
		"--library-search-path", store + "4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30/lib",
		"--nvidia-cdi-hook-path", store + "6f7g8h9j0k1l2m3n4p5q6r7s8a9b0c1d-nvidia-container-toolkit-1.20.2-tools/bin/nvidia-cdi-hook",
		"--disable-hook", "create-symlinks",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(spec.Version, spec.Kind)
	for _, d := range spec.Devices {
		fmt.Println(d.Name, len(d.ContainerEdits.DeviceNodes), "device nodes")
	}
	fmt.Println(len(spec.ContainerEdits.Mounts), "mounts,", len(spec.ContainerEdits.Hooks), "hooks")
	// Output:
	// 0.5.0 nvidia.com/gpu
	// 0 3 device nodes
	// 1 3 device nodes
	// all 6 device nodes
	// 17 mounts, 4 hooks
}
