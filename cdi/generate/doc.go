// Package generate predicts the CDI spec NVIDIA's `nvidia-ctk cdi generate`
// writes on a NixOS host, without running it: from the host tree (the
// driver package's libraries and their links), the GPUs and device nodes the
// host would have (Host, usually a simulated server: Simulated), the toolkit
// version and the arguments NixOS's generator unit passes. The fleet check
// uses it in a build sandbox, where the real generator cannot run: it needs
// root, the device nodes, an NVML and a chroot (scripts/nvidia-cdi-generate.sh).
//
// The model follows the generator's NVML mode as NVIDIA's
// nvidia-container-toolkit writes it in v1.17.8 and v1.20.2 (pkg/nvcdi:
// common-nvml.go, driver-nvml.go, full-gpu-nvml.go, wrapper.go;
// internal/discover: graphics.go, symlinks.go, ldconfig.go, hooks.go,
// char_devices.go; pkg/nvcdi/workarounds-device-folder-permissions.go;
// cmd/nvidia-ctk/cdi/generate/generate.go for the flags), for the shape of
// a NixOS host: the driver libraries found through
// --library-search-path (given it, the generator searches only those
// directories: pkg/lookup/library.go), the graphics manifests outside the
// generator's /etc and /usr/share search paths. What it leaves out it refuses
// (ErrNotModelled) rather than guess; docs/generator.md lists both, and
// TestAgainstRealGenerator compares it with the real nvidia-ctk on every
// NixOS host tree under testdata/hosts.
//
// The code is this project's own: the toolkit's packages are internal and
// need NVML, /dev and /sys, so they cannot be imported for this.
package generate
