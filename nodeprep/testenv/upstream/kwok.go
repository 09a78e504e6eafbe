package upstream

import (
	"embed"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// KwokNodeAnnotation is the annotation (value KwokNodeValue) that marks a
// Node as one kwok plays the kubelet for: StartKwok's kwok manages only
// nodes that carry it. Karpenter's kwok cloud provider puts it (and the
// label of the same name) on every node it launches
// (sigs.k8s.io/karpenter kwok/cloudprovider/cloudprovider.go), so a test
// node made by hand with it and one Karpenter launches are treated alike.
const (
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	KwokNodeValue      = "fake"
)

//go:embed kwokstages/*.yaml
var kwokStages embed.FS

// KwokController is a kwok controller started by StartKwok against an APIServer.
type KwokController struct {
	// Dir holds kwok's kubeconfig, its stage files and its log (kwok.log).
	Dir string
}

// KwokOption changes how StartKwok runs kwok.
type KwokOption func(*kwokOptions)

type kwokOptions struct {
	stages []string
}

// WithKwokStages adds Stage documents (YAML, kwok.x-k8s.io/v1alpha1
// Stage, one or more per string separated by "---") to the stages
// StartKwok always loads; a test that needs pods to complete or nodes to
// fail adds its own. A stage whose name repeats a default one replaces
// nothing: both run.
func WithKwokStages(yaml ...string) KwokOption {
	return func(o *kwokOptions) { o.stages = append(o.stages, yaml...) }
}

// StartKwok starts kwok (sigs.k8s.io/kwok v0.8.0, the Kwok tools module)
// against api as a cluster admin, managing every Node annotated
// KwokNodeAnnotation=KwokNodeValue and the pods bound to those nodes, with
// the stage files under kwokstages/: a managed node turns Ready at once
// with the capacity and allocatable it was created with (so a test node
// created with nvidia.com/gpu: 8 in its status offers 8 GPUs), keeps its
// conditions' heartbeats fresh, a pod bound to it turns Running, and a
// pod being deleted goes. It waits until kwok's health endpoint answers
// (at most a minute) and stops kwok with t.Cleanup. It skips t (fails it
// under CI) when kwok cannot be built, and fails t when kwok exits or does
// not come up, with the end of its log.
func StartKwok(t testing.TB, api *APIServer, opts ...KwokOption) *KwokController {
	t.Helper()
	var o kwokOptions
	for _, opt := range opts {
		opt(&o)
	}
	prog := Tool(t, Kwok, "kwok")
	work, err := os.MkdirTemp("", "kwok-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	kubeconfig := api.AdminKubeconfig(t, work)

	var docs []string
	entries, err := kwokStages.ReadDir("kwokstages")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := kwokStages.ReadFile("kwokstages/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	docs = append(docs, o.stages...)
	config := filepath.Join(work, "stages.yaml")
	if err := os.WriteFile(config, []byte(strings.Join(docs, "\n---\n")), 0o600); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	// HOME in kwok's directory: kwok also loads ~/.kwok/kwok.yaml when it
	// exists, and a test must not depend on the home of whoever runs it.
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	done := start(t, work, "kwok", env, "HOME="+work, prog,
		"--kubeconfig="+kubeconfig, "--config="+config,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"="+KwokNodeValue,
		fmt.Sprintf("--server-address=127.0.0.1:%d", port),
		"--node-ip=10.0.0.1", "--cidr=10.0.0.1/16",
	)
	health := fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(time.Minute); ; {
		if resp, err := client.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-done:
			t.Fatalf("kwok exited before it was healthy:\n%s", logTail(filepath.Join(work, "kwok.log")))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kwok not healthy after a minute:\n%s", logTail(filepath.Join(work, "kwok.log")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &KwokController{Dir: work}
}

// Log is the end of kwok's log (at most 4000 bytes), for a failure's
// message.
func (k *KwokController) Log() string { return logTail(filepath.Join(k.Dir, "kwok.log")) }
