package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

// Lister reads the list at an API path, with query's parameters
// (labelSelector), page by page, calling item with each object's JSON:
// kubenode.API.List.
type Lister interface {
	List(ctx context.Context, path string, query url.Values, item func(json.RawMessage) error) error
}

// liveResources are the objects check reads from a cluster: what it
// judges in files, by their list paths.
var liveResources = []struct{ path, apiVersion, kind string }{
	{"/apis/apps/v1/daemonsets", "apps/v1", "DaemonSet"},
	{"/apis/apps/v1/deployments", "apps/v1", "Deployment"},
	{"/apis/apps/v1/statefulsets", "apps/v1", "StatefulSet"},
	{"/apis/batch/v1/jobs", "batch/v1", "Job"},
	{"/apis/batch/v1/cronjobs", "batch/v1", "CronJob"},
	{"/apis/" + KEDAAPIVersion + "/scaledjobs", KEDAAPIVersion, KindScaledJob},
	{"/apis/" + KEDAAPIVersion + "/scaledobjects", KEDAAPIVersion, "ScaledObject"},
	{"/apis/" + KarpenterAPIVersion + "/nodepools", KarpenterAPIVersion, KindNodePool},
	{"/apis/" + RuntimeClassAPIVersion + "/runtimeclasses", RuntimeClassAPIVersion, KindRuntimeClass},
}

// Live is what ReadLive found in a cluster.
type Live struct {
	Objects []Object
	Skipped []Skipped
	// Nodes are the cluster's Nodes in the pool (with its label), as
	// the API serves them, less their images and managed fields.
	Nodes []corev1.Node
	// Missing names the APIs the cluster does not serve (KEDA or
	// Karpenter not installed), one "kind (path)" each.
	Missing []string
}

