package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealHealthReportsToNode runs health against a real kube-apiserver
// (Node authorizer, RBAC, NodeRestriction) with the kubelet's credential
// laid out as k3s lays it out: the Node, registered as k3s would from
// nodeprep's drop-in, gets the GPUUnhealthy condition and the
// nodeprep.dev/gpu-ready label at each run — through a self-test fault
// (the fake ICD crashing), a lost GPU and back — while its registration
// taints stay; the credential cannot change them, nor touch another node;
// an API server that cannot be reached changes neither the verdict nor
// the exit status.
func TestRealHealthReportsToNode(t *testing.T) {
	srv := upstream.StartAPIServer(t)
	icd, egl := lavapipe(t)
	good := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	crash := []string{"VK_DRIVER_FILES=" + fakeICD.Manifest, "__EGL_VENDOR_LIBRARY_FILENAMES=" + fakeEGL.Manifest, "FAKE_FAULT=segv"}
	root := hostCopy(t, "nixos-h200")
	const node = "gpu-node-1"
	sim := []string{"--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter"}

	// Boot before the node ever registered: no kubeconfig, no report.
	r := run(t, good, append([]string{"up", "-v"}, sim...)...)
	if r.code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "the node has not registered") {
		t.Errorf("up before registration did not say why it did not report:\n%s", r.stderr)
	}

	// k3s starts: its agent writes the kubelet's credential under its
	// data-dir and the kubelet registers the Node with the drop-in's
	// labels and taints (--node-labels, --register-with-taints).
	kubelet := srv.KubeletCredential(t, root, k3s.DefaultDataDir, node)
	labels, taints := registration(t, root, map[string]string{"kubernetes.io/hostname": node})
	if len(taints) == 0 {
		t.Fatal("nodeprep's drop-in registers no taint")
	}
	nodeObj := map[string]any{"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": node, "labels": labels}, "spec": map[string]any{"taints": taints}}
	if code, body, err := srv.DoAs(t, kubelet, http.MethodPost, "/api/v1/nodes", "", nodeObj); err != nil || code != http.StatusCreated {
		t.Fatalf("registering the Node as its kubelet: %d %v %s", code, err, body)
	}
	// Another node, registered by its own kubelet.
	other := srv.KubeletCredential(t, t.TempDir(), k3s.DefaultDataDir, "gpu-node-2")
	if code, body, err := srv.DoAs(t, other, http.MethodPost, "/api/v1/nodes", "", map[string]any{"metadata": map[string]any{"name": "gpu-node-2"}}); err != nil || code != http.StatusCreated {
		t.Fatalf("registering gpu-node-2: %d %v %s", code, err, body)
	}

	type step struct {
		name      string
		env       []string
		args      []string
		code      int
		status    string // the condition's status
		reason    string
		label     string
		wantTrans bool // the transition time moves
	}
	var lastTransition string
	for i, s := range []step{
		{"up, registered", good, []string{"up"}, 0, "False", kubenode.ReasonHealthy, "true", true},
		{"healthy", good, []string{"health"}, 0, "False", kubenode.ReasonHealthy, "true", false},
		{"the ICD crashes", crash, []string{"health"}, 1, "True", kubenode.ReasonSelftest, "false", true},
		{"still crashing", crash, []string{"health"}, 1, "True", kubenode.ReasonSelftest, "false", false},
		{"fixed", good, []string{"health"}, 0, "False", kubenode.ReasonHealthy, "true", true},
		{"GPUs lost", good, []string{"health", "--simulate", "dgx-a100"}, 1, "True", kubenode.ReasonGPULost, "false", true},
		{"back", good, []string{"health"}, 0, "False", kubenode.ReasonHealthy, "true", true},
		// issue 28: the fabric manager stops registering the GPUs.
		{"fabric not registered", good, []string{"health", "--simulate", "dgx-h200+fabric-not-started"}, 1, "True", kubenode.ReasonGPULost, "false", true},
		{"fabric back", good, []string{"health"}, 0, "False", kubenode.ReasonHealthy, "true", true},
	} {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // condition times have second precision
		}
		start := time.Now()
		r := run(t, s.env, append(append(append([]string(nil), s.args[0], "-v"), sim...), s.args[1:]...)...)
		took := time.Since(start)
		if r.code != s.code {
			t.Fatalf("%s: exit %d, want %d\n%s\n%s", s.name, r.code, s.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "told the Node") {
			t.Errorf("%s: no report logged:\n%s", s.name, r.stderr)
		}
		var n kubenode.NodeObject
		if err := json.Unmarshal(srv.MustDo(t, http.MethodGet, "/api/v1/nodes/"+node, "", nil), &n); err != nil {
			t.Fatal(err)
		}
		var cond *kubenode.Condition
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == kubenode.ConditionType {
				cond = &n.Status.Conditions[i]
			}
		}
		switch {
		case cond == nil:
			t.Fatalf("%s: the Node has no %s condition: %+v", s.name, kubenode.ConditionType, n.Status)
		case cond.Status != s.status || cond.Reason != s.reason || cond.Message == "" || cond.LastHeartbeatTime == "":
			t.Errorf("%s: condition %+v, want status %s reason %s", s.name, *cond, s.status, s.reason)
		case strings.HasPrefix(s.name, "fabric not") && !strings.Contains(cond.Message, "NVLink fabric registration not started"):
			t.Errorf("%s: condition message %q does not name the fabric", s.name, cond.Message)
		case (cond.LastTransitionTime != lastTransition) != s.wantTrans:
			t.Errorf("%s: transition time %s (was %s), want moved=%t", s.name, cond.LastTransitionTime, lastTransition, s.wantTrans)
		}
		lastTransition = cond.LastTransitionTime
		if got := n.Metadata.Labels[kubenode.LabelGPUReady]; got != s.label {
			t.Errorf("%s: label %s=%q, want %q", s.name, kubenode.LabelGPUReady, got, s.label)
		}
		// Every registration taint stays (the API server's
		// TaintNodesByCondition adds node.kubernetes.io/not-ready beside
		// them: no kubelet reports Ready here).
		for _, want := range taints {
			found := false
			for _, tn := range n.Spec.Taints {
				found = found || tn.Key == want["key"] && tn.Value == want["value"] && tn.Effect == want["effect"]
			}
			if !found {
				t.Errorf("%s: the Node lost its taint %v: %+v", s.name, want, n.Spec.Taints)
			}
		}
		t.Logf("%s: %s from the start of the run to the Node showing it", s.name, took.Round(time.Millisecond))
	}

	// The cost of the report: health runs with and without it, medians
	// (for the docs' numbers; not asserted).
	median := func(args ...string) time.Duration {
		var ds []time.Duration
		for range 5 {
			start := time.Now()
			if r := run(t, good, append(append([]string{"health"}, sim...), args...)...); r.code != 0 {
				t.Fatalf("health %v: exit %d\n%s", args, r.code, r.stderr)
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[2]
	}
	with, without := median(), median("--no-node-report")
	t.Logf("health: %s with the Node report, %s without (medians of 5): the report costs %s", with.Round(time.Millisecond), without.Round(time.Millisecond), (with - without).Round(time.Millisecond))

	// What the kubelet's credential may not do.
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubenode.Load(host, kubenode.KubeletKubeconfig(k3s.DefaultDataDir))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Node() != node {
		t.Errorf("Load: node %q, want %q (from the certificate's CN)", c.Node(), node)
	}
	ctx := context.Background()
	var apiErr *kubenode.APIError
	err = c.Patch(ctx, "", "application/merge-patch+json", map[string]any{"spec": map[string]any{"taints": []any{}}})
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden || !strings.Contains(apiErr.Message, "taints") {
		t.Errorf("removing its own taints with the kubelet's credential: %v, want 403 naming taints (NodeRestriction)", err)
	}
	err = c.Patch(ctx, "", "application/merge-patch+json", map[string]any{"spec": map[string]any{"taints": append(taints, map[string]string{"key": "x", "effect": "NoSchedule"})}})
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden {
		t.Errorf("adding a taint with the kubelet's credential: %v, want 403", err)
	}
	code, body, err := srv.DoAs(t, kubelet, http.MethodPatch, "/api/v1/nodes/gpu-node-2/status", "application/strategic-merge-patch+json",
		map[string]any{"status": map[string]any{"conditions": []any{map[string]string{"type": kubenode.ConditionType, "status": "True"}}}})
	if err != nil || code != http.StatusForbidden {
		t.Errorf("patching another node's status with the kubelet's credential: %d %v %s, want 403", code, err, body)
	}

	// An API server that does not answer: the verdict and the exit stay,
	// the failure is logged.
	kc, err := os.ReadFile(kubelet.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dead := strings.Replace(string(kc), srv.URL, "https://127.0.0.1:1", 1)
	if err := os.WriteFile(kubelet.Kubeconfig, []byte(dead), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, good, append([]string{"health"}, sim...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "the Node was not told the verdict") {
		t.Errorf("health with the API server unreachable: exit %d, want 0 and a warning\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if s := readStatus(t, root); !s.Ready {
		t.Errorf("status after an unreachable API server: %+v", s)
	}
}
