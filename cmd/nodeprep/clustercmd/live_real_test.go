package clustercmd

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// installCRDs creates KEDA's and Karpenter's CRDs, as vendored from their
// Go modules by scripts/vendor-crds.sh, and waits until they are served.
func installCRDs(t *testing.T, srv *upstream.APIServer) {
	t.Helper()
	dir := filepath.Join(clusterCorpus, "crds")
	for _, f := range []string{"keda.sh_scaledjobs.yaml", "keda.sh_scaledobjects.yaml", "karpenter.sh_nodepools.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		srv.MustDo(t, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "", js)
	}
	deadline := time.Now().Add(time.Minute)
	for _, p := range []string{"/apis/keda.sh/v1alpha1/scaledjobs", "/apis/keda.sh/v1alpha1/scaledobjects", "/apis/karpenter.sh/v1/nodepools"} {
		for {
			code, _, err := srv.Do(http.MethodGet, p, "", nil)
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not served a minute after its CRD: %d %v", p, code, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// objectPath is where an object of render's is created.
func objectPath(obj map[string]any) string {
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	switch kind {
	case "Job":
		return "/apis/batch/v1/namespaces/" + ns + "/jobs"
	case "Deployment":
		return "/apis/apps/v1/namespaces/" + ns + "/deployments"
	case "ScaledJob":
		return "/apis/keda.sh/v1alpha1/namespaces/" + ns + "/scaledjobs"
	case "NodePool":
		return "/apis/karpenter.sh/v1/nodepools"
	}
	return ""
}

// TestRealClusterRenderAndLiveCheck: with KEDA's ScaledJob and
// Karpenter's NodePool CRDs installed in a real kube-apiserver, every
// object cluster render writes passes a server-side dry-run create with
// strict field validation; created for real beside a pool Node that
// nodeprep reports to, `cluster check --kubeconfig` passes, and fails
// once the Node's GPUs are reported broken, and for a GPU Deployment that
// ignores nodeprep.dev/gpu-ready.
func TestRealClusterRenderAndLiveCheck(t *testing.T) {
	srv := upstream.StartAPIServer(t)
	installCRDs(t, srv)
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	js, errOut, code := clusterRun(t, "", "--config", cfg, "-o", "json", "cluster", "render",
		"--node-class=karpenter.k8s.aws/EC2NodeClass/gpu", "--prometheus-address=http://prometheus.monitoring.svc:9090", "--scrape-job=gpu-pool", "--queue-name=gpu-jobs", "--queue-host=amqp://rabbitmq.queues.svc:5672/",
		"--image=registry.example/gpu/app:1.2", "--fallback-instance-types=g5.xlarge")
	if code != 0 {
		t.Fatalf("render: exit %d\n%s", code, errOut)
	}
	var docs []map[string]any
	if err := json.Unmarshal([]byte(js), &docs); err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, d := range docs {
		p := objectPath(d)
		if p == "" {
			continue // the device plugin's Helm values: not an object
		}
		for _, q := range []string{"?dryRun=All&fieldValidation=Strict", "?fieldValidation=Strict"} {
			code, body, err := srv.Do(http.MethodPost, p+q, "", d)
			if err != nil || code != http.StatusCreated {
				t.Errorf("creating %s %v (%s): %d %v %s", d["kind"], d["metadata"], q, code, err, body)
			}
		}
		created++
	}
	if created != 3 {
		t.Fatalf("render wrote %d objects, want the Job, the ScaledJob and the NodePool", created)
	}

	// The pool node, registered by its kubelet with the seed's label and
	// taint, and nodeprep's report on it.
	kubelet := srv.KubeletCredential(t, t.TempDir(), "/var/lib/rancher/k3s", "gpu-1")
	node := map[string]any{"metadata": map[string]any{"name": "gpu-1", "labels": map[string]string{"payload": "task_runner"}},
		"spec": map[string]any{"taints": []map[string]string{{"key": "sku", "value": "gpu", "effect": "NoSchedule"}}}}
	if code, body, err := srv.DoAs(t, kubelet, http.MethodPost, "/api/v1/nodes", "", node); err != nil || code != http.StatusCreated {
		t.Fatalf("registering gpu-1: %d %v %s", code, err, body)
	}
	nc, err := kubenode.New(kubenode.Credential{Server: srv.URL, CA: srv.CA, Cert: kubelet.Cert, Key: kubelet.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	report := func(ready bool) {
		t.Helper()
		if _, err := nc.Report(context.Background(), kubenode.Health{Ready: ready, Reason: kubenode.Reason(ready, "selftest"), Message: "test", Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	admin := srv.AdminKubeconfig(t, t.TempDir())
	check := func() (string, int) {
		out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", "--kubeconfig", admin)
		return out + errOut, code
	}

	out, code := check()
	if code != 1 || !strings.Contains(out, "node/gpu-1") || !strings.Contains(out, "nodeprep health does not report to this Node") {
		t.Errorf("live check before nodeprep reported: exit %d, want 1 naming the silent node\n%s", code, out)
	}
	report(true)
	out, code = check()
	if code != 0 || !strings.Contains(out, "ok:") || !strings.Contains(out, "job/default/nodeprep-gpu") || !strings.Contains(out, "nodepool/nodeprep-gpu-fallback") {
		t.Errorf("live check of render's objects on a healthy node: exit %d, want 0\n%s", code, out)
	}
	report(false)
	out, code = check()
	if code != 1 || !strings.Contains(out, "GPUs unhealthy since") {
		t.Errorf("live check with the node's GPUs broken: exit %d, want 1\n%s", code, out)
	}
	report(true)
	srv.MustDo(t, http.MethodPost, "/api/v1/namespaces", "", map[string]any{"metadata": map[string]any{"name": "jobs"}})
	dep := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "careless", "namespace": "jobs"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]string{"app": "c"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "c"}},
				"spec": map[string]any{"nodeSelector": map[string]string{"payload": "task_runner"},
					"tolerations": []map[string]string{{"key": "sku", "operator": "Exists"}},
					"containers":  []map[string]any{{"name": "c", "image": "i", "resources": map[string]any{"limits": map[string]string{"nvidia.com/gpu": "1"}}}}}}}}
	srv.MustDo(t, http.MethodPost, objectPath(dep), "", dep)
	out, code = check()
	if code != 1 || !strings.Contains(out, "deployment/jobs/careless") || !strings.Contains(out, "does not require nodeprep.dev/gpu-ready=true") {
		t.Errorf("live check with a Deployment that ignores the label: exit %d, want 1 naming it\n%s", code, out)
	}
}
