package upstream

import (
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// KEDAModule is the module whose operator the tools module KEDA builds;
// its CRDs come from its source (config/crd/bases).
const KEDAModule = "github.com/kedacore/keda/v2"

// KEDANamespace is the namespace the operator keeps its own objects in
// (KEDA_CLUSTER_OBJECT_NAMESPACE, POD_NAMESPACE), as KEDA's chart names it.
const KEDANamespace = "keda"

// KEDAInstance is the KEDA operator started by StartKEDA.
type KEDAInstance struct {
	// Log is its log file.
	Log string
	// Done is closed when it exits.
	Done <-chan struct{}
}

// StartKEDA installs KEDA's CRDs (every file of the pinned module's
// config/crd/bases: the operator watches all of their kinds) and the
// namespace KEDANamespace on api, and runs the operator (tools module
// KEDA) as a cluster admin, watching every namespace, with its metrics,
// probe and gRPC metrics-service ports on free loopback ports and the
// gRPC service's certificate issued by api's CA (the operator refuses to
// start without one; KEDA's chart has cert rotation make it). It returns
// once the operator's /readyz answers (at most 2 minutes) and stops it
// with t.Cleanup.
//
// Only the operator runs: it alone scales ScaledJobs (its scale loop asks
// the triggers and creates the Jobs). KEDA's metrics API server serves
// ScaledObjects' HPAs and its admission webhooks only validate; neither
// takes part in a ScaledJob.
func StartKEDA(t testing.TB, api *APIServer) *KEDAInstance {
	t.Helper()
	prog := Tool(t, KEDA, "operator")
	src := ModuleDir(t, KEDA, KEDAModule)
	crds, _ := filepath.Glob(filepath.Join(src, "config", "crd", "bases", "*.yaml"))
	if len(crds) == 0 {
		t.Fatalf("no CRDs under %s/config/crd/bases", src)
	}
	InstallCRDs(t, api, crds...)
	api.MustDo(t, http.MethodPost, "/api/v1/namespaces", "", map[string]any{"metadata": map[string]any{"name": KEDANamespace}})
	dir := controlPlaneDir(t, "keda-")
	certs, caDir := filepath.Join(dir, "certs"), filepath.Join(dir, "ca")
	for _, d := range []string{certs, caDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cert, key := api.issue(t, pkix.Name{CommonName: "keda-operator"}, true)
	for name, data := range map[string][]byte{"ca.crt": api.CA, "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(certs, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	probe := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env := []string{
		"KUBECONFIG=" + api.AdminKubeconfig(t, dir),
		"WATCH_NAMESPACE=",
		"KEDA_CLUSTER_OBJECT_NAMESPACE=" + KEDANamespace,
		"POD_NAMESPACE=" + KEDANamespace,
	}
	done := startEnv(t, dir, "keda-operator", prog, env,
		"--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", freePort(t)),
		"--health-probe-bind-address="+probe,
		fmt.Sprintf("--metrics-service-bind-address=127.0.0.1:%d", freePort(t)),
		"--cert-dir="+certs, "--ca-dir="+caDir,
		"--zap-log-level=debug",
	)
	k := &KEDAInstance{Log: filepath.Join(dir, "keda-operator.log"), Done: done}
	waitHTTP(t, "keda-operator", "http://"+probe+"/readyz", done, k.Log)
	return k
}
