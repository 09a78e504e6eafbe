package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// failoverConfig is the pool's nodeprep config, on the node and where the
// cluster side is rendered (docs/cluster.md, "1. Configure"): the nodes
// register with payload=task_runner and sku=gpu:NoSchedule.
const failoverConfig = `join:
  labels: [payload=task_runner]
  taints: ["sku=gpu:NoSchedule"]
  defaultTaint: false
cluster:
  poolLabel: payload=task_runner
`

// The fallback's instance type, as the cloud would offer it: one GPU a
// node, so the NodePool's nvidia.com/gpu limit is also its node count.
const (
	fallbackType = "gpu-1x-amd64-linux"
	maxGPUs      = 3
	// queueName is the work queue; scrapeJob the Prometheus job that
	// scrapes the pool's nodes.
	queueName = "gpu-work"
	scrapeJob = "nodeprep-gpu-pool"
)

// fallbackInstanceTypes is the instance-types file of Karpenter's kwok
// provider (the shape of its kwok/cloudprovider/instance_types.json): the
// one GPU instance type, on-demand, in one zone.
var fallbackInstanceTypes = fmt.Sprintf(`[{"name": %q, "architecture": "amd64", "operatingSystems": ["linux"],
  "resources": {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi", "pods": "110", "nvidia.com/gpu": "1"},
  "offerings": [{"Price": 1.0, "Available": true, "Requirements": [
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}]`, fallbackType)

// hybrid is the failover cluster: the control plane, the on-prem pool
// node and the fallback's controllers.
type hybrid struct {
	t    *testing.T
	api  *upstream.APIServer
	root string // the on-prem node's host root
	node string
	gpu  *upstream.GPUNode   // the on-prem node's programs
	gpus []gpu.GPU           // its simulated GPUs
	env  map[string][]string // the GPU drivers: "good" and "crash"
	prom *upstream.Prometheus
	mq   *upstream.RabbitMQ
	logs map[string]func() string
}

