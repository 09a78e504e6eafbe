package upstream_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealKarpenterLaunchesNode: Karpenter's kwok provider, given an
// instance type of one GPU and a NodePool for it, launches a node for a
// GPU pod the scheduler cannot place: a NodeClaim, and a Node marked for
// kwok (KwokNodeAnnotation) offering the GPU, with the NodePool's
// labels.
func TestRealKarpenterLaunchesNode(t *testing.T) {
	api := upstream.StartAPIServer(t)
	upstream.StartScheduler(t, api)
	upstream.StartControllerManager(t, api)
	k := upstream.StartKarpenter(t, api, `[{"name": "gpu-1x", "architecture": "amd64", "operatingSystems": ["linux"],
  "resources": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"},
  "offerings": [{"Price": 1.0, "Available": true, "Requirements": [
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}]`)
	api.MustDo(t, http.MethodPost, "/apis/karpenter.sh/v1/nodepools", "", map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": "fallback"},
		"spec": map[string]any{
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]string{"pool": "gpu"}},
				"spec": map[string]any{
					"nodeClassRef": map[string]string{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
					"requirements": []map[string]any{{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": []string{"gpu-1x"}}},
				},
			},
			"limits": map[string]string{"nvidia.com/gpu": "1"},
		},
	})
	upstream.CreateWhenAdmitted(t, api, "/api/v1/namespaces/default/pods", map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "gpu"},
		"spec": map[string]any{
			"nodeSelector": map[string]string{"pool": "gpu"},
			"containers": []map[string]any{{"name": "c", "image": "registry.example/app:1",
				"resources": map[string]any{"limits": map[string]string{"nvidia.com/gpu": "1"}}}},
		},
	}, time.Minute)
	start := time.Now()
	for {
		var nodes struct {
			Items []struct {
				Metadata struct {
					Name        string
					Labels      map[string]string
					Annotations map[string]string
				}
				Status struct {
					Allocatable map[string]string
				}
			}
		}
		if err := json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/nodes?labelSelector=karpenter.sh%2Fnodepool%3Dfallback", "", nil), &nodes); err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) > 0 {
			n := nodes.Items[0]
			if n.Metadata.Labels["pool"] != "gpu" || n.Metadata.Annotations[upstream.KwokNodeAnnotation] != upstream.KwokNodeValue || n.Status.Allocatable["nvidia.com/gpu"] != "1" {
				t.Errorf("the launched node: labels %v, annotations %v, allocatable %v", n.Metadata.Labels, n.Metadata.Annotations, n.Status.Allocatable)
			}
			t.Logf("node %s launched %s after the pod", n.Metadata.Name, time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("no node launched after 3 minutes; Karpenter's log:\n%s", k.LogTail())
		}
		time.Sleep(250 * time.Millisecond)
	}
	var claims struct{ Items []json.RawMessage }
	if err := json.Unmarshal(api.MustDo(t, http.MethodGet, "/apis/karpenter.sh/v1/nodeclaims", "", nil), &claims); err != nil || len(claims.Items) != 1 {
		t.Errorf("NodeClaims: %d (%v), want 1", len(claims.Items), err)
	}
}
