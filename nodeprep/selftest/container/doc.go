// Package container is the in-container self-test (`nodeprep selftest
// --container`): it proves that a container started with the patched CDI
// spec has a working Vulkan adapter, by running nodeprep's own adapter probe
// (selftest.ServeProbe) inside a real OCI container built the way
// containerd and CRI-O build one for a pod.
//
// For each container it:
//
//   - builds a minimal OCI runtime spec (github.com/opencontainers/runtime-spec
//     types): the probe as the process, PATH as the only inherited variable,
//     a read-only root, its own network namespace with no interface, /proc,
//     a tmpfs /dev and /tmp, a read-only /sys, no capabilities;
//   - injects the CDI devices under test with the CDI library, exactly as
//     runtimes do (cdi.NewCache over the spec's directory, then
//     Cache.InjectDevices), so a device the spec does not serve fails with
//     the library's own error;
//   - re-roots every host path the spec names under the host root
//     (hostfs.Root), so host trees under testdata/ work; on a node the root
//     is "/" and nothing changes;
//   - bind-mounts the probe binary (nodeprep-probe, or nodeprep) read-only
//     at BinaryPath and runs the Vulkan and the EGL probe in two containers
//     with the OCI runtime (runc, crun, or k3s's bundled runc), bounded by
//     the self-test's timeout;
//   - evaluates the two reports with selftest.Evaluate, so the verdict rules
//     are the host self-test's.
//
// The image (Options.Rootfs) is never written: the container's root is an
// overlay whose upper layer is a tmpfs, because the runtime creates mount
// points in the root before it makes it read-only (and a rootfs built by Nix
// lives on a read-only store). The bundle, the overlay and the container
// are removed when the probe ends, times out or crashes.
//
// Like every domain package, container never reads flags, the environment or
// os.Stdout; the command layer passes the binary, the rootfs and a logger.
package container
