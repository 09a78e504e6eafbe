package cluster

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// k3sRuntimeClasses is k3s's manifests/runtimes.yaml as nodeprep models it
// (k3s.RuntimeClasses), one RuntimeClass document each.
func k3sRuntimeClasses() string {
	var b strings.Builder
	for _, rc := range k3s.RuntimeClasses {
		fmt.Fprintf(&b, "---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: %s\nhandler: %s\n", rc.Name, rc.Handler)
	}
	return b.String()
}

// renderedWithout renders the seed pool's manifests, less the files named in
// drop.
func renderedWithout(t *testing.T, drop ...string) string {
	t.Helper()
	docs, err := Render(RenderOptions{Pool: seedPool(t), Image: "registry.example/app:1", PrometheusAddress: "http://prom:9090",
		ScrapeJob: "gpu-pool", QueueName: "work", QueueHost: "amqp://rabbitmq.queues.svc:5672/",
		FallbackInstanceTypes: []string{"g5.xlarge"}, NodeClass: NodeClassRef{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	var kept []Document
	for _, d := range docs {
		if !strings.Contains(strings.Join(drop, " "), d.File) {
			kept = append(kept, d)
		}
	}
	return string(Join(kept))
}

// TestRenderRuntimeClass: render emits the nvidia-cdi RuntimeClass, with
// no scheduling, and job.yaml no longer asks the user to create it.
func TestRenderRuntimeClass(t *testing.T) {
	t.Parallel()
	docs, err := Render(RenderOptions{Pool: seedPool(t)})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, d := range docs {
		switch d.File {
		case "runtimeclass.yaml":
			found = true
			var rc nodev1.RuntimeClass
			if err := yaml.UnmarshalStrict(d.Data, &rc); err != nil {
				t.Fatal(err)
			}
			if rc.APIVersion != "node.k8s.io/v1" || rc.Kind != "RuntimeClass" || rc.Name != "nvidia-cdi" || rc.Handler != "nvidia-cdi" || rc.Scheduling != nil || rc.Overhead != nil {
				t.Errorf("runtimeclass.yaml: %+v", rc)
			}
		case "job.yaml":
			if strings.Contains(string(d.Data), "Create the RuntimeClass") {
				t.Errorf("job.yaml still asks the user to create the RuntimeClass:\n%s", d.Data)
			}
		}
	}
	if !found {
		t.Fatal("render wrote no runtimeclass.yaml")
	}
}

// TestRuntimeClassOnStockK3s: on a stock k3s cluster (its own
// RuntimeClasses only) the manifests render wrote before it emitted the
// RuntimeClass fail for every pod that names nvidia-cdi — the Job, the
// ScaledJob's Job and the device plugin — naming the class and the fix;
// with render's runtimeclass.yaml they pass, k3s's NVIDIA classes are
// judged ok and its crun and wasm ones are not judged.
func TestRuntimeClassOnStockK3s(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%t", cluster), func(t *testing.T) {
			t.Parallel()
			check := func(manifest string) *Report {
				objs, skipped, err := Read("m.yaml", strings.NewReader(manifest))
				if err != nil {
					t.Fatal(err)
				}
				return Check(objs, skipped, CheckOptions{Pool: seedPool(t), Metrics: metrics, Cluster: cluster})
			}
			old := check(renderedWithout(t, "runtimeclass.yaml") + k3sRuntimeClasses())
			if old.OK {
				t.Errorf("render's manifests without the RuntimeClass on stock k3s: OK")
			}
			for _, obj := range []string{"helmvalues/m.yaml", "job/default/nodeprep-gpu", "scaledjob/default/nodeprep-gpu-fallback"} {
				var failed bool
				for _, row := range old.Rows {
					if row.Object != obj || row.Role == RoleTrigger {
						continue
					}
					for _, c := range row.Cells {
						if c.Verdict == VerdictFail && strings.Contains(c.Reason, `runtimeClassName nvidia-cdi names no RuntimeClass`) &&
							strings.Contains(c.Reason, `pod rejected: RuntimeClass "nvidia-cdi" not found`) && strings.Contains(c.Fix, "runtimeclass.yaml") {
							failed = true
						}
					}
				}
				if !failed {
					t.Errorf("%s: no cell fails on the missing RuntimeClass nvidia-cdi: %+v", obj, old.Rows)
				}
			}
			rep := check(renderedWithout(t) + k3sRuntimeClasses())
			if !rep.OK {
				t.Errorf("render's manifests with runtimeclass.yaml on stock k3s: not OK: %+v", rep.Rows)
			}
			for _, obj := range []string{"runtimeclass/nvidia-cdi", "runtimeclass/nvidia", "runtimeclass/nvidia-experimental"} {
				if c := cell(t, rep, obj, ColumnOnPrem); c.Verdict != VerdictOK {
					t.Errorf("%s: %+v", obj, c)
				}
			}
			skipped := 0
			for _, s := range rep.Skipped {
				if s.Kind == KindRuntimeClass {
					skipped++
				}
			}
			if skipped != len(k3s.RuntimeClasses)-2 {
				t.Errorf("%d RuntimeClasses not judged, want k3s's crun and wasm ones (%d): %+v", skipped, len(k3s.RuntimeClasses)-2, rep.Skipped)
			}
		})
	}
}

