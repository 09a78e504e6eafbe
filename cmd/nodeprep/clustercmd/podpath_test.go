package clustercmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
)

// TestRenderEmitsTheProvenPath: what `cluster render` hands the device
// plugin and the workloads is the combination issue 18's pod-path matrix
// proves (deviceListStrategy envvar on the nvidia-cdi runtime class), the
// class the node's pod-path check (podpath.Judge) calls the one that
// serves the patched spec; and `cluster check` on the render passes.
func TestRenderEmitsTheProvenPath(t *testing.T) {
	t.Parallel()
	if cluster.PatchedRuntimeClass != podpath.PatchedClass {
		t.Fatalf("cluster renders %q, the node proves %q", cluster.PatchedRuntimeClass, podpath.PatchedClass)
	}
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "render", "--node-class=karpenter.k8s.aws/EC2NodeClass/gpu",
		"--prometheus-address=http://prometheus.monitoring.svc:9090", "--scrape-job=gpu-pool", "--queue-name=gpu-jobs", "--queue-host=amqp://rabbitmq.queues.svc:5672/", "--image=registry.example/gpu/app:1.2", "--fallback-instance-types=g5.xlarge")
	if code != 0 {
		t.Fatalf("render: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"\ndeviceListStrategy: envvar\n", "\nruntimeClassName: nvidia-cdi\n", "      runtimeClassName: nvidia-cdi\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q", strings.TrimSpace(want))
		}
	}
	if strings.Contains(out, "runtimeClassName: nvidia\n") {
		t.Error("render still emits runtimeClassName nvidia, whose mode auto bypasses the patched spec")
	}
	rendered := filepath.Join(t.TempDir(), "render.yaml")
	if err := os.WriteFile(rendered, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := clusterRun(t, "", "--config", cfg, "cluster", "check", rendered); code != 0 {
		t.Errorf("cluster check of the render: exit %d\n%s%s", code, out, errOut)
	}
}
