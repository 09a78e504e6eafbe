package upstream

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRealKubeletRegistersAndRuns starts the real kubelet and
// kube-scheduler against the real API server: the Node registers with
// the flags' taints and labels, the scheduler binds a tolerating
// host-network pod to it and leaves one without tolerations Pending, the
// kubelet runs the pod through containerd, and the host is unchanged.
func TestRealKubeletRegistersAndRuns(t *testing.T) {
	api, k := startPauseKubelet(t, KubeletOptions{
		NodeName: "gpu-0",
		Args:     []string{"--register-with-taints=nvidia.com/gpu=present:NoSchedule,a.example/b:NoExecute", "--node-labels=pool=gpu,x.example/y=1"},
	})
	body, err := k.Registered(2 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Taints []struct{ Key, Value, Effect string } `json:"taints"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &node); err != nil {
		t.Fatal(err)
	}
	var taints []string
	for _, x := range node.Spec.Taints {
		taints = append(taints, x.Key+"="+x.Value+":"+x.Effect)
	}
	// The API server's TaintNodesByCondition admission plugin (on by
	// default, in k3s too) adds not-ready to every Node it creates.
	if want := []string{"nvidia.com/gpu=present:NoSchedule", "a.example/b=:NoExecute", "node.kubernetes.io/not-ready=:NoSchedule"}; !slices.Equal(taints, want) {
		t.Errorf("the Node's taints: %v, want %v", taints, want)
	}
	if node.Metadata.Labels["pool"] != "gpu" || node.Metadata.Labels["x.example/y"] != "1" || node.Metadata.Labels["kubernetes.io/hostname"] != "gpu-0" {
		t.Errorf("the Node's labels: %v", node.Metadata.Labels)
	}
	// The kubelet wrote its sysctls into the namespace's own files.
	if data, _ := os.ReadFile(filepath.Join(k.Namespace.Dir, "kernel.panic")); strings.TrimSpace(string(data)) != "10" {
		t.Errorf("kernel.panic inside the namespace is %q: the kubelet did not set it there (the check of the host proves nothing)", data)
	}

	StartScheduler(t, api)
	StartControllerManager(t, api) // the default ServiceAccount
	pod := func(name string, tolerate bool) map[string]any {
		spec := map[string]any{
			"hostNetwork":                  true,
			"automountServiceAccountToken": false,
			"containers":                   []any{map[string]any{"name": "c", "image": pauseImage, "imagePullPolicy": "Never"}},
		}
		if tolerate {
			spec["tolerations"] = []any{map[string]any{"operator": "Exists"}}
		}
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": "default"}, "spec": spec}
	}
	CreateWhenAdmitted(t, api, "/api/v1/namespaces/default/pods", pod("tolerates", true), time.Minute)
	CreateWhenAdmitted(t, api, "/api/v1/namespaces/default/pods", pod("intolerant", false), time.Minute)
	phase := WaitPod(t, api, "default", "tolerates", 2*time.Minute, "Running")
	if phase != "Running" {
		t.Fatalf("the tolerating pod is %s", phase)
	}
	var p struct {
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
	}
	json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/namespaces/default/pods/intolerant", "", nil), &p) //nolint:errcheck
	if p.Spec.NodeName != "" {
		t.Errorf("the pod without tolerations was bound to %s past the registration taints", p.Spec.NodeName)
	}
}

// TestRealKubeletPodNetwork starts the real kubelet on a containerd with
// a pod network (ContainerdConfig.Network): the Node must go Ready (the
// CRI reports NetworkReady), a pod off the host network that tolerates
// nothing must run there with an address of PodSubnet, and the host must
// be unchanged — the bridge, the pods' veths and the forwarding sysctl
// are the node namespace's. Without the network the Node stays NotReady
// (TestRealKubeletRegistersAndRuns: its not-ready taint).
func TestRealKubeletPodNetwork(t *testing.T) {
	api, k := startPauseKubelet(t, KubeletOptions{
		NodeName:         "net-0",
		ContainerdConfig: ContainerdConfig{Network: true},
	})
	if _, err := k.Registered(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
	StartScheduler(t, api)
	StartControllerManager(t, api)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status, Message string } `json:"conditions"`
			} `json:"status"`
		}
		json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/nodes/net-0", "", nil), &n) //nolint:errcheck
		ready := slices.ContainsFunc(n.Status.Conditions, func(c struct{ Type, Status, Message string }) bool {
			return c.Type == "Ready" && c.Status == "True"
		})
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Node is not Ready with a pod network: %+v", n.Status.Conditions)
		}
		time.Sleep(250 * time.Millisecond)
	}
	CreateWhenAdmitted(t, api, "/api/v1/namespaces/default/pods", map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "networked", "namespace": "default"},
		"spec": map[string]any{
			"automountServiceAccountToken": false,
			"containers":                   []any{map[string]any{"name": "c", "image": pauseImage, "imagePullPolicy": "Never"}},
		},
	}, time.Minute)
	if phase := WaitPod(t, api, "default", "networked", 2*time.Minute, "Running"); phase != "Running" {
		t.Fatalf("the pod is %s", phase)
	}
	var p struct {
		Status struct {
			PodIP string `json:"podIP"`
		} `json:"status"`
	}
	json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/namespaces/default/pods/networked", "", nil), &p) //nolint:errcheck
	_, subnet, _ := net.ParseCIDR(PodSubnet)
	if ip := net.ParseIP(p.Status.PodIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("the pod's IP %q is not of the pod network %s", p.Status.PodIP, PodSubnet)
	}
}

// pauseImage is the sandbox image startPauseKubelet builds and imports;
// the tests' pods run it too.
const pauseImage = "localhost/nodeprep-pause:test"

// startPauseKubelet checks that the host is left unchanged, starts the
// real API server and, in a node namespace of its own, the kubelet with
// o (its Namespace and its containerd's sandbox image filled in), and
// imports a pause image built here as that sandbox image.
func startPauseKubelet(t *testing.T, o KubeletOptions) (*APIServer, *KubeletInstance) {
	t.Helper()
	CheckHostUnchanged(t)
	api := StartAPIServer(t)
	o.Namespace = StartNodeNamespace(t)
	o.ContainerdConfig.SandboxImage = pauseImage
	pause := filepath.Join(t.TempDir(), "pause.tar")
	WritePauseImage(t, pause, o.ContainerdConfig.SandboxImage)
	k := StartKubelet(t, api, o)
	k.Containerd.ImportImage(t, pause)
	return api, k
}
