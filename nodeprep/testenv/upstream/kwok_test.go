package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestRealKwok: a node annotated for kwok turns Ready with the GPUs it
// was created with, a pod bound to it turns Running, and a deleted pod
// goes; a node without the annotation is left alone.
func TestRealKwok(t *testing.T) {
	api := StartAPIServer(t)
	k := StartKwok(t, api)
	node := func(name string, managed bool) map[string]any {
		meta := map[string]any{"name": name}
		if managed {
			meta["annotations"] = map[string]string{KwokNodeAnnotation: KwokNodeValue}
		}
		res := map[string]string{"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "8"}
		return map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": meta,
			"status": map[string]any{"capacity": res, "allocatable": res}}
	}
	api.MustDo(t, http.MethodPost, "/api/v1/nodes", "", node("fake-gpu", true))
	api.MustDo(t, http.MethodPost, "/api/v1/nodes", "", node("not-kwoks", false))
	var n struct {
		Status struct {
			Allocatable map[string]string `json:"allocatable"`
			Conditions  []struct{ Type, Status string }
		} `json:"status"`
	}
	ready := func(name string) bool {
		n.Status.Allocatable, n.Status.Conditions = nil, nil
		if err := json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/nodes/"+name, "", nil), &n); err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status == "True"
			}
		}
		return false
	}
	waitFor(t, k, "node fake-gpu Ready", func() bool { return ready("fake-gpu") })
	if got := n.Status.Allocatable["nvidia.com/gpu"]; got != "8" {
		t.Errorf("fake-gpu allocatable nvidia.com/gpu = %q, want 8 (the capacity it was created with)", got)
	}

	pod := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "default"},
		"spec":     map[string]any{"nodeName": "fake-gpu", "containers": []map[string]any{{"name": "c", "image": "busybox"}}}}
	// No controller-manager makes the namespace's default ServiceAccount,
	// which the ServiceAccount admission plugin wants.
	api.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "", map[string]any{"metadata": map[string]string{"name": "default"}})
	api.MustDo(t, http.MethodPost, "/api/v1/namespaces/default/pods", "", pod)
	phase := func() (int, string) {
		code, body, err := api.Do(http.MethodGet, "/api/v1/namespaces/default/pods/p", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Status struct{ Phase string } }
		json.Unmarshal(body, &p) //nolint:errcheck // a 404's body is a Status
		return code, p.Status.Phase
	}
	waitFor(t, k, "pod p Running", func() bool { _, ph := phase(); return ph == "Running" })
	api.MustDo(t, http.MethodDelete, "/api/v1/namespaces/default/pods/p", "", nil)
	waitFor(t, k, "pod p gone", func() bool { code, _ := phase(); return code == http.StatusNotFound })

	if ready("not-kwoks") {
		t.Errorf("node not-kwoks (no %s annotation) turned Ready: kwok manages nodes it should not", KwokNodeAnnotation)
	}
}

// waitFor polls cond every 100 ms for at most a minute (a bound, not a
// timed assertion: kwok acts within a second), failing t with kwok's log.
func waitFor(t *testing.T, k *KwokController, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute\n%s", what, fmt.Sprint(k.Log()))
		}
	}
}
