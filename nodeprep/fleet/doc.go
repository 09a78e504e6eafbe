// Package fleet judges a node configuration before it is deployed, with
// no GPU and no network (a flake check in CI): it reads the facts the
// NixOS side gathers from one evaluated node configuration (ParseFacts,
// schema Schema), assembles a throw-away host tree from them as the
// configuration would write it (Assemble), and runs on that tree the
// offline judgement nodeprep makes on a node (Check): its config file,
// up's plan (inventory, CDI patch, join and the containerd k3s runs) with
// a simulated inventory, `cdi check`, the kubelet config file k3s passes,
// and `cluster check` of the fleet's manifests against the node's taints
// and labels. What needs a GPU (the Vulkan and EGL self-test, CUDA) is
// said to be not judged.
package fleet