// TestRealFailover walks the failover the rendered manifests describe on
// a hermetic cluster of real components: kube-apiserver, kube-scheduler
// and kube-controller-manager; the on-prem GPU node run by its own real
// programs (upstream.StartGPUNode, as TestRealDevicePluginPodPath runs
// it): the kubelet registering the Node from nodeprep's drop-in,
// containerd running its pods through the nvidia-cdi handler and the spec
// nodeprep patched, the NVIDIA device plugin allocating the 8 simulated
// GPUs (fake NVML), a bridge pod network in the node's namespace, and
// nodeprep health reporting to the Node with the kubelet's credential;
// Karpenter's kwok provider with the NodePool `cluster render` writes,
// its nodes played by kwok (their pods run no containers); Prometheus
// scraping the node's metrics file through node_exporter's textfile
// collector; RabbitMQ with the work queue; the KEDA operator with the
// rendered ScaledJob. The manifests are applied as rendered, their
// placeholders filled by the flags docs/cluster.md names; the one image
// they name is built here (workloadImage), as no registry is reachable.
//
// healthy (work on-prem: its container runs with the one GPU the device
// plugin allocated; no fallback node, no KEDA job) → the fake ICD
// crashes → health turns the condition and the label on the real Node →
// a new GPU Job goes Pending, Karpenter launches a fallback node, the pod
// runs there; with work queued and the pool down KEDA starts Jobs, capped
// at maxReplicaCount, and the NodePool's GPU limit caps the nodes under
// the burst → recovery → new work runs on the real kubelet again, with a
// GPU of its own, the emptied fallback nodes consolidated away, KEDA
// starts nothing. Each step is logged with its time; the deadlines are
// generous and only catch a step that never happens.
func TestRealFailover(t *testing.T) {
	h := startHybrid(t, true)
	dir := h.render()
	h.apply(filepath.Join(dir, "nodepool.yaml"), nil)
	h.apply(filepath.Join(dir, "scaledjob.yaml"), nil)
	const ns = "default"

	// Healthy: a GPU Job runs on-prem; nothing else moves.
	h.apply(filepath.Join(dir, "job.yaml"), map[string]any{"name": "work-healthy"})
	pod, took := h.waitPod(ns, "work-healthy", "Running", 2*time.Minute)
	if pod.node != h.node {
		t.Fatalf("healthy: the GPU Job's pod runs on %q, want the on-prem node %s", pod.node, h.node)
	}
	t.Logf("healthy: the Job's pod Running on-prem %s after it was created", took)
	// Run for real: containerd started its container through the
	// nvidia-cdi handler, with the GPU the device plugin allocated.
	h.podGPU(ns, pod)
	h.mq.Publish(t, queueName, 5) // work waiting: still on-prem's
	h.hold("healthy, work queued: no fallback node, no KEDA Job", 45*time.Second, func() string {
		if n := len(h.list("/apis/karpenter.sh/v1/nodeclaims")); n != 0 {
			return fmt.Sprintf("%d NodeClaims", n)
		}
		if n := len(h.kedaJobs(ns)); n != 0 {
			return fmt.Sprintf("%d KEDA Jobs", n)
		}
		return ""
	})

	// The fault: the fake ICD crashes in health's self-test.
	start := time.Now()
	if r := h.nodeprep("crash", "health"); r.code != 1 {
		t.Fatalf("health with the ICD crashing: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	cond, label := h.nodeState()
	if cond != "True" || label != "false" {
		t.Fatalf("after the fault: %s=%s, %s=%q; want True, false", kubenode.ConditionType, cond, kubenode.LabelGPUReady, label)
	}
	t.Logf("fault → the Node showing it: %s (health's run)", time.Since(start).Round(time.Millisecond))
	h.prom.Wait(t, "nodeprep_ready 0", time.Minute, func(q func(string) ([]upstream.Sample, error)) bool {
		s, err := q("nodeprep_ready")
		return err == nil && len(s) == 1 && s[0].Value == 0
	})
	t.Logf("fault → Prometheus reading nodeprep_ready 0: %s", time.Since(start).Round(time.Millisecond))

	// New GPU work no longer goes on-prem: Karpenter brings a node.
	fault := time.Now()
	h.apply(filepath.Join(dir, "job.yaml"), map[string]any{"name": "work-outage"})
	pending, _ := h.waitPod(ns, "work-outage", "Pending", time.Minute)
	if pending.node != "" {
		t.Fatalf("outage: the new Job's pod was bound to %s while the pool is down", pending.node)
	}
	pod, _ = h.waitPod(ns, "work-outage", "Running", 5*time.Minute)
	fb := h.fallbackNodes()
	if _, ok := fb[pod.node]; !ok {
		t.Fatalf("outage: the Job's pod runs on %q, not on a fallback node (%v)", pod.node, fb)
	}
	t.Logf("outage: Job created → its pod Running on fallback node %s: %s", pod.node, time.Since(fault).Round(time.Millisecond))

	// The burst: more GPU Jobs than the fallback's limit, and the queue
	// well over maxReplicaCount. KEDA starts Jobs up to the cap and no
	// more; the fallback's nodes stop at the NodePool's GPU limit.
	const burst = maxGPUs + 1
	for i := range burst {
		h.apply(filepath.Join(dir, "job.yaml"), map[string]any{"name": fmt.Sprintf("burst-%d", i)})
	}
	h.mq.Publish(t, queueName, 20)
	h.wait("KEDA at maxReplicaCount", 5*time.Minute, func() bool { return len(h.kedaJobs(ns)) >= maxGPUs })
	t.Logf("outage: KEDA's Jobs at maxReplicaCount %d: %s after the outage Job", maxGPUs, time.Since(fault).Round(time.Millisecond))
	h.wait("the fallback at its GPU limit", 5*time.Minute, func() bool { return len(h.fallbackNodes()) >= maxGPUs })
	t.Logf("outage: the fallback at its limit of %d nodes: %s after the outage Job", maxGPUs, time.Since(fault).Round(time.Millisecond))
	h.hold("burst: KEDA Jobs ≤ maxReplicaCount, fallback GPUs ≤ the NodePool limit", 75*time.Second, func() string {
		if n := len(h.kedaJobs(ns)); n > maxGPUs {
			return fmt.Sprintf("%d KEDA Jobs, maxReplicaCount %d", n, maxGPUs)
		}
		if n := len(h.fallbackNodes()); n > maxGPUs {
			return fmt.Sprintf("%d fallback nodes of one GPU, limit %d", n, maxGPUs)
		}
		return ""
	})
	// The caps, not a lack of demand, held: GPU pods still wait.
	if got := h.fallbackPods(ns); got <= maxGPUs {
		t.Errorf("burst: %d GPU pods want the fallback, want more than its limit %d", got, maxGPUs)
	}

	// The real kubelet's status updates (every 2 s) over the outage left
	// health's condition and label as they were.
	if cond, label := h.nodeState(); cond != "True" || label != "false" {
		t.Fatalf("after the burst: %s=%s, %s=%q; want True, false (the kubelet's own status updates)", kubenode.ConditionType, cond, kubenode.LabelGPUReady, label)
	}

	// Recovery: the ICD works again.
	rec := time.Now()
	if r := h.nodeprep("good", "health"); r.code != 0 {
		t.Fatalf("health after the fix: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if cond, label := h.nodeState(); cond != "False" || label != "true" {
		t.Fatalf("after the fix: %s=%s, %s=%q", kubenode.ConditionType, cond, kubenode.LabelGPUReady, label)
	}
	h.prom.Wait(t, "nodeprep_ready 1", time.Minute, func(q func(string) ([]upstream.Sample, error)) bool {
		s, err := q("nodeprep_ready")
		return err == nil && len(s) == 1 && s[0].Value == 1
	})
	h.apply(filepath.Join(dir, "job.yaml"), map[string]any{"name": "work-recovered"})
	pod, _ = h.waitPod(ns, "work-recovered", "Running", 2*time.Minute)
	if pod.node != h.node {
		t.Fatalf("recovered: the new Job's pod runs on %q, want the on-prem node %s", pod.node, h.node)
	}
	h.podGPU(ns, pod)
	t.Logf("recovery → new work Running on-prem: %s", time.Since(rec).Round(time.Millisecond))
	// The fallback's work finishes (kwok's pods never end by themselves):
	// the burst's backlog is consumed down to a few messages (as many as
	// in the healthy step, under the queue trigger's activation: a backlog
	// above it rents the cloud tier with the pool healthy, as rendered),
	// and the fallback's Jobs are deleted.
	h.mq.Purge(t, queueName)
	h.mq.Publish(t, queueName, 5)
	h.deleteJob(ns, "work-outage")
	for i := range burst {
		h.deleteJob(ns, fmt.Sprintf("burst-%d", i))
	}
	for _, j := range h.kedaJobs(ns) {
		h.deleteJob(ns, j)
	}
	reclaim := h.wait("consolidation: no fallback node", 5*time.Minute, func() bool {
		return len(h.list("/apis/karpenter.sh/v1/nodeclaims")) == 0 && len(h.fallbackNodes()) == 0
	})
	t.Logf("recovery: the fallback's work done → its nodes consolidated away: %s", reclaim.Round(time.Millisecond))
	// The pool absorbs the queue again: the cloud tier stays at zero.
	h.hold("recovered, work queued: KEDA starts no Job", 45*time.Second, func() string {
		if n := len(h.kedaJobs(ns)); n != 0 {
			return fmt.Sprintf("%d KEDA Jobs", n)
		}
		return ""
	})
}

// startHybrid starts the failover cluster and brings the on-prem node up,
// registered, Ready and healthy: the control plane, kwok, the on-prem
// node (its real kubelet, containerd and device plugin) and Karpenter's
// kwok provider always; with scaling also what the ScaledJob needs
// (RabbitMQ, node_exporter, Prometheus and the KEDA operator).
func startHybrid(t *testing.T, scaling bool) *hybrid {
	t.Helper()
	begin := time.Now()
	api := upstream.StartAPIServer(t)
	h := &hybrid{t: t, api: api, node: "gpu-onprem-1", logs: map[string]func() string{}}
	sched := upstream.StartScheduler(t, api)
	kcm := upstream.StartControllerManager(t, api)
	h.logs["kube-scheduler"] = func() string { return tailFile(sched.Log) }
	h.logs["kube-controller-manager"] = func() string { return tailFile(kcm.Log) }
	kwok := upstream.StartKwok(t, api)
	h.logs["kwok"] = kwok.Log

	// The on-prem node: the GPU host tree (the committed NixOS tree with
	// this machine's stand-ins for the driver and the real generator's
	// specs), nodeprep's config and up; then the node's own programs
	// (upstream.StartGPUNode): containerd with the NVIDIA runtime handlers
	// and the patched spec, the real kubelet registering the Node from up's
	// drop-in, the real device plugin against the fake NVML offering the 8
	// GPUs, with the values `cluster render` emits; a pod network, so the
	// Node goes Ready and the rendered Job's pods run as rendered.
	icd, egl := lavapipe(t)
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	h.env = map[string][]string{
		"good":  {"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl},
		"crash": {"VK_DRIVER_FILES=" + fakeICD.Manifest, "__EGL_VENDOR_LIBRARY_FILENAMES=" + fakeEGL.Manifest, "FAKE_FAULT=segv"},
	}
	h.root = upstream.GPUHost(t, upstream.GPUHostSetup{Tree: "nixos-h200", Toolkit: upstream.Toolkit120, Unit: "new"}, icd, egl)
	testkit.WriteFiles(t, h.root, map[string]string{"/etc/nodeprep/config.yaml": failoverConfig}, nil)
	if r := h.nodeprep("good", "up"); r.code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	values := h.pluginValues()
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	h.gpus = inv.GPUs
	h.gpu = upstream.StartGPUNode(t, api, upstream.GPUNodeOptions{
		NodeName: h.node, Root: h.root, Toolkit: upstream.Toolkit120, Images: []string{workloadImage(t)}, Network: true,
		GPUs: len(inv.GPUs), DeviceListStrategy: *values.DeviceListStrategy, DeviceIDStrategy: *values.DeviceIDStrategy, DriverRoot: *values.NvidiaDriverRoot,
	})
	h.logs["kubelet"] = func() string { return tailFile(h.gpu.Kubelet.Log) }
	h.logs["device plugin"] = func() string { return tailFile(h.gpu.DevicePluginLog) }
	h.logs["containerd"] = func() string { return tailFile(h.gpu.Kubelet.Containerd.Log) }
	h.wait("the on-prem Node Ready", 2*time.Minute, func() bool { return h.nodeCondition("Ready") == "True" })
	// The Node carries the drop-in's labels and taints as registered.
	labels, taints := registration(t, h.root, map[string]string{})
	var n corev1.Node
	if err := json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/nodes/"+h.node, "", nil), &n); err != nil {
		t.Fatal(err)
	}
	for k, v := range labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			t.Fatalf("the real Node lacks the drop-in's label %s=%s (%q, %t)", k, v, got, ok)
		}
	}
	for _, tn := range taints {
		if !slices.ContainsFunc(n.Spec.Taints, func(x corev1.Taint) bool {
			return x.Key == tn["key"] && x.Value == tn["value"] && string(x.Effect) == tn["effect"]
		}) {
			t.Fatalf("the real Node lacks the drop-in's taint %v: %v", tn, n.Spec.Taints)
		}
	}
	// nodeprep health reports with the kubelet's credential where k3s's
	// agent keeps it.
	api.KubeletCredential(t, h.root, k3s.DefaultDataDir, h.node)
	// The health run that reports to it (up ran before it registered).
	if r := h.nodeprep("good", "health"); r.code != 0 {
		t.Fatalf("health: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if cond, label := h.nodeState(); cond != "False" || label != "true" {
		t.Fatalf("healthy node: %s=%s, %s=%q", kubenode.ConditionType, cond, kubenode.LabelGPUReady, label)
	}

	// The fallback's node provisioner.
	karp := upstream.StartKarpenter(t, api, fallbackInstanceTypes)
	h.logs["karpenter"] = func() string { return tailFile(karp.Log) }

	if scaling {
		// RabbitMQ holds the work queue; Prometheus scrapes the node's
		// metrics file through node_exporter (job scrapeJob) and the
		// queue's metrics (job rabbitmq); KEDA runs the ScaledJob.
		h.mq = upstream.StartRabbitMQ(t)
		h.mq.DeclareQueue(t, queueName)
		exporter := upstream.StartNodeExporter(t, filepath.Join(h.root, "run/nodeprep"))
		h.prom = upstream.StartPrometheus(t,
			upstream.ScrapeTarget{Job: scrapeJob, Address: exporter, Labels: map[string]string{"node": h.node}},
			upstream.ScrapeTarget{Job: "rabbitmq", Address: h.mq.Metrics})
		h.logs["prometheus"] = func() string { return tailFile(filepath.Join(h.prom.Dir, "prometheus.log")) }
		keda := upstream.StartKEDA(t, api)
		h.logs["keda"] = func() string { return tailFile(keda.Log) }
	}

	// What docs/cluster.md tells users to create beside the manifests.
	api.MustDo(t, http.MethodPost, "/apis/node.k8s.io/v1/runtimeclasses", "", map[string]any{
		"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": map[string]any{"name": "nvidia-cdi"}, "handler": "nvidia-cdi"})
	t.Logf("the cluster up, the on-prem node Ready and healthy: %s", time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			for name, log := range h.logs {
				t.Logf("--- %s's log (end):\n%s", name, log())
			}
		}
	})
	return h
}

