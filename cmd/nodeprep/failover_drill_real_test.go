package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/drill"
)

// TestRealFailoverDrill runs `nodeprep cluster drill --run` (the built
// binary) against the failover cluster of TestRealFailover without its
// scaling part: the real kube-scheduler places the canary, the on-prem
// node's real kubelet runs it through containerd with a GPU from the
// device plugin (baseline and return), Karpenter's
// kwok provider launches the fallback node from the NodePool `cluster
// render` writes (consolidateAfter 10s) and its consolidation reclaims
// it. The drill must pass every phase, report the one fallback node of
// one GPU it cost, and leave the on-prem node schedulable, no canary and
// no NodeClaim behind. Beside the drill, the test watches the cluster and
// logs when each step inside the failover happened (cordon → canary
// Pending → NodeClaim → fallback Node → Ready → canary Running), and the
// report in text.
func TestRealFailoverDrill(t *testing.T) {
	h := startHybrid(t, false)
	dir := h.render()
	h.apply(filepath.Join(dir, "nodepool.yaml"), nil)
	kubeconfig := h.api.AdminKubeconfig(t, t.TempDir())

	ctx, cancel := context.WithCancel(context.Background())
	w := &drillWatch{h: h, seen: map[string]time.Duration{}}
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() { defer wg.Done(); w.run(ctx, start) }()

	r := run(t, nil, "--config", filepath.Join(h.root, "etc/nodeprep/config.yaml"), "cluster", "drill",
		"--kubeconfig", kubeconfig, "--run", "--image", "registry.example/gpu/app:1.0",
		"--poll", "250ms", "--deadline", "5m", "--reclaim-deadline", "5m", "-o", "json")
	cancel()
	wg.Wait()
	var rep drill.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("drill: exit %d, report not JSON: %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	var text strings.Builder
	if err := drill.WriteText(&text, &rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("the drill's report:\n%s", text.String())
	t.Logf("seen beside the drill (since it started):\n%s", w.String())
	if r.code != 0 || !rep.OK {
		t.Fatalf("drill: exit %d, ok %t, error %q\n%s", r.code, rep.OK, rep.Error, r.stderr)
	}
	if len(rep.OnPrem) != 1 || rep.OnPrem[0] != h.node {
		t.Errorf("drill's on-prem nodes %v, want [%s]", rep.OnPrem, h.node)
	}
	var phases []string
	for _, p := range rep.Phases {
		phases = append(phases, p.Name)
		onPrem := p.Name == drill.PhaseBaseline || p.Name == drill.PhaseReturn
		if p.Name != drill.PhaseReclaim && (p.Node == h.node) != onPrem {
			t.Errorf("phase %s: the canary ran on %q (on-prem %s)", p.Name, p.Node, h.node)
		}
	}
	if want := []string{drill.PhaseBaseline, drill.PhaseFailover, drill.PhaseReturn, drill.PhaseReclaim}; strings.Join(phases, ",") != strings.Join(want, ",") {
		t.Errorf("phases %v, want %v", phases, want)
	}
	// One canary of one GPU on one-GPU instances: the failover cost one
	// node, one GPU.
	if len(rep.Added) != 1 || rep.AddedGPUs != 1 {
		t.Errorf("the failover cost %v (%d GPUs), want one node of one GPU", rep.Added, rep.AddedGPUs)
	}
	if len(rep.Restored) != 1 || rep.Restored[0] != h.node {
		t.Errorf("restored %v, want [%s]", rep.Restored, h.node)
	}
	// What the drill leaves: the node as it was, nothing of its own, and
	// the fallback back at zero.
	var n struct {
		Metadata struct{ Annotations map[string]string }
		Spec     struct{ Unschedulable bool }
	}
	if err := json.Unmarshal(h.api.MustDo(t, http.MethodGet, "/api/v1/nodes/"+h.node, "", nil), &n); err != nil {
		t.Fatal(err)
	}
	if _, marked := n.Metadata.Annotations[drill.AnnotationID]; marked || n.Spec.Unschedulable {
		t.Errorf("after the drill %s is unschedulable %t, annotations %v", h.node, n.Spec.Unschedulable, n.Metadata.Annotations)
	}
	h.wait("the canaries gone", time.Minute, func() bool {
		return len(h.list("/api/v1/pods?labelSelector="+drill.LabelCanary)) == 0
	})
	if c := h.list("/apis/karpenter.sh/v1/nodeclaims"); len(c) != 0 {
		t.Errorf("after the drill: %d NodeClaims", len(c))
	}
}

// drillWatch records, from outside the drill, when each step of a
// failover first showed in the cluster.
type drillWatch struct {
	h     *hybrid
	mu    sync.Mutex
	seen  map[string]time.Duration
	order []string
}

func (w *drillWatch) mark(what string, at time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.seen[what]; !ok {
		w.seen[what] = at
		w.order = append(w.order, what)
	}
}

func (w *drillWatch) has(what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.seen[what]
	return ok
}

// String lists the steps in the order seen, each with its time since
// the drill started and since the step before.
func (w *drillWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	var prev time.Duration
	for _, what := range w.order {
		at := w.seen[what]
		fmt.Fprintf(&b, "%8.3fs (+%.3fs) %s\n", at.Seconds(), (at - prev).Seconds(), what)
		prev = at
	}
	return b.String()
}

// run polls the cluster every 100 ms until ctx ends. It reads through
// api.Do, not the test's fatal helpers: it runs off the test's goroutine.
func (w *drillWatch) run(ctx context.Context, start time.Time) {
	get := func(path string, v any) bool {
		code, out, err := w.h.api.Do(http.MethodGet, path, "", nil)
		return err == nil && code == http.StatusOK && json.Unmarshal(out, v) == nil
	}
	for ; ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		at := time.Since(start)
		var node struct{ Spec struct{ Unschedulable bool } }
		if get("/api/v1/nodes/"+w.h.node, &node) {
			if node.Spec.Unschedulable {
				w.mark("on-prem node cordoned", at)
			} else if w.has("on-prem node cordoned") {
				w.mark("on-prem node uncordoned", at)
			}
		}
		var claims struct{ Items []json.RawMessage }
		if get("/apis/karpenter.sh/v1/nodeclaims", &claims) && len(claims.Items) > 0 {
			w.mark("NodeClaim created", at)
		}
		var nodes struct {
			Items []struct {
				Status struct {
					Conditions []struct{ Type, Status string }
				}
			}
		}
		if get("/api/v1/nodes?labelSelector="+drill.LabelNodePool, &nodes) {
			for _, n := range nodes.Items {
				w.mark("fallback Node registered", at)
				for _, c := range n.Status.Conditions {
					if c.Type == "Ready" && c.Status == "True" {
						w.mark("fallback Node Ready", at)
					}
				}
			}
			if len(nodes.Items) == 0 && w.has("fallback Node registered") {
				w.mark("fallback Node gone (reclaimed)", at)
			}
		}
		var pods struct {
			Items []struct {
				Spec   struct{ NodeName string }
				Status struct{ Phase string }
			}
		}
		if get("/api/v1/pods?labelSelector="+drill.LabelCanary, &pods) {
			for _, p := range pods.Items {
				switch {
				case p.Status.Phase == "Running" && p.Spec.NodeName == w.h.node && !w.has("on-prem node cordoned"):
					w.mark("canary Running on-prem", at)
				case p.Spec.NodeName == "" && w.has("on-prem node cordoned") && !w.has("on-prem node uncordoned"):
					w.mark("canary Pending (unbound) while cordoned", at)
				case p.Status.Phase == "Running" && p.Spec.NodeName != w.h.node:
					w.mark("canary Running on the fallback", at)
				case p.Status.Phase == "Running" && p.Spec.NodeName == w.h.node && w.has("on-prem node uncordoned"):
					w.mark("canary Running on-prem again", at)
				}
			}
		}
	}
}
