package cluster

import (
	"strings"
	"testing"
)

// TestPodPathRuntimeClass: with the device plugin's envvar strategy, a GPU
// pod gets the patched spec only through the nvidia-cdi class (issue 18's
// matrix: envvar works on nvidia-cdi, fails on runc and on nvidia, whose
// mode auto picks jit-cdi or legacy); with a CDI strategy containerd
// injects the devices itself and the class does not matter. The plugin's
// own pods need nvidia-cdi whatever its strategy.
func TestPodPathRuntimeClass(t *testing.T) {
	t.Parallel()
	pod := func(rc string) string {
		s := patchedClassDoc + "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]\n  tolerations: [{key: sku, operator: Exists}]\n  nodeSelector: {nodeprep.dev/gpu-ready: \"true\"}\n"
		if rc != "" {
			s += "  runtimeClassName: " + rc + "\n"
		}
		return s
	}
	values := func(strategy, rc string) string {
		s := "deviceListStrategy: " + strategy + "\nnvidiaDriverRoot: /run/opengl-driver\ntolerations: [{key: sku, operator: Exists}]\nnodeSelector: {payload: task_runner}\n" +
			"affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: payload, operator: In, values: [task_runner]}]}]}}}\n"
		if rc != "" {
			s += "runtimeClassName: " + rc + "\n"
		}
		return s + "---\n"
	}
	tests := []struct {
		name, manifest string
		pod, plugin    string // "" ok, else a substring of the on-prem reason
	}{
		{"nvidia-cdi, envvar", values("envvar", "nvidia-cdi") + pod("nvidia-cdi"), "", ""},
		{"nvidia, envvar", values("envvar", "nvidia-cdi") + pod("nvidia"), "picks jit-cdi (toolkit 1.18 and later) or legacy", ""},
		{"no class, envvar by default", pod(""), "node's default runtime (runc) ignores NVIDIA_VISIBLE_DEVICES", ""},
		{"another class", values("volume-mounts", "nvidia-cdi") + pod("kata"), "runtimeClassName kata is not nvidia-cdi", ""},
		{"nvidia, cdi-cri: containerd injects", values("cdi-cri", "nvidia-cdi") + pod("nvidia"), "", "the plugin's own CDI spec"},
		{"plugin on nvidia", values("envvar", "nvidia") + pod("nvidia-cdi"), "", "the plugin gets no NVML"},
		{"plugin without class", values("envvar", "") + pod("nvidia-cdi"), "", "the plugin has no runtimeClassName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := checkString(t, seedPool(t), tt.manifest)
			judge := func(object, want string) {
				c := cell(t, r, object, ColumnOnPrem)
				switch {
				case want == "" && c.Verdict != VerdictOK:
					t.Errorf("%s: %+v, want ok", object, c)
				case want != "" && (c.Verdict != VerdictFail || !strings.Contains(c.Reason, want)):
					t.Errorf("%s: %+v, want a failure saying %q", object, c, want)
				case want != "" && strings.Contains(want, "runtime") && !strings.Contains(c.Fix, "runtimeClassName: nvidia-cdi"):
					t.Errorf("%s: fix %q does not name nvidia-cdi", object, c.Fix)
				}
			}
			judge("pod/p", tt.pod)
			if strings.Contains(tt.manifest, "deviceListStrategy") {
				judge("helmvalues/m.yaml", tt.plugin)
			}
		})
	}
}