// nodeprep runs nodeprep on the on-prem node with the drivers of env
// ("good", "crash"): up or health, simulated as dgx-h200, its metrics
// file where node_exporter reads it.
func (h *hybrid) nodeprep(env, cmd string) result {
	h.t.Helper()
	return run(h.t, h.env[env], cmd, "--root", h.root, "--simulate", "dgx-h200", "--allow-cpu-adapter",
		"--metrics-file", "/run/nodeprep/"+upstreamMetricsFile)
}

// upstreamMetricsFile is the metrics file's name in node_exporter's
// textfile directory.
const upstreamMetricsFile = "nodeprep.prom"

// render runs `nodeprep cluster render` as docs/cluster.md tells a user,
// each placeholder filled by its flag (the node class, the instance
// types, the image; with scaling also Prometheus's address and the pool's
// scrape job, the queue's name and host) for this cluster, and returns
// the directory of the files. Without scaling only the NodePool and the
// Job are used, and only they are checked for placeholders.
func (h *hybrid) render() string {
	h.t.Helper()
	out := filepath.Join(h.t.TempDir(), "cluster")
	args := []string{"cluster", "render", "--config", filepath.Join(h.root, "etc/nodeprep/config.yaml"), "--out", out,
		"--node-class", "karpenter.kwok.sh/KWOKNodeClass/default",
		"--fallback-instance-types", fallbackType,
		"--image", "registry.example/gpu/app:1.0",
		"--max-gpus", fmt.Sprint(maxGPUs),
		"--consolidate-after", "10s",
	}
	files := []string{"nodepool.yaml", "job.yaml"}
	if h.prom != nil {
		args = append(args,
			"--prometheus-address", h.prom.URL,
			"--scrape-job", scrapeJob,
			"--queue-name", queueName,
			// No credentials in the manifest: KEDA's AMQP client logs in as
			// guest/guest when the URL names no user (amqp091-go's URI
			// defaults), which RabbitMQ admits from loopback.
			"--queue-host", strings.Replace(h.mq.AMQP, "guest:guest@", "", 1))
		files = append(files, "scaledjob.yaml")
	}
	r := run(h.t, nil, args...)
	if r.code != 0 {
		h.t.Fatalf("cluster render: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			h.t.Fatal(err)
		}
		if strings.Contains(string(data), "REPLACE_ME") {
			h.t.Fatalf("%s keeps a placeholder after the flags docs/cluster.md names:\n%s", f, data)
		}
	}
	return out
}

