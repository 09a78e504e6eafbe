package cluster

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRenderWorkloadsKarpenterProvisions: no rendered pod template holds
// a requirement, required or preferred, of karpenter.sh/nodepool
// DoesNotExist — Karpenter ignores such a pod (provisioner.go,
// validateKarpenterManagedLabelCanExist), so the fallback would never
// launch a node for it — while the example Job still prefers the nodes
// that are not the fallback NodePool's.
func TestRenderWorkloadsKarpenterProvisions(t *testing.T) {
	t.Parallel()
	objs, _, err := Read("render.yaml", bytes.NewReader(Join(renderSeed(t, seedPool(t)))))
	if err != nil {
		t.Fatal(err)
	}
	prefers := false
	for _, o := range objs {
		spec := o.PodSpec
		if o.ScaledJob != nil && o.ScaledJob.Spec.JobTargetRef != nil {
			spec = &o.ScaledJob.Spec.JobTargetRef.Template.Spec
		}
		if spec == nil || spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
			continue
		}
		na := spec.Affinity.NodeAffinity
		var terms []corev1.NodeSelectorTerm
		if na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			terms = append(terms, na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms...)
		}
		for _, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, p.Preference)
		}
		for _, term := range terms {
			for _, r := range term.MatchExpressions {
				if r.Key != labelNodePool {
					continue
				}
				if r.Operator == corev1.NodeSelectorOpDoesNotExist {
					t.Errorf("%s: %s DoesNotExist: Karpenter ignores the pod", o.ID(), labelNodePool)
				}
				if r.Operator == corev1.NodeSelectorOpNotIn && len(r.Values) == 1 && r.Values[0] == "nodeprep-gpu-fallback" {
					prefers = true
				}
			}
		}
	}
	if !prefers {
		t.Error("no rendered workload prefers the nodes that are not the fallback NodePool's")
	}
}