// TestRuntimeClassRules: what a runtimeClassName and a RuntimeClass's
// handler are judged against.
func TestRuntimeClassRules(t *testing.T) {
	t.Parallel()
	pod := func(rc string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]\n" +
			"  tolerations: [{key: sku, operator: Exists}]\n  nodeSelector: {nodeprep.dev/gpu-ready: \"true\"}\n  runtimeClassName: " + rc + "\n"
	}
	class := func(name, handler string) string {
		return "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: " + name + "}\nhandler: " + handler + "\n---\n"
	}
	reporting := func(handlers ...string) []corev1.Node {
		n := corev1.Node{}
		n.Name, n.Labels = "gpu-1", map[string]string{"payload": "task_runner", LabelGPUReady: "true"}
		n.Spec.Taints = []corev1.Taint{{Key: "sku", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: ConditionGPUUnhealthy, Status: corev1.ConditionFalse}}
		for _, h := range handlers {
			n.Status.RuntimeHandlers = append(n.Status.RuntimeHandlers, corev1.NodeRuntimeHandler{Name: h})
		}
		return []corev1.Node{n}
	}
	tests := []struct {
		name, manifest string
		nodes          []corev1.Node
		cluster        bool
		object, want   string // the failing object and a substring of its reason; "" all ok
	}{
		{"render's class", class("nvidia-cdi", "nvidia-cdi") + pod("nvidia-cdi"), nil, false, "", ""},
		{"a class of another name on the nvidia-cdi handler", class("gpu", "nvidia-cdi") + pod("gpu"), nil, false, "", ""},
		{"nvidia-cdi names the nvidia handler", class("nvidia-cdi", "nvidia") + pod("nvidia-cdi"), nil, false, "runtimeclass/nvidia-cdi", "RuntimeClass nvidia-cdi names handler nvidia"},
		{"the pod's class leads to the nvidia handler", class("gpu", "nvidia") + pod("gpu"), nil, false, "pod/p", "picks jit-cdi"},
		{"no handler of that name on k3s", class("nvidia-cdi", "nvidia-container-runtime.cdi") + pod("nvidia-cdi"), nil, false, "runtimeclass/nvidia-cdi", "handler nvidia-container-runtime.cdi is none of"},
		{"nodes report their handlers", class("nvidia-cdi", "nvidia-cdi") + pod("nvidia-cdi"), reporting("nvidia", "nvidia-experimental"), true, "runtimeclass/nvidia-cdi", "none of nvidia, nvidia-experimental (the pool Nodes' status.runtimeHandlers)"},
		{"nodes report the handler", class("nvidia-cdi", "nvidia-cdi") + pod("nvidia-cdi"), reporting("nvidia", "nvidia-cdi"), true, "", ""},
		{"missing in the cluster", pod("nvidia"), reporting("nvidia-cdi"), true, "pod/p", "runtimeClassName nvidia names no RuntimeClass in the cluster"},
		{"k3s's classes count for files", pod("nvidia"), nil, false, "pod/p", "picks jit-cdi"},
		{"a typo", class("nvidia-cdi", "nvidia-cdi") + pod("nvidia-cid"), nil, false, "pod/p", "runtimeClassName nvidia-cid names no RuntimeClass in the manifests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs, skipped, err := Read("m.yaml", strings.NewReader(tt.manifest))
			if err != nil {
				t.Fatal(err)
			}
			rep := Check(objs, skipped, CheckOptions{Pool: seedPool(t), Metrics: metrics, Nodes: tt.nodes, Cluster: tt.cluster})
			if tt.want == "" {
				if !rep.OK {
					t.Errorf("not OK: %+v", rep.Rows)
				}
				return
			}
			c := cell(t, rep, tt.object, ColumnOnPrem)
			if c.Verdict != VerdictFail || !strings.Contains(c.Reason, tt.want) || c.Fix == "" {
				t.Errorf("%s: %+v, want a failure saying %q with a fix", tt.object, c, tt.want)
			}
			if rep.OK {
				t.Error("report OK")
			}
		})
	}
}