// apply creates the object of a rendered file as `kubectl apply` would
// (strict field validation), with meta's fields (name) replacing its own.
func (h *hybrid) apply(file string, meta map[string]any) {
	h.t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		h.t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		h.t.Fatalf("%s: %v", file, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		h.t.Fatal(err)
	}
	md, _ := obj["metadata"].(map[string]any)
	for k, v := range meta {
		md[k] = v
	}
	ns, _ := md["namespace"].(string)
	var path string
	switch obj["kind"] {
	case "Job":
		path = "/apis/batch/v1/namespaces/" + ns + "/jobs"
	case "ScaledJob":
		path = "/apis/keda.sh/v1alpha1/namespaces/" + ns + "/scaledjobs"
	case "NodePool":
		path = "/apis/karpenter.sh/v1/nodepools"
	default:
		h.t.Fatalf("%s: kind %v", file, obj["kind"])
	}
	upstream.CreateWhenAdmitted(h.t, h.api, path+"?fieldValidation=Strict", obj, time.Minute)
}

type podState struct{ phase, node, name, uid string }

// waitPod waits for the pod of Job ns/job to reach phase and returns it
// and how long that took.
func (h *hybrid) waitPod(ns, job, phase string, deadline time.Duration) (podState, time.Duration) {
	h.t.Helper()
	var p podState
	took := h.wait(fmt.Sprintf("Job %s's pod %s", job, phase), deadline, func() bool {
		for _, item := range h.list("/api/v1/namespaces/" + ns + "/pods?labelSelector=job-name%3D" + job) {
			var pod struct {
				Metadata struct{ Name, UID string } `json:"metadata"`
				Spec     struct{ NodeName string }  `json:"spec"`
				Status   struct{ Phase string }     `json:"status"`
			}
			if json.Unmarshal(item, &pod) == nil {
				p = podState{pod.Status.Phase, pod.Spec.NodeName, pod.Metadata.Name, pod.Metadata.UID}
				if p.phase == phase {
					return true
				}
			}
		}
		return false
	})
	return p, took
}

