package k3s

// RuntimeClass is one RuntimeClass (node.k8s.io/v1) k3s deploys: its name
// and the containerd runtime handler it names.
type RuntimeClass struct {
	Name, Handler string
}

// RuntimeClasses are the RuntimeClasses every k3s server deploys from its
// packaged manifest manifests/runtimes.yaml (k3s-io/k3s, read at commit
// c77d0b8509ac; unless the server runs with --disable runtimes): the
// NVIDIA runtime's nvidia and nvidia-experimental, crun, and the wasm
// shims. None of them names the handler nvidia-cdi, which k3s registers
// in containerd's config when it finds nvidia-container-runtime.cdi
// (pkg/agent/containerd/nvidia.go): a pod of that class needs a
// RuntimeClass someone else creates. None carries scheduling or overhead.
// In the manifest's order.
var RuntimeClasses = []RuntimeClass{
	{"nvidia", "nvidia"},
	{"nvidia-experimental", "nvidia-experimental"},
	{"crun", "crun"},
	{"lunatic", "lunatic"},
	{"slight", "slight"},
	{"spin", "spin"},
	{"wws", "wws"},
	{"wasmedge", "wasmedge"},
	{"wasmer", "wasmer"},
	{"wasmtime", "wasmtime"},
}

// RuntimeHandlers are the containerd runtime handlers k3s can write into
// the config it renders for a GPU node, by name: runc (its default
// runtime), the NVIDIA runtime's nvidia, nvidia-experimental and
// nvidia-cdi (registered when k3s finds nvidia-container-runtime,
// nvidia-container-runtime-experimental and nvidia-container-runtime.cdi,
// pkg/agent/containerd/nvidia.go), and crun and the wasm shims when their
// binaries are found (pkg/agent/containerd/runtimes.go). A RuntimeClass
// whose handler is none of these has no runtime on a k3s node: its pods
// fail at sandbox creation. Sorted.
var RuntimeHandlers = []string{
	"crun", "lunatic", "nvidia", "nvidia-cdi", "nvidia-experimental", "runc",
	"slight", "spin", "wasmedge", "wasmer", "wasmtime", "wws",
}
