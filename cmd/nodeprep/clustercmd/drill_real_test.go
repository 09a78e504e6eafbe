package clustercmd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/drill"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// drillCluster is a real kube-apiserver with kwok playing the kubelets:
// two on-prem GPU nodes with the pool label, and a stand-in for the
// scheduler and Karpenter (the hybrid cluster's tests bring the real
// ones): it binds each pending pod to a schedulable node its
// nodeSelector matches, launches a fallback kwok node (label
// karpenter.sh/nodepool, 8 GPUs) when none matches, and deletes a
// fallback node with no pod on it (consolidation, consolidateAfter 0s).
type drillCluster struct {
	api        *upstream.APIServer
	kubeconfig string
	config     string
	stop       context.CancelFunc
	done       sync.WaitGroup
	// hold keeps the stand-in from reclaiming fallback nodes, and
	// holdPod from binding a pod whose name ends with it: a phase the
	// test interrupts cannot end before the signal.
	hold    atomic.Bool
	holdPod atomic.Value // string
}

func startDrillCluster(t *testing.T) *drillCluster {
	t.Helper()
	api := upstream.StartAPIServer(t)
	upstream.StartKwok(t, api)
	dir := t.TempDir()
	c := &drillCluster{api: api, kubeconfig: api.AdminKubeconfig(t, dir), config: filepath.Join(dir, "config.yaml")}
	os.WriteFile(c.config, []byte("join: {labels: [payload=task_runner], taints: [\"sku=gpu:NoSchedule\"], defaultTaint: false}\n"), 0o644)
	api.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "", map[string]any{"metadata": map[string]string{"name": "default"}})
	for _, n := range []string{"gpu-a", "gpu-b"} {
		c.node(t, n, map[string]string{"payload": "task_runner", drill.LabelGPUReady: "true"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.done.Add(1)
	go func() { defer c.done.Done(); c.standIn(ctx) }()
	t.Cleanup(func() { cancel(); c.done.Wait() })
	return c
}

func (c *drillCluster) node(t testing.TB, name string, labels map[string]string) {
	res := map[string]string{"cpu": "32", "memory": "128Gi", "pods": "110", drill.GPUResource: "8"}
	body := map[string]any{"metadata": map[string]any{"name": name, "labels": labels,
		"annotations": map[string]string{upstream.KwokNodeAnnotation: upstream.KwokNodeValue}},
		"spec":   map[string]any{"taints": []map[string]string{{"key": "sku", "value": "gpu", "effect": "NoSchedule"}}},
		"status": map[string]any{"capacity": res, "allocatable": res}}
	if code, out, err := c.api.Do(http.MethodPost, "/api/v1/nodes", "", body); err != nil || code/100 != 2 {
		if t != nil {
			t.Fatalf("creating node %s: %d %v %s", name, code, err, out)
		}
	}
}

type testNode struct {
	Metadata struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"spec"`
}

type testPod struct {
	Metadata struct{ Name, Namespace string } `json:"metadata"`
	Spec     struct {
		NodeName     string            `json:"nodeName"`
		NodeSelector map[string]string `json:"nodeSelector"`
	} `json:"spec"`
}

func (c *drillCluster) nodes() []testNode {
	var l struct{ Items []testNode }
	if _, out, err := c.api.Do(http.MethodGet, "/api/v1/nodes", "", nil); err == nil {
		json.Unmarshal(out, &l) //nolint:errcheck // a failed read is an empty round
	}
	return l.Items
}

func (c *drillCluster) pods(selector string) []testPod {
	var l struct{ Items []testPod }
	if _, out, err := c.api.Do(http.MethodGet, "/api/v1/pods?labelSelector="+selector, "", nil); err == nil {
		json.Unmarshal(out, &l) //nolint:errcheck // a failed read is an empty round
	}
	return l.Items
}

func (c *drillCluster) standIn(ctx context.Context) {
	seq := 0
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		nodes, pods := c.nodes(), c.pods("")
		used := map[string]bool{}
		for _, p := range pods {
			used[p.Spec.NodeName] = true
		}
		for _, p := range pods {
			if held, _ := c.holdPod.Load().(string); p.Spec.NodeName != "" || held != "" && strings.HasSuffix(p.Metadata.Name, held) {
				continue
			}
			target := ""
			for _, n := range nodes {
				fits := !n.Spec.Unschedulable
				for k, v := range p.Spec.NodeSelector {
					if k == drill.LabelNodePool {
						continue
					}
					fits = fits && n.Metadata.Labels[k] == v
				}
				if fits && (target == "" || n.Metadata.Labels[drill.LabelNodePool] == "") {
					target = n.Metadata.Name
				}
			}
			if target == "" {
				seq++
				target = fmt.Sprintf("fallback-%d", seq)
				c.node(nil, target, map[string]string{"payload": "task_runner", drill.LabelGPUReady: "true", drill.LabelNodePool: "gpu-fallback"})
				continue // bound on the next round, once it exists
			}
			c.api.Do(http.MethodPost, "/api/v1/namespaces/"+p.Metadata.Namespace+"/pods/"+p.Metadata.Name+"/binding", "", //nolint:errcheck // retried next round
				map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]string{"name": p.Metadata.Name}, "target": map[string]string{"kind": "Node", "name": target}})
			used[target] = true
		}
		for _, n := range nodes {
			if n.Metadata.Labels[drill.LabelNodePool] != "" && !used[n.Metadata.Name] && !c.hold.Load() {
				c.api.Do(http.MethodDelete, "/api/v1/nodes/"+n.Metadata.Name, "", nil) //nolint:errcheck // retried next round
			}
		}
	}
}

// assertRestored: no node carries a drill mark, is cordoned or is not
// GPU-ready, and no canary is left.
func (c *drillCluster) assertRestored(t *testing.T) {
	t.Helper()
	for _, n := range c.nodes() {
		if _, ok := n.Metadata.Annotations[drill.AnnotationID]; ok || n.Spec.Unschedulable || n.Metadata.Labels[drill.LabelGPUReady] != "true" {
			t.Errorf("node %s not restored: unschedulable %t, labels %v, annotations %v", n.Metadata.Name, n.Spec.Unschedulable, n.Metadata.Labels, n.Metadata.Annotations)
		}
	}
	// A deleted canary goes once kwok has seen its deletion.
	for deadline := time.Now().Add(time.Minute); len(c.pods(drill.LabelCanary)) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("canaries left: %+v", c.pods(drill.LabelCanary))
			break
		}
	}
}

func (c *drillCluster) drillArgs(extra ...string) []string {
	return append([]string{"--config", c.config, "cluster", "drill", "--kubeconfig", c.kubeconfig, "--image", "busybox", "--poll", "100ms", "--runtime-class", ""}, extra...)
}

// TestRealDrill: against a real kube-apiserver with kwok nodes, the dry
// run changes nothing; the drill in both modes passes every phase, reports
// the fallback node it cost, and leaves every node as it was; a missed
// deadline fails and restores; marks left by another drill make it refuse
// (exit 75) until --restore clears them; an interrupt restores.
func TestRealDrill(t *testing.T) {
	c := startDrillCluster(t)

	out, errOut, code := clusterRun(t, "", c.drillArgs("-o", "json")...)
	var plan drill.Report
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || !plan.DryRun || strings.Join(plan.OnPrem, ",") != "gpu-a,gpu-b" {
		t.Fatalf("dry run: exit %d, %s%s", code, out, errOut)
	}
	c.assertRestored(t)
	if len(c.pods(drill.LabelCanary)) != 0 {
		t.Fatal("the dry run made a canary")
	}

	for _, mode := range []string{drill.ModeCordon, drill.ModeNotReady} {
		out, errOut, code = clusterRun(t, "", c.drillArgs("--run", "--mode", mode, "--deadline", "1m", "--reclaim-deadline", "1m", "-o", "json")...)
		var r drill.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("mode %s: exit %d\n%s%s", mode, code, out, errOut)
		}
		var names []string
		for _, p := range r.Phases {
			names = append(names, p.Name)
			if !p.OK {
				t.Errorf("mode %s: phase %+v failed", mode, p)
			}
		}
		if strings.Join(names, ",") != "baseline,failover,return,reclaim" || len(r.Added) != 1 || r.AddedGPUs != 8 ||
			!strings.HasPrefix(r.Phases[1].Node, "fallback-") || r.Phases[2].Node == r.Phases[1].Node {
			t.Errorf("mode %s: report %+v", mode, r)
		}
		if strings.Join(r.Restored, ",") != "gpu-a,gpu-b" {
			t.Errorf("mode %s: restored %v", mode, r.Restored)
		}
		t.Logf("mode %s: %s", mode, out)
		c.assertRestored(t)
	}
	out, _, _ = clusterRun(t, "", c.drillArgs("--run", "--deadline", "1m", "--reclaim-deadline", "1m")...)
	t.Logf("text report:\n%s", out)
	c.assertRestored(t)

	// A deadline the failover cannot meet: the stand-in Karpenter takes
	// at least one round of 100 ms.
	out, errOut, code = clusterRun(t, "", c.drillArgs("--run", "--deadline", "1ms")...)
	if code != 1 || !strings.Contains(out, "not done within its deadline") || !strings.Contains(out, "restored: gpu-a, gpu-b") && !strings.Contains(out, "restored: none") {
		t.Errorf("missed deadline: exit %d, want 1\n%s%s", code, out, errOut)
	}
	c.assertRestored(t)

	// Another drill's marks: refused, nothing changed; --restore clears them.
	c.api.MustDo(t, http.MethodPatch, "/api/v1/nodes/gpu-b", "application/merge-patch+json", map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{drill.AnnotationID: "old", drill.AnnotationRestore: `{"unschedulable":false,"mode":"cordon"}`}},
		"spec":     map[string]any{"unschedulable": true}})
	out, errOut, code = clusterRun(t, "", c.drillArgs("--run")...)
	if code != 75 || !strings.Contains(errOut, "another drill's marks are present: node gpu-b (drill old)") {
		t.Errorf("marked: exit %d, want 75\n%s%s", code, out, errOut)
	}
	out, errOut, code = clusterRun(t, "", "--config", c.config, "cluster", "drill", "--kubeconfig", c.kubeconfig, "--restore")
	if code != 0 || !strings.Contains(out, "restored: gpu-b") {
		t.Errorf("--restore: exit %d\n%s%s", code, out, errOut)
	}
	c.assertRestored(t)

	// An interrupt in each phase: SIGINT once the phase has begun. The
	// test's own registration keeps a signal that comes as a drill ends
	// from ending the test binary.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT)
	defer signal.Stop(sigs)
	for _, phase := range []string{drill.PhaseBaseline, drill.PhaseFailover, drill.PhaseReturn, drill.PhaseReclaim} {
		// The reclaim phase waits: the stand-in holds the fallback node
		// until the signal came.
		// Every run starts without a fallback node, so that its failover
		// adds one (the reclaim phase waits only for added nodes).
		for deadline := time.Now().Add(time.Minute); c.fallbackNodes() > 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the stand-in did not reclaim the fallback nodes")
			}
		}
		// The phase's canary (the n-th of the drill) is not bound, and in
		// the reclaim phase the fallback node is not reclaimed, until the
		// signal came.
		c.hold.Store(phase == drill.PhaseReclaim)
		c.holdPod.Store(map[string]string{drill.PhaseBaseline: "-1", drill.PhaseFailover: "-2", drill.PhaseReturn: "-3"}[phase])
		done, finished := make(chan struct{}), make(chan struct{})
		begun := c.phaseWatch(phase)
		go func() {
			defer close(done)
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				select {
				case <-finished:
					return
				default:
				}
				if begun() {
					syscall.Kill(os.Getpid(), syscall.SIGINT) //nolint:errcheck // the drill's NotifyContext takes it
					return
				}
			}
		}()
		out, errOut, code = clusterRun(t, "", c.drillArgs("--run", "--deadline", "1m", "--reclaim-deadline", "1m")...)
		close(finished)
		<-done
		if code != 1 || !strings.Contains(out, "interrupted") {
			t.Errorf("SIGINT in %s: exit %d, want 1 and interrupted\n%s%s", phase, code, out, errOut)
		}
		c.hold.Store(false)
		c.holdPod.Store("")
		c.assertRestored(t)
	}
}

func (c *drillCluster) fallbackNodes() int {
	n := 0
	for _, x := range c.nodes() {
		if x.Metadata.Labels[drill.LabelNodePool] != "" {
			n++
		}
	}
	return n
}

// phaseWatch returns a function that reports, polled, when the drill has
// begun phase, from what the cluster shows: a canary and no mark
// (baseline), a marked node (failover), the third canary (return), and
// no canary after the third (reclaim).
func (c *drillCluster) phaseWatch(phase string) func() bool {
	third := false
	return func() bool {
		canaries := c.pods(drill.LabelCanary)
		marked := false
		for _, n := range c.nodes() {
			if _, ok := n.Metadata.Annotations[drill.AnnotationID]; ok {
				marked = true
			}
		}
		for _, p := range canaries {
			third = third || strings.HasSuffix(p.Metadata.Name, "-3")
		}
		switch phase {
		case drill.PhaseBaseline:
			return len(canaries) > 0 && !marked
		case drill.PhaseFailover:
			return marked
		case drill.PhaseReturn:
			return third && !marked
		default:
			return third && len(canaries) == 0
		}
	}
}
