package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// ModuleDir returns the directory of module (as `go mod download -json`
// reports it: the module cache's copy, downloaded when missing) at the
// version the tools module component requires. The CRDs of Karpenter and
// KEDA are read from there, so they always match the programs built from
// the same pin. It marks t Unavailable when go cannot give it.
func ModuleDir(t testing.TB, component, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = filepath.Join(testkit.RepoRoot(t), "testdata", "tools", component)
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Error != "" {
		err = fmt.Errorf("%s", m.Error)
	}
	if err == nil && m.Dir == "" {
		err = fmt.Errorf("no directory in %s", out)
	}
	if err != nil {
		Unavailable(t, fmt.Errorf("the source of %s (tools module %s): go mod download: %w", module, component, err))
	}
	return m.Dir
}

// InstallCRDs creates the CustomResourceDefinitions of the YAML files
// (one CRD each, as controller-gen writes them) on api and waits (at most
// a minute) until each is Established, failing t otherwise.
func InstallCRDs(t testing.TB, api *APIServer, files ...string) {
	t.Helper()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		var meta struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(js, &meta); err != nil || meta.Metadata.Name == "" {
			t.Fatalf("reading %s: no metadata.name (%v)", f, err)
		}
		api.MustDo(t, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "", js)
		names = append(names, meta.Metadata.Name)
	}
	for _, name := range names {
		for deadline := time.Now().Add(time.Minute); ; {
			var crd struct {
				Status struct {
					Conditions []struct{ Type, Status string } `json:"conditions"`
				} `json:"status"`
			}
			established := false
			if json.Unmarshal(api.MustDo(t, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, "", nil), &crd) == nil {
				for _, c := range crd.Status.Conditions {
					established = established || c.Type == "Established" && c.Status == "True"
				}
			}
			if established {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not Established after a minute", name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// KarpenterModule is the module whose kwok provider the tools module
// Karpenter builds; its CRDs come from its source.
const KarpenterModule = "sigs.k8s.io/karpenter"

// KarpenterInstance is Karpenter's kwok provider started by StartKarpenter.
type KarpenterInstance struct {
	// Log is its log file.
	Log string
	// Done is closed when it exits.
	Done <-chan struct{}
}

// StartKarpenter installs Karpenter's CRDs (NodePool, NodeClaim,
// NodeOverlay, CapacityBuffer from pkg/apis/crds; KWOKNodeClass from
// kwok/apis/crds, all of the pinned module) on api, creates the
// KWOKNodeClass "default", and runs the kwok provider (tools module
// Karpenter) as a cluster admin with leader election off, loopback-free
// ports of its own, and the instance types of instanceTypes (the JSON of
// the provider's instance_types.json, read through
// INSTANCE_TYPES_FILE_PATH; "" keeps the provider's own list). It returns
// once the provider's /readyz answers (its CRDs found, its caches synced;
// at most 2 minutes) and stops it with t.Cleanup. The nodes it launches
// are Node objects annotated kwok.x-k8s.io/node=fake: a kwok controller
// (StartKwok) makes them Ready and runs their pods.
func StartKarpenter(t testing.TB, api *APIServer, instanceTypes string) *KarpenterInstance {
	t.Helper()
	prog := Tool(t, Karpenter, "kwok")
	src := ModuleDir(t, Karpenter, KarpenterModule)
	crds, _ := filepath.Glob(filepath.Join(src, "pkg", "apis", "crds", "*.yaml"))
	crds = append(crds, filepath.Join(src, "kwok", "apis", "crds", "karpenter.kwok.sh_kwoknodeclasses.yaml"))
	InstallCRDs(t, api, crds...)
	api.MustDo(t, http.MethodPost, "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses", "", map[string]any{
		"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": map[string]any{"name": "default"},
	})
	dir := controlPlaneDir(t, "karpenter-")
	env := []string{
		"KUBECONFIG=" + api.AdminKubeconfig(t, dir),
		"DISABLE_LEADER_ELECTION=true",
		fmt.Sprintf("METRICS_PORT=%d", freePort(t)),
		"LOG_LEVEL=debug",
	}
	health := freePort(t)
	env = append(env, fmt.Sprintf("HEALTH_PROBE_PORT=%d", health))
	if strings.TrimSpace(instanceTypes) != "" {
		f := filepath.Join(dir, "instance-types.json")
		if err := os.WriteFile(f, []byte(instanceTypes), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "INSTANCE_TYPES_FILE_PATH="+f)
	}
	done := startEnv(t, dir, "karpenter", prog, env)
	k := &KarpenterInstance{Log: filepath.Join(dir, "karpenter.log"), Done: done}
	waitHTTP(t, "karpenter", fmt.Sprintf("http://127.0.0.1:%d/readyz", health), done, k.Log)
	return k
}

// LogTail is the end of its log (at most 4000 bytes), for a failure's
// message.
func (k *KarpenterInstance) LogTail() string { return logTail(k.Log) }
