package podpath

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	sigyaml "sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/selftest"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// poolLabel is the pool label the test's node registers with and
// `cluster render` selects.
const poolLabel = "payload=gpu"

// TestRealDevicePluginPodPath is the pod-path matrix's working row with
// every stand-in replaced by the real component: `nodeprep up` patches
// the specs of the 1.20 tree (upstream.GPUHost) and writes the k3s
// drop-in; the node's programs start as upstream.StartGPUNode starts them
// (TestRealFailover's on-prem node is the same node): the real kubelet
// registers the Node with the drop-in's taints and labels as
// k3s passes them; the real NVIDIA device plugin (upstream.DevicePlugin),
// run against the fake dgx-h200 NVML with the values `cluster render`
// emits (deviceListStrategy, deviceIDStrategy, driver root), registers
// over the kubelet's device-plugin socket and the Node's nvidia.com/gpu
// capacity must be the inventory's 8; then the Job `cluster render` emits
// is created, kube-scheduler and the Job controller place its pod, the
// kubelet gets the GPU from the plugin's own Allocate and runs the pod
// through containerd on the rendered runtime class's handler (nvidia-cdi)
// and the patched spec, and the probe inside must find Vulkan and EGL.
//
// The device plugin runs as a process in the node's namespace, not as the
// chart's DaemonSet pod: the chart is Helm's and its image a registry's,
// neither of which this machine reaches. What the Job runs is changed
// where this machine requires it, and only there: the probe image and
// command in place of the placeholder workload (one container for each
// probe), the host network and a toleration of node.kubernetes.io/not-ready
// (the node is started without a pod network, so it stays NotReady;
// TestRealFailover gives its node one and runs the Job as rendered).
func TestRealDevicePluginPodPath(t *testing.T) {
	icd, egl, nodeprep, inv, images := podPathSetup(t)
	su := setups[1] // 1.20, the toolkit NixOS unstable ships
	root := upstream.GPUHost(t, su.GPUHostSetup, icd, egl)
	up := exec.Command(nodeprep, "up", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter", "--label", poolLabel)
	up.Env = append(os.Environ(), "VK_DRIVER_FILES="+icd, "__EGL_VENDOR_LIBRARY_FILENAMES="+egl)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("nodeprep up: %v\n%s", err, out)
	}

	// What `cluster render` emits for this pool, the labels and taints
	// those of the drop-in up wrote.
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	view, err := k3s.Read(host, k3s.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := k3s.ParseLabel(poolLabel)
	if err != nil {
		t.Fatal(err)
	}
	var pool cluster.Pool
	pool.Label, pool.Arch, pool.DeviceNames, pool.DriverRoot = pl, "amd64", []string{"uuid"}, "/run/opengl-driver"
	if pool.Labels, err = k3s.ParseLabels(k3s.Values(view.Effective.NodeLabels)); err != nil {
		t.Fatal(err)
	}
	if pool.Taints, err = k3s.ParseTaints(k3s.Values(view.Effective.NodeTaints)); err != nil {
		t.Fatal(err)
	}
	docs, err := cluster.Render(cluster.RenderOptions{Pool: pool, Image: probeImage})
	if err != nil {
		t.Fatal(err)
	}
	var values cluster.DevicePluginValues
	var job batchv1.Job
	var runtimeClass map[string]any
	for _, d := range docs {
		switch d.File {
		case "device-plugin-values.yaml":
			err = sigyaml.Unmarshal(d.Data, &values)
		case "job.yaml":
			err = sigyaml.Unmarshal(d.Data, &job)
		case "runtimeclass.yaml":
			err = sigyaml.Unmarshal(d.Data, &runtimeClass)
		}
		if err != nil {
			t.Fatalf("%s: %v", d.File, err)
		}
	}
	if values.DeviceListStrategy == nil || values.DeviceIDStrategy == nil || values.NvidiaDriverRoot == nil {
		t.Fatalf("the rendered values lack a strategy or the driver root: %+v", values)
	}

	// The node: the kubelet registers from the drop-in, the device plugin
	// runs as the chart's values configure it and must report the
	// inventory's GPUs (upstream.StartGPUNode).
	api := upstream.StartAPIServer(t)
	const node = "gpu-node-0"
	gn := upstream.StartGPUNode(t, api, upstream.GPUNodeOptions{
		NodeName: node, Root: root, Toolkit: su.Toolkit, Images: images[1:], GPUs: len(inv.GPUs),
		DeviceListStrategy: *values.DeviceListStrategy, DeviceIDStrategy: *values.DeviceIDStrategy, DriverRoot: *values.NvidiaDriverRoot,
	})
	ns := gn.Kubelet.Namespace
	upstream.StartScheduler(t, api)
	upstream.StartControllerManager(t, api)

	// The Job's node selector wants nodeprep's health label, which
	// `nodeprep health` keeps on the Node (nodeprep/kubenode): set it as
	// health would on a node whose GPUs pass.
	api.MustDo(t, http.MethodPatch, "/api/v1/nodes/"+node, "application/merge-patch+json",
		map[string]any{"metadata": map[string]any{"labels": map[string]string{cluster.LabelGPUReady: "true"}}})
	for k, v := range values.NodeSelector {
		if got := nodeLabel(t, api, node, k); got != v {
			t.Fatalf("the rendered device plugin's nodeSelector %s=%s does not select the node (%q)", k, v, got)
		}
	}

	// The RuntimeClass render emits beside the Job, applied as a user
	// would: the stock cluster has none named nvidia-cdi, and without it
	// the Job's pod is refused at admission.
	if runtimeClass == nil {
		t.Fatal("cluster render emitted no runtimeclass.yaml")
	}
	api.MustDo(t, http.MethodPost, "/apis/node.k8s.io/v1/runtimeclasses", "", runtimeClass)

	// The rendered Job, with what this machine requires (see above).
	ps := &job.Spec.Template.Spec
	if len(ps.Containers) != 1 {
		t.Fatalf("the rendered Job has %d containers, want 1", len(ps.Containers))
	}
	ps.HostNetwork = true
	ps.Tolerations = append(ps.Tolerations, corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	_, icdPaths := selftest.ICDSearch(nil)
	base := ps.Containers[0]
	ps.Containers = nil
	for _, req := range []selftest.ProbeRequest{
		{API: selftest.APIVulkan, Library: "libvulkan.so.1", ICDPaths: icdPaths, ICDDefaultSearch: true},
		{API: selftest.APIEGL, Library: "libEGL.so.1"},
	} {
		reqJSON, _ := json.Marshal(req)
		ctr := *base.DeepCopy()
		ctr.Name = strings.ToLower(string(req.API))
		ctr.ImagePullPolicy = corev1.PullNever
		ctr.Command = []string{probeInPod, "__probe", string(reqJSON)}
		ctr.Args = nil
		ps.Containers = append(ps.Containers, ctr)
	}
	if ps.RuntimeClassName == nil || *ps.RuntimeClassName != cluster.PatchedRuntimeClass {
		t.Fatalf("the rendered Job's runtimeClassName is %v, want %s", ps.RuntimeClassName, cluster.PatchedRuntimeClass)
	}
	ns0 := job.Namespace
	if ns0 == "" {
		ns0 = "default"
	}
	applied := time.Now()
	upstream.CreateWhenAdmitted(t, api, "/apis/batch/v1/namespaces/"+ns0+"/jobs", &job, time.Minute)
	pod := waitJobPod(t, api, ns0, job.Name, time.Minute)
	phase := upstream.WaitPod(t, api, ns0, pod, 2*time.Minute, "Running", "Succeeded", "Failed")
	t.Logf("the Job's pod %s was %s %.1f s after the Job was created", pod, phase, time.Since(applied).Seconds())
	phase = upstream.WaitPod(t, api, ns0, pod, 2*time.Minute, "Succeeded", "Failed")
	body := api.MustDo(t, http.MethodGet, "/api/v1/namespaces/"+ns0+"/pods/"+pod, "", nil)
	var p corev1.Pod
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != node {
		t.Fatalf("the pod is %s on node %q, want %s\nscheduler: %s", phase, p.Spec.NodeName, node, body)
	}
	// What the kubelet got from the plugin's Allocate reached the pod:
	// the probes' reports, from the CRI logs in the node's namespace.
	var vk selftest.ProbeResult[selftest.VulkanReport]
	var eg selftest.ProbeResult[selftest.EGLReport]
	for _, api := range []string{"vulkan", "egl"} {
		files, _ := filepath.Glob(ns.Path(filepath.Join("/var/log/pods", ns0+"_"+pod+"_"+string(p.UID), api, "*.log")))
		if len(files) == 0 {
			t.Fatalf("no log of the %s probe (pod %s)\n%s", api, phase, body)
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		line, why := reportLine(data)
		if why != "" {
			t.Fatalf("the %s probe in the pod (%s): %s", api, phase, why)
		}
		if api == "vulkan" {
			vk.Report, err = selftest.DecodeVulkanReport(line)
		} else {
			eg.Report, err = selftest.DecodeEGLReport(line)
		}
		if err != nil {
			t.Fatalf("the %s probe's report: %v", api, err)
		}
	}
	// The plugin gave the pod the GPU its Allocate chose: one of the
	// inventory's.
	one := &gpu.Inventory{Simulated: true, Server: "dgx-h200", GPUs: inv.GPUs[:1]}
	rep := selftest.Evaluate(one, vk, eg, selftest.Policy{RequireEGL: true, AllowCPUAdapter: true, Hints: selftest.Hints{ICDPaths: icdPaths}})
	if !rep.Passed {
		var msgs []string
		for _, r := range rep.Reasons {
			msgs = append(msgs, r.Message)
		}
		t.Errorf("the probe in the Job's pod failed: %s", strings.Join(msgs, "; "))
	}
	if phase != "Succeeded" {
		t.Errorf("the Job's pod ended %s", phase)
	}
}

// reportLine finds the probe's report in a CRI log ("<time> <stream>
// <P|F> <text>" lines), or says why there is none.
func reportLine(data []byte) ([]byte, string) {
	stdout, stderr := criLog(data)
	for _, l := range stdout {
		if rest, ok := bytes.CutPrefix(l, []byte(selftest.ReportPrefix)); ok {
			return rest, ""
		}
	}
	return nil, fmt.Sprintf("no report; stderr: %s", stderr)
}

// waitJobPod waits until the Job controller has made a pod for job and
// returns its name.
func waitJobPod(t *testing.T, api *upstream.APIServer, ns, job string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		body := api.MustDo(t, http.MethodGet, "/api/v1/namespaces/"+ns+"/pods?labelSelector=batch.kubernetes.io/job-name%3D"+job, "", nil)
		var l corev1.PodList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 0 {
			return l.Items[0].Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Job controller made no pod for job %s in %s", job, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nodeLabel(t *testing.T, api *upstream.APIServer, node, key string) string {
	t.Helper()
	var n corev1.Node
	if err := json.Unmarshal(api.MustDo(t, http.MethodGet, "/api/v1/nodes/"+node, "", nil), &n); err != nil {
		t.Fatal(err)
	}
	return n.Labels[key]
}
