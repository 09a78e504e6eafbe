// Package podpath judges the path a GPU pod takes on this node: for each
// runtime handler of the containerd k3s runs (runc with containerd's own
// CDI, the NVIDIA runtime's nvidia and nvidia-cdi), does a pod that asks
// for a GPU as the device plugin's envvar strategy does get the edits of
// the patched CDI spec, judged from containerd's config (nodeprep/
// containerd) and the NVIDIA runtime's own (nodeprep/nvruntime)? Judge and
// ContainerdFindings assemble those readers' verdicts into cdi.Findings
// that cdi check, up, health and the re-patch all report alike
// (docs/runtime-view.md).
//
// Its end-to-end test (podpath_test.go, TestRealPodPath) runs that path for
// real: the pinned NVIDIA container toolkits write the CDI specs into a
// NixOS host tree whose driver is Mesa (lavapipe and Mesa EGL), `nodeprep
// up` patches them, and the pinned containerd's CRI runs a host-network pod
// whose container asks for a GPU exactly as the NVIDIA device plugin hands
// it over — for each deviceListStrategy (envvar, cdi-annotations,
// cdi-cri), each runtime handler and each pinned toolkit. Inside,
// nodeprep's self-test probe must find the Vulkan ICD and the EGL vendor
// and run its compute dispatch. The resulting matrix is docs/pod-path.md
// (`go test ./nodeprep/podpath -run TestRealPodPath -update` rewrites it).
package podpath