// TestProfileHookReadOnlyEtcNvidia: on nodes whose spec carries toolkit
// 1.20.0's update-application-profile hook (Pool.ProfileHook), a GPU pod
// or the device plugin that mounts a read-only /etc/nvidia fails on-prem,
// naming the mount and the fix; elsewhere, or on other nodes, it passes.
func TestProfileHookReadOnlyEtcNvidia(t *testing.T) {
	t.Parallel()
	pod := func(mount string) string {
		return patchedClassDoc + "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  runtimeClassName: nvidia-cdi\n" +
			"  tolerations: [{key: sku, operator: Exists}]\n  nodeSelector: {nodeprep.dev/gpu-ready: \"true\"}\n" +
			"  containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}, volumeMounts: [" + mount + "]}]\n" +
			"  volumes: [{name: cfg, configMap: {name: plugin-config}}, {name: host, hostPath: {path: /srv/nv}}]\n"
	}
	plugin := patchedClassDoc + `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nvdp, namespace: kube-system}
spec:
  selector: {matchLabels: {app: nvdp}}
  template:
    metadata: {labels: {app: nvdp}}
    spec:
      runtimeClassName: nvidia-cdi
      nodeSelector: {payload: task_runner}
      tolerations: [{key: sku, operator: Exists}]
      containers:
      - name: nvidia-device-plugin-ctr
        image: nvcr.io/nvidia/k8s-device-plugin:v0.19.0
        args: [--config-file=/etc/nvidia/config.yaml]
        env: [{name: NVIDIA_DRIVER_ROOT, value: /run/opengl-driver}]
        volumeMounts: [{name: cfg, mountPath: /etc/nvidia}]
      volumes: [{name: cfg, configMap: {name: plugin-config}}]
`
	const hook = "the node's CDI spec carries toolkit 1.20.0's update-application-profile hook"
	tests := []struct {
		name, manifest, object string
		hook                   bool
		fails                  bool
	}{
		{"a ConfigMap at /etc/nvidia", pod("{name: cfg, mountPath: /etc/nvidia}"), "pod/p", true, true},
		{"a read-only hostPath at /etc/nvidia/", pod("{name: host, mountPath: /etc/nvidia/, readOnly: true}"), "pod/p", true, true},
		{"a writable hostPath at /etc/nvidia", pod("{name: host, mountPath: /etc/nvidia}"), "pod/p", true, false},
		{"a ConfigMap at /config", pod("{name: cfg, mountPath: /config}"), "pod/p", true, false},
		{"nodes without the hook", pod("{name: cfg, mountPath: /etc/nvidia}"), "pod/p", false, false},
		{"the device plugin's config at /etc/nvidia", plugin, "daemonset/kube-system/nvdp", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := seedPool(t)
			if tt.hook {
				pool.ProfileHook = hook
			}
			rep := checkString(t, pool, tt.manifest)
			c := cell(t, rep, tt.object, ColumnOnPrem)
			failed := c.Verdict == VerdictFail && strings.Contains(c.Reason, "read-only at /etc/nvidia") && strings.Contains(c.Reason, hook) &&
				strings.Contains(c.Fix, "1.20.1 or later")
			if failed != tt.fails {
				t.Errorf("%s: %+v, want the read-only /etc/nvidia failure: %t", tt.object, c, tt.fails)
			}
		})
	}
}
