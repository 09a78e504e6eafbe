package main_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestHealthNodeReportPolicy runs health with the kubelet's kubeconfig
// pointing at API servers that misbehave: one that redirects the report
// to another origin (the report fails and says so, never "told the Node",
// and the other origin receives nothing), one that answers with a 4 MB
// error body (logged as its start on one line), and one that accepts the
// report from a kubeconfig with an exec plugin (the plugin is not run;
// health logs a warning naming it). The verdict is health's own either
// way (not ready, exit 1: no up ran, so there is no GPU baseline).
func TestHealthNodeReportPolicy(t *testing.T) {
	t.Parallel()
	icd, egl := lavapipe(t)
	good := []string{"VK_DRIVER_FILES=" + icd, "__EGL_VENDOR_LIBRARY_FILENAMES=" + egl}

	var mu sync.Mutex
	otherRequests := 0
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		otherRequests++
		mu.Unlock()
		_, _ = w.Write([]byte(`{"metadata":{"name":"gpu-node-1"}}`))
	}))
	defer other.Close()
	servers := map[string]http.HandlerFunc{
		"redirect": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		},
		"error": func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(strings.Repeat("e", 4<<20)))
		},
		"exec": func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"metadata":{"name":"gpu-node-1"}}`))
		},
	}
	for name, h := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewTLSServer(h)
			defer srv.Close()
			root := hostCopy(t, "nixos-h200")
			agent := filepath.Join(root, "var/lib/rancher/k3s/agent")
			if err := os.MkdirAll(agent, 0o755); err != nil {
				t.Fatal(err)
			}
			cert, key := kubeletPair(t, "gpu-node-1")
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			mark := filepath.Join(t.TempDir(), "exec-ran")
			kc := testkit.KubeletKubeconfig(srv.URL, "server-ca.crt", "client-kubelet.crt", "client-kubelet.key")
			if name == "exec" {
				kc += "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/touch, args: [" + mark + "]}\n"
			}
			for f, b := range map[string][]byte{"server-ca.crt": ca, "client-kubelet.crt": cert, "client-kubelet.key": key, "kubelet.kubeconfig": []byte(kc)} {
				if err := os.WriteFile(filepath.Join(agent, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := run(t, good, "health", "--root", root, "--simulate", "dgx-h200", "--allow-cpu-adapter")
			if r.code != 1 || !strings.Contains(r.stdout, "not ready: inventory failed") {
				t.Fatalf("health: exit %d, want 1 (no GPU baseline) whatever the report met\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			switch name {
			case "redirect":
				if strings.Contains(r.stderr, "told the Node") || !strings.Contains(r.stderr, "the Node was not told the verdict") ||
					!strings.Contains(r.stderr, "307 Temporary Redirect to "+other.URL) {
					t.Errorf("a redirected report: want it logged as not told, naming the redirect\n%s", r.stderr)
				}
				mu.Lock()
				if otherRequests != 0 {
					t.Errorf("the other origin received %d requests", otherRequests)
				}
				mu.Unlock()
			case "error":
				if len(r.stderr) > 8<<10 || !strings.Contains(r.stderr, "the Node was not told the verdict") || !strings.Contains(r.stderr, "bytes more") {
					t.Errorf("a 4 MB error body: %d bytes of stderr, want under 8 KiB saying how much was cut\n%.3000s", len(r.stderr), r.stderr)
				}
			case "exec":
				if !strings.Contains(r.stderr, "told the Node") || !strings.Contains(r.stderr, "exec is not supported") {
					t.Errorf("a kubeconfig with an exec plugin: want the report told and a warning naming exec\n%s", r.stderr)
				}
				if _, err := os.Stat(mark); err == nil {
					t.Error("the exec plugin ran")
				}
			}
		})
	}
}

// kubeletPair is a self-signed kubelet client certificate and key for
// node (testkit.KubeletClientCert).
func kubeletPair(t *testing.T, node string) (cert, key []byte) {
	t.Helper()
	return testkit.KubeletClientCert(t, node)
}
