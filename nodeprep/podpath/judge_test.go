package podpath_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestPodPaths judges each host tree's runtime handlers the way the NVIDIA
// runtime treats a pod of the device plugin's envvar strategy
// (nodeprep/nvruntime's real-runtime test pins those rules).
func TestPodPaths(t *testing.T) {
	t.Parallel()
	const spec = "/var/run/cdi/nvidia-container-toolkit.json"
	type want struct {
		code string
		sev  cdi.Severity
		msg  string
	}
	tests := []struct {
		scenario string
		served   []string // handlers whose pods get the patched spec
		want     []want
	}{
		{scenario: "k3s-containerd-ok", served: []string{"nvidia-cdi"}, want: []want{
			{podpath.CodeBypass, cdi.SeverityWarning, "runtimeClassName nvidia and the device plugin's envvar strategy"},
		}},
		{scenario: "nvruntime-auto-only", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, "it picks jit-cdi or legacy"},
			{podpath.CodeNone, cdi.SeverityError, "give pods runtimeClassName nvidia-cdi"},
		}},
		{scenario: "nvruntime-mode-cdi", served: []string{"nvidia"}},
		{scenario: "nvruntime-spec-dirs", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, "runtimeClassName nvidia and"},
			{podpath.CodeBypass, cdi.SeverityError, `reads specs from ["/etc/cdi"]`},
			{podpath.CodeNone, cdi.SeverityError, ""},
		}},
		{scenario: "nvruntime-default-kind", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, "runtimeClassName nvidia and"},
			{podpath.CodeBypass, cdi.SeverityError, "k8s.device-plugin.nvidia.com/gpu=<id>"},
			{podpath.CodeNone, cdi.SeverityError, ""},
		}},
		{scenario: "nvruntime-cdi-handler-plain", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, "runtimeClassName nvidia and"},
			{podpath.CodeBypass, cdi.SeverityError, "point the nvidia-cdi handler's BinaryName at /usr/bin/nvidia-container-runtime.cdi"},
			{podpath.CodeNone, cdi.SeverityError, ""},
		}},
		{scenario: "nvruntime-bad-config", want: []want{
			{podpath.CodeNVRuntimeConfig, cdi.SeverityError, "/etc/nvidia-container-runtime/config.toml"},
		}},
		// Issue 32: the nvidia-cdi handler is written under the version 2
		// plugin in a version 3 file: the fix is to move its table, not to
		// use a runtime class containerd does not have.
		{scenario: "k3s-containerd-v2-table", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, `fix: the handler nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes, which containerd 2.x (config version 3) ignores; move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi in config-v3.toml.tmpl beside it (k3s rewrites config.toml at each start), then use runtimeClassName nvidia-cdi for GPU pods`},
			{podpath.CodeNone, cdi.SeverityError, `not what pods get; the handler nvidia-cdi is under plugins."io.containerd.grpc.v1.cri".containerd.runtimes, which containerd 2.x (config version 3) ignores; move it to plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia-cdi`},
		}},
		{scenario: "k3s-containerd-v3-table-in-v2", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, `the handler nvidia-cdi is under plugins."io.containerd.cri.v1.runtime".containerd.runtimes, which containerd 1.x (config version 2) ignores; move it to plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi`},
			{podpath.CodeNone, cdi.SeverityError, `move it to plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi`},
		}},
		// Issue 29: the GPU Operator's wrapper runs the runtime with the
		// toolkit's own config (mode auto), not /etc's (mode cdi).
		{scenario: "nvruntime-operator-wrapper", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, "(the runtime reads /usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml, set by NVIDIA_CTK_CONFIG_FILE_PATH in /usr/local/nvidia/toolkit/nvidia-container-runtime, not /etc/nvidia-container-runtime/config.toml)"},
			{podpath.CodeNone, cdi.SeverityError, ""},
		}},
		{scenario: "nvruntime-operator-wrapper-xdg", want: []want{
			{podpath.CodeBypass, cdi.SeverityError, "set by XDG_CONFIG_HOME in /usr/local/nvidia/toolkit/nvidia-container-runtime"},
			{podpath.CodeNone, cdi.SeverityError, ""},
		}},
		{scenario: "nvruntime-envvar-refused", served: []string{"nvidia-cdi"}, want: []want{
			{podpath.CodeEnvvarRefused, cdi.SeverityWarning, "accept-nvidia-visible-devices-envvar-when-unprivileged = false in /etc/nvidia-container-runtime/config.toml, which the runtime of handler nvidia-cdi reads"},
			{podpath.CodeBypass, cdi.SeverityWarning, "runtimeClassName nvidia and the device plugin's envvar strategy"},
		}},
		{scenario: "nvruntime-nixos-117", served: []string{"nvidia-cdi"}, want: []want{
			{podpath.CodeBypass, cdi.SeverityWarning, "it picks legacy (toolkit 1.17.8, before 1.18)"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			t.Parallel()
			root := testkit.LayeredTree(t, "fhs-ubuntu", tt.scenario)
			c, _, err := containerd.Load(root, containerd.Options{DataDir: "/var/lib/rancher/k3s"})
			if err != nil || c == nil {
				t.Fatalf("containerd.Load = %v, %v", c, err)
			}
			rep := podpath.Judge(root, c, "", spec)
			var served []string
			for _, p := range rep.Paths {
				if p.PatchedSpec {
					served = append(served, p.Handler)
				}
			}
			if !slices.Equal(served, tt.served) {
				t.Errorf("handlers serving the patched spec %v, want %v (%+v)", served, tt.served, rep.Paths)
			}
			if len(rep.Findings) != len(tt.want) {
				t.Fatalf("findings %v, want %d", rep.Findings, len(tt.want))
			}
			for i, w := range tt.want {
				f := rep.Findings[i]
				if f.Code != w.code || f.Severity != w.sev || !strings.Contains(f.Message, w.msg) {
					t.Errorf("finding %d = %v, want %s %s containing %q", i, f, w.sev, w.code, w.msg)
				}
			}
		})
	}
}

// TestPodPathsNoConfig: before k3s wrote its containerd config (or with an
// external runtime) nothing is judged.
func TestPodPathsNoConfig(t *testing.T) {
	t.Parallel()
	if rep := podpath.Judge(testkit.LayeredTree(t, "fhs-ubuntu", "nvruntime-auto-only"), nil, "", "/var/run/cdi/x.json"); len(rep.Findings) > 0 || len(rep.Paths) > 0 {
		t.Errorf("Judge(nil config) = %+v", rep)
	}
}
