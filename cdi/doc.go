// Package cdi reads, patches, checks and writes CDI specs (the Container
// Device Interface, tags.cncf.io/container-device-interface), and discovers
// the graphics files a driver root holds.
//
// The problem it solves: on NixOS `nvidia-ctk cdi generate` writes a spec
// that mounts the driver libraries but not the Vulkan ICD manifest, the EGL
// vendor manifest or the glvnd dispatch libraries, because NixOS keeps them
// under /run/opengl-driver. Discover finds them under a driver root, Plan
// turns them into mounts at the paths FHS loaders search, and Patch applies
// those mounts as small transforms over *specs.Spec. Check reports what a
// spec lacks without changing it.
//
// Every host path goes through a hostfs.Root. Paths written into a spec are
// host paths without the root prefix.
package cdi