// ReadLive reads the objects check judges (DaemonSets, Deployments,
// StatefulSets, Jobs, CronJobs, KEDA ScaledJobs and ScaledObjects,
// Karpenter NodePools, RuntimeClasses) and the Nodes with the pool label (every Node for
// the zero label) from the cluster l talks to. An API
// the cluster does not serve (404: its CRD is not installed) is listed
// in Live.Missing; any other failure is the error. Each object's Source
// is "cluster <list path>". Every list is read in pages (l's List), so
// its size is bounded by what l reads of one list, not of one response.
func ReadLive(ctx context.Context, l Lister, pool k3s.Label) (*Live, error) {
	live := &Live{}
	var items []json.RawMessage
	var sources []string
	for _, r := range liveResources {
		err := l.List(ctx, r.path, nil, func(raw json.RawMessage) error {
			var it map[string]any
			if err := json.Unmarshal(raw, &it); err != nil {
				return fmt.Errorf("decoding a %s: %w", r.kind, err)
			}
			if it == nil {
				return fmt.Errorf("a %s that is null", r.kind)
			}
			it["apiVersion"], it["kind"] = r.apiVersion, r.kind
			// What the server adds and check does not judge: the
			// object's status, and who wrote which field.
			delete(it, "status")
			if md, ok := it["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
			}
			js, err := json.Marshal(it)
			if err != nil {
				return fmt.Errorf("encoding a %s: %w", r.kind, err)
			}
			items = append(items, js)
			sources = append(sources, "cluster "+r.path)
			return nil
		})
		if err != nil {
			var ae *kubenode.APIError
			if errors.As(err, &ae) && ae.Code == http.StatusNotFound {
				live.Missing = append(live.Missing, r.kind+" ("+r.path+")")
				continue
			}
			return nil, fmt.Errorf("listing %s: %w", r.kind, err)
		}
	}
	if len(items) > 0 {
		arr, err := json.Marshal(items)
		if err != nil {
			return nil, err
		}
		if live.Objects, live.Skipped, err = Read("cluster", bytes.NewReader(arr)); err != nil {
			return nil, fmt.Errorf("reading the cluster's objects: %w", err)
		}
		// Read names them "cluster#1/<item>".
		for i := range live.Objects {
			if n, ok := itemIndex(live.Objects[i].Source); ok && n < len(sources) {
				live.Objects[i].Source = sources[n]
			}
		}
	}
	// Only the pool's Nodes are judged: the API server selects them, and
	// they are selected again here (a server may ignore the selector),
	// so that a cluster of 100,000 Nodes costs its pool's, not its size.
	var query url.Values
	if pool.Key != "" {
		query = url.Values{"labelSelector": {pool.String()}}
	}
	err := l.List(ctx, "/api/v1/nodes", query, func(raw json.RawMessage) error {
		if pool.Key != "" {
			var md struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &md); err != nil {
				return fmt.Errorf("decoding a Node: %w", err)
			}
			if v, ok := md.Metadata.Labels[pool.Key]; !ok || v != pool.Value {
				return nil
			}
		}
		var n corev1.Node
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("decoding a Node: %w", err)
		}
		// What check does not judge and a large cluster has much of.
		n.ManagedFields, n.Status.Images = nil, nil
		live.Nodes = append(live.Nodes, n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	return live, nil
}

func itemIndex(source string) (int, bool) {
	_, rest, ok := strings.Cut(source, "/")
	if !ok {
		return 0, false
	}
	var n int
	_, err := fmt.Sscanf(rest, "%d", &n)
	return n, err == nil
}

// RoleNode is a Row for a real pool node (check against a cluster).
const RoleNode = "node"

// nodeRows judges the cluster's pool nodes (those with the pool label):
// each must carry the pool's taints, report its GPUs through nodeprep
// (LabelGPUReady and ConditionGPUUnhealthy) and have healthy GPUs. It
// returns the rows and the first healthy pool node, which the workloads
// are then judged on (nil when there is none: the synthetic node stays).
func (c *checker) nodeRows(nodes []corev1.Node) ([]Row, *corev1.Node) {
	var rows []Row
	var healthy *corev1.Node
	for i := range nodes {
		n := &nodes[i]
		if v, ok := n.Labels[c.pool.Label.Key]; !ok || v != c.pool.Label.Value {
			continue
		}
		var why, fixes []string
		for _, pt := range c.pool.Taints {
			kt := KubeTaint(pt)
			found := false
			for _, t := range n.Spec.Taints {
				if t.MatchTaint(&kt) && t.Value == kt.Value {
					found = true
				}
			}
			if !found {
				why = append(why, fmt.Sprintf("no taint %s (registered before nodeprep's drop-in, or removed since)", pt))
				fixes = append(fixes, fmt.Sprintf("kubectl taint node %s %s", n.Name, pt))
			}
		}
		var cond *corev1.NodeCondition
		for j := range n.Status.Conditions {
			if string(n.Status.Conditions[j].Type) == ConditionGPUUnhealthy {
				cond = &n.Status.Conditions[j]
			}
		}
		label, hasLabel := n.Labels[LabelGPUReady]
		switch {
		case !hasLabel || cond == nil:
			why = append(why, fmt.Sprintf("no %s label or %s condition: nodeprep health does not report to this Node", LabelGPUReady, ConditionGPUUnhealthy))
			fixes = append(fixes, "run nodeprep health on the node (services.nodeprep.health.reportToNode)")
		case label != "true" || cond.Status == corev1.ConditionTrue:
			why = append(why, fmt.Sprintf("GPUs unhealthy since %s: %s (%s)", cond.LastTransitionTime.UTC().Format("2006-01-02 15:04:05Z"), cond.Message, cond.Reason))
			fixes = append(fixes, "repair the node's GPUs; GPU pods avoid it meanwhile")
		}
		cell := Cell{Column: ColumnOnPrem, Verdict: VerdictOK}
		if len(why) > 0 {
			cell = Cell{Column: ColumnOnPrem, Verdict: VerdictFail, Reason: strings.Join(why, "; "), Fix: strings.Join(fixes, "; ")}
		} else if healthy == nil {
			// Judged without the taints Kubernetes itself manages
			// (node.kubernetes.io/not-ready, unreachable, ...: node
			// conditions the node lifecycle adds and removes), which
			// workloads are not meant to tolerate.
			judged := n.DeepCopy()
			judged.Spec.Taints = nil
			for _, t := range n.Spec.Taints {
				if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
					judged.Spec.Taints = append(judged.Spec.Taints, t)
				}
			}
			healthy = judged
		}
		rows = append(rows, Row{Object: "node/" + n.Name, Source: "cluster /api/v1/nodes", Role: RoleNode, Cells: []Cell{cell}})
	}
	if len(rows) == 0 {
		rows = append(rows, Row{Object: "node/*", Source: "cluster /api/v1/nodes", Role: RoleNode, Cells: []Cell{{
			Column: ColumnOnPrem, Verdict: VerdictFail,
			Reason: fmt.Sprintf("no Node has the pool label %s", c.pool.Label),
			Fix:    "run nodeprep join on the GPU nodes before k3s registers them, or check the pool label",
		}}})
	}
	return rows, healthy
}

// Node is a Kubernetes Node (core/v1), for CheckOptions.Nodes.
type Node = corev1.Node