// list returns the items of a list at path.
func (h *hybrid) list(path string) []json.RawMessage {
	h.t.Helper()
	var l struct{ Items []json.RawMessage }
	if err := json.Unmarshal(h.api.MustDo(h.t, http.MethodGet, path, "", nil), &l); err != nil {
		h.t.Fatal(err)
	}
	return l.Items
}

// kedaJobs names the Jobs KEDA made for the ScaledJob in ns (KEDA labels
// them scaledjob.keda.sh/name).
func (h *hybrid) kedaJobs(ns string) []string {
	h.t.Helper()
	var names []string
	for _, item := range h.list("/apis/batch/v1/namespaces/" + ns + "/jobs?labelSelector=scaledjob.keda.sh%2Fname") {
		var j struct{ Metadata struct{ Name string } }
		if json.Unmarshal(item, &j) == nil {
			names = append(names, j.Metadata.Name)
		}
	}
	return names
}

// fallbackNodes are the Nodes Karpenter launched (karpenter.sh/nodepool
// set), by name.
func (h *hybrid) fallbackNodes() map[string]bool {
	h.t.Helper()
	nodes := map[string]bool{}
	for _, item := range h.list("/api/v1/nodes?labelSelector=karpenter.sh%2Fnodepool") {
		var n struct{ Metadata struct{ Name string } }
		if json.Unmarshal(item, &n) == nil {
			nodes[n.Metadata.Name] = true
		}
	}
	return nodes
}

