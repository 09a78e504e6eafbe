// Package podpath holds the end-to-end test of the path a GPU pod takes on
// a node nodeprep prepared (podpath_test.go; the package has no code of
// its own). The test plays the kubelet on real components: the pinned
// NVIDIA container toolkits write the CDI specs into a NixOS host tree
// whose driver is Mesa (lavapipe and Mesa EGL), `nodeprep up` patches
// them, and the pinned containerd's CRI runs a host-network pod whose
// container asks for a GPU exactly as the NVIDIA device plugin hands it
// over — for each deviceListStrategy (envvar, cdi-annotations, cdi-cri),
// each runtime handler a k3s node can have (runc with containerd's own
// CDI, nvidia, nvidia-cdi) and each pinned toolkit. Inside, nodeprep's
// self-test probe must find the Vulkan ICD and the EGL vendor and run its
// compute dispatch. The resulting matrix is docs/pod-path.md
// (`go test ./nodeprep/podpath -run TestRealPodPath -update` rewrites it).
package podpath
