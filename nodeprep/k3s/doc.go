// Package k3s is nodeprep's view of the k3s agent configuration: node labels
// and taints (parsed and validated with the Kubernetes and kubelet rules),
// the k3s config-file merge rules (config.yaml, then config.yaml.d drop-ins,
// then command-line arguments), and the drop-in nodeprep writes so that the
// node registers with its taints.
//
// Sources of the rules this package encodes:
//
//   - k3s docs, "Configuration File" (https://docs.k3s.io/installation/configuration#configuration-file)
//     and k3s pkg/configfilearg/parser.go: which files are read, in which order, and how
//     plain keys, "key+" keys and CLI arguments combine.
//   - kubelet, cmd/kubelet/app/options/options.go (ValidateKubeletFlags) and
//     k8s.io/kubelet/pkg/apis/well_known_labels.go (IsKubeletLabel): the labels a
//     kubelet may set on its own Node object.
//   - k8s.io/apimachinery/pkg/util/validation: qualified names and label values.
//   - kubectl's taint syntax "key[=value]:Effect" (the kubelet's --register-with-taints).
//
// The package reads and writes the host only through a *hostfs.Root; it never
// reads flags, the environment or os.Stdout.
package k3s