// fallbackPods counts the GPU pods in ns that are not on the on-prem node
// and not done: those the fallback runs or would have to.
func (h *hybrid) fallbackPods(ns string) int {
	h.t.Helper()
	n := 0
	for _, item := range h.list("/api/v1/namespaces/" + ns + "/pods") {
		var p struct {
			Spec   struct{ NodeName string } `json:"spec"`
			Status struct{ Phase string }    `json:"status"`
		}
		if json.Unmarshal(item, &p) == nil && p.Spec.NodeName != h.node && (p.Status.Phase == "Pending" || p.Status.Phase == "Running") {
			n++
		}
	}
	return n
}

// deleteJob deletes Job ns/name and its pods (background propagation).
func (h *hybrid) deleteJob(ns, name string) {
	h.t.Helper()
	h.api.MustDo(h.t, http.MethodDelete, "/apis/batch/v1/namespaces/"+ns+"/jobs/"+name, "",
		map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"})
}

// nodeState is the on-prem Node's GPUUnhealthy condition status and its
// nodeprep.dev/gpu-ready label.
func (h *hybrid) nodeState() (cond, label string) {
	h.t.Helper()
	var n kubenode.NodeObject
	if err := json.Unmarshal(h.api.MustDo(h.t, http.MethodGet, "/api/v1/nodes/"+h.node, "", nil), &n); err != nil {
		h.t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == kubenode.ConditionType {
			cond = c.Status
		}
	}
	return cond, n.Metadata.Labels[kubenode.LabelGPUReady]
}

// nodeCondition is the status of the on-prem Node's condition typ ("" when
// it has none).
func (h *hybrid) nodeCondition(typ string) string {
	h.t.Helper()
	var n kubenode.NodeObject
	if err := json.Unmarshal(h.api.MustDo(h.t, http.MethodGet, "/api/v1/nodes/"+h.node, "", nil), &n); err != nil {
		h.t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// pluginValues are the device plugin's chart values `cluster render`
// emits for the pool (device-plugin-values.yaml): its strategies and the
// driver root.
func (h *hybrid) pluginValues() cluster.DevicePluginValues {
	h.t.Helper()
	out := filepath.Join(h.t.TempDir(), "values")
	r := run(h.t, nil, "cluster", "render", "--config", filepath.Join(h.root, "etc/nodeprep/config.yaml"), "--out", out)
	if r.code != 0 {
		h.t.Fatalf("cluster render: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(filepath.Join(out, "device-plugin-values.yaml"))
	if err != nil {
		h.t.Fatal(err)
	}
	var v cluster.DevicePluginValues
	if err := yaml.Unmarshal(data, &v); err != nil {
		h.t.Fatalf("device-plugin-values.yaml: %v", err)
	}
	if v.DeviceListStrategy == nil || v.DeviceIDStrategy == nil || v.NvidiaDriverRoot == nil {
		h.t.Fatalf("the rendered values lack a strategy or the driver root:\n%s", data)
	}
	return v
}

// workloadImage writes the image the rendered Job and the drill's canary
// name (the --image of render and drill) as an OCI archive: the test
// rootfs (a workload image's base: the toolkit's hooks run its ldconfig)
// and one static program, as /app (the entrypoint) and as sleep on the
// PATH (the canary's command), that prints NVIDIA_VISIBLE_DEVICES and the
// GPU device nodes it sees (/dev/nvidia<minor>), one a line, then waits
// for SIGTERM.
func workloadImage(t *testing.T) string {
	t.Helper()
	rootfs := testkit.ContainerRootfs(t)
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer")
	src := filepath.Join(dir, "app.c")
	prog := `#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void stop(int s) { (void)s; _exit(0); }
int main(void) {
	signal(SIGTERM, stop);
	signal(SIGINT, stop);
	const char *v = getenv("NVIDIA_VISIBLE_DEVICES");
	printf("` + envLine + `%s\n", v ? v : "");
	DIR *d = opendir("/dev");
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' && e->d_name[6] <= '9')
			printf("` + deviceLine + `/dev/%s\n", e->d_name);
	printf("` + doneLine + `\n");
	fflush(stdout);
	for (;;) pause();
}
`
	if err := os.MkdirAll(filepath.Join(layer, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", filepath.Join(layer, "app"), src).CombinedOutput(); err != nil {
		t.Fatalf("building the workload program: %v\n%s", err, out)
	}
	if err := os.Link(filepath.Join(layer, "app"), filepath.Join(layer, "usr", "bin", "sleep")); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "app.tar")
	if err := upstream.WriteOCIArchive(archive, upstream.Image{Ref: workloadRef, Layers: []string{rootfs, layer}, Entrypoint: []string{"/app"}}); err != nil {
		t.Fatal(err)
	}
	return archive
}

// What the workload program prints (workloadImage).
const (
	workloadRef = "registry.example/gpu/app:1.0"
	envLine     = "NVIDIA_VISIBLE_DEVICES="
	deviceLine  = "device "
	doneLine    = "listed"
)

// podGPU reads what the on-prem pod's container gpu printed (from its CRI
// log in the node's namespace) and what the kubelet's device manager
// allocated it (its checkpoint, kubelet_internal_checkpoint: the device
// IDs per pod, container and resource), and fails the test unless the
// container was given exactly one GPU — one device node
// /dev/nvidia<minor>, of the GPU whose UUID the device plugin allocated.
// It returns the GPU's UUID.
func (h *hybrid) podGPU(ns string, p podState) string {
	h.t.Helper()
	dir := h.gpu.Kubelet.Namespace.Path(filepath.Join("/var/log/pods", ns+"_"+p.name+"_"+p.uid, "gpu"))
	var lines []string
	h.wait("the workload's report in its log", time.Minute, func() bool {
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		if len(files) == 0 {
			return false
		}
		data, _ := os.ReadFile(files[0])
		lines = nil
		for _, l := range strings.Split(string(data), "\n") {
			// CRI log lines: "<time> <stream> <P|F> <text>".
			if f := strings.SplitN(l, " ", 4); len(f) == 4 && f[1] == "stdout" {
				lines = append(lines, f[3])
			}
		}
		return slices.Contains(lines, doneLine)
	})
	var env string
	var devices []string
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, envLine); ok {
			env = v
		}
		if v, ok := strings.CutPrefix(l, deviceLine); ok {
			devices = append(devices, v)
		}
	}
	var cp struct {
		Data struct {
			PodDeviceEntries []struct {
				PodUID, ContainerName, ResourceName string
				DeviceIDs                           map[string][]string
			}
		}
	}
	data, err := os.ReadFile(h.gpu.Kubelet.Namespace.Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"))
	if err == nil {
		err = json.Unmarshal(data, &cp)
	}
	if err != nil {
		h.t.Fatalf("the kubelet's device checkpoint: %v", err)
	}
	var ids []string
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID == p.uid && e.ContainerName == "gpu" && e.ResourceName == "nvidia.com/gpu" {
			for _, v := range e.DeviceIDs {
				ids = append(ids, v...)
			}
		}
	}
	if len(ids) != 1 {
		h.t.Fatalf("the kubelet allocated the pod's container %d nvidia.com/gpu devices %v, want 1", len(ids), ids)
	}
	i := slices.IndexFunc(h.gpus, func(g gpu.GPU) bool { return g.UUID == ids[0] })
	if i < 0 {
		h.t.Fatalf("the device plugin allocated %q, not one of the node's GPUs", ids[0])
	}
	if want := fmt.Sprintf("/dev/nvidia%d", h.gpus[i].Minor); len(devices) != 1 || devices[0] != want {
		h.t.Fatalf("the container sees GPU device nodes %v, want exactly %s (allocated %s; NVIDIA_VISIBLE_DEVICES=%q)", devices, want, ids[0], env)
	}
	h.t.Logf("the pod's container got GPU %s (%s; NVIDIA_VISIBLE_DEVICES=%q)", ids[0], devices[0], env)
	return ids[0]
}

// wait polls ok every 250 ms until it holds and returns how long that
// took; past deadline it fails the test naming what.
func (h *hybrid) wait(what string, deadline time.Duration, ok func() bool) time.Duration {
	h.t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > deadline {
			h.t.Fatalf("%s: not reached after %s", what, deadline)
		}
		time.Sleep(250 * time.Millisecond)
	}
	return time.Since(start).Round(time.Millisecond)
}

// hold checks, every second for d, that bad (a description of what went
// wrong, "" when nothing did) stays "": a state that must last, such as a
// ceiling under a burst, over more than one of KEDA's polling intervals
// and Karpenter's batching windows.
func (h *hybrid) hold(what string, d time.Duration, bad func() string) {
	h.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		if why := bad(); why != "" {
			h.t.Fatalf("%s: %s", what, why)
		}
	}
	h.t.Logf("%s: held for %s", what, d)
}

// tailFile is the end of a log file (at most 4000 bytes).
func tailFile(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}
