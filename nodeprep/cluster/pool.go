package cluster

import (
	"errors"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// GPUResource is the extended resource the NVIDIA device plugin advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// Well-known node labels the kubelet and Karpenter set (k8s.io/api
// core/v1 well_known_labels.go; Karpenter pkg/apis/v1 labels.go).
const (
	labelOS           = "kubernetes.io/os"
	labelArch         = "kubernetes.io/arch"
	labelHostname     = "kubernetes.io/hostname"
	labelNodePool     = "karpenter.sh/nodepool"
	labelCapacityType = "karpenter.sh/capacity-type"
)

// ErrNoPoolLabel is the error Render returns, and a caller of Check should
// return, for a Pool with no Label: without the label that selects the
// pool's nodes there is nothing to render and nothing to judge workloads
// against. Callers mark it fault.ErrUsage.
var ErrNoPoolLabel = errors.New("no pool label: set cluster.poolLabel (or --pool-label) to a label the nodes register with, e.g. add nodeprep.dev/pool=gpu to join.labels")

// Pool is the on-prem GPU pool as nodeprep's config makes it register: the
// same labels and taints `nodeprep join` writes, and the CDI settings the
// device plugin must agree with.
type Pool struct {
	// Label is the label that selects the pool's nodes ("payload=task_runner");
	// the zero Label means none is configured.
	Label k3s.Label
	// Labels are the labels the nodes register with (Label among them).
	Labels []k3s.Label
	// Taints are the taints the nodes register with.
	Taints []k3s.Taint
	// Arch is the nodes' kubernetes.io/arch ("amd64", "arm64").
	Arch string
	// DeviceNames are the CDI device-name strategies the nodes' spec serves
	// ("uuid", "index").
	DeviceNames []string
	// DriverRoot is the host directory of the driver (NixOS: /run/opengl-driver).
	DriverRoot string
	// ProfileHook, when not empty, says why a GPU container that mounts a
	// read-only /etc/nvidia does not start on the nodes: their CDI spec
	// carries toolkit 1.20.0's update-application-profile hook (the
	// cdi.CodeProfileHookReadOnly finding of the node's spec). Empty when
	// it does not, or when the nodes' spec is not known.
	ProfileHook string
}

// node is the model of one pool node: what the scheduler sees of it.
func (p Pool) node() *corev1.Node {
	labels := map[string]string{labelOS: "linux", labelHostname: "onprem-gpu-node"}
	if p.Arch != "" {
		labels[labelArch] = p.Arch
	}
	for _, l := range p.Labels {
		labels[l.Key] = l.Value
	}
	if p.Label.Key != "" {
		labels[p.Label.Key] = p.Label.Value
	}
	// A healthy pool node: it registered with the self-test passed, and
	// nodeprep health keeps the ready label true on it.
	labels[LabelSelftest] = "passed"
	labels[LabelGPUReady] = "true"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "onprem-gpu-node", Labels: labels}}
	for _, t := range p.Taints {
		n.Spec.Taints = append(n.Spec.Taints, KubeTaint(t))
	}
	return n
}

// KubeTaint converts a k3s taint to its core/v1 form.
func KubeTaint(t k3s.Taint) corev1.Taint {
	return corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
}

// Toleration returns the toleration that tolerates exactly t: operator
// Equal with t's value, or Exists when t has no value.
func Toleration(t k3s.Taint) corev1.Toleration {
	if t.Value == "" {
		return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(t.Effect)}
	}
	return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
}

// fallbackNode models a node Karpenter would launch for np, its labels
// chosen to suit want (a workload's nodeSelector) where the pool's
// requirements allow: the template's labels, karpenter.sh/nodepool, and
// for each requirement a value it admits (In: the wanted value when listed,
// else the first; Exists: the wanted value, else "true"). Taints are the
// template's taints; startup taints are not considered for scheduling
// (Karpenter docs, NodePools: spec.template.spec.startupTaints).
func fallbackNode(np *NodePool, want map[string]string) *corev1.Node {
	labels := map[string]string{labelOS: "linux", labelArch: "amd64", labelHostname: "fallback-" + np.Name, labelNodePool: np.Name}
	for _, r := range np.Spec.Template.Spec.Requirements {
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			if len(r.Values) == 0 {
				continue
			}
			if w, ok := want[r.Key]; ok && slices.Contains(r.Values, w) {
				labels[r.Key] = w
			} else {
				labels[r.Key] = r.Values[0]
			}
		case corev1.NodeSelectorOpExists:
			if w, ok := want[r.Key]; ok {
				labels[r.Key] = w
			} else {
				labels[r.Key] = "true"
			}
		case corev1.NodeSelectorOpDoesNotExist:
			delete(labels, r.Key)
		}
	}
	for k, v := range np.Spec.Template.Metadata.Labels {
		labels[k] = v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fallback-" + np.Name, Labels: labels}}
	n.Spec.Taints = slices.Clone(np.Spec.Template.Spec.Taints)
	return n
}

// isGPUNodePool reports whether np launches GPU nodes: it limits
// nvidia.com/gpu, carries one of the pool's taint keys or its label, or
// requires a GPU instance attribute (a requirement key naming "gpu").
func (p Pool) isGPUNodePool(np *NodePool) bool {
	if _, ok := np.Spec.Limits[GPUResource]; ok {
		return true
	}
	for _, t := range np.Spec.Template.Spec.Taints {
		for _, pt := range p.Taints {
			if t.Key == pt.Key {
				return true
			}
		}
	}
	if p.Label.Key != "" {
		if v, ok := np.Spec.Template.Metadata.Labels[p.Label.Key]; ok && v == p.Label.Value {
			return true
		}
	}
	for _, r := range np.Spec.Template.Spec.Requirements {
		if strings.Contains(strings.ToLower(r.Key), "gpu") {
			return true
		}
	}
	return false
}
