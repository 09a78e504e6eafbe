package clustercmd

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nodeprep/nodeprep/cmd/nodeprep/app"
)

// writeKubeconfig writes a kubeconfig for server (the CA of srv) with
// user's YAML flow mapping into dir and returns its path.
func writeKubeconfig(t *testing.T, dir string, srv *httptest.Server, server, user string) string {
	t.Helper()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: x\n" +
		"clusters:\n- name: c\n  cluster: {server: \"" + server + "\", certificate-authority: ca.crt}\n" +
		"contexts:\n- name: x\n  context: {cluster: c, user: u}\n" +
		"users:\n- name: u\n  user: " + user + "\n"
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterCheckKubeconfigRedirect: an API server that answers
// `cluster check --kubeconfig` with 307 to another port, over http or
// https, is a failure (exit 69) naming the status and the other origin,
// and the other origin receives no request, so never the bearer token.
// The kubeconfig's exec plugin is never run and its tokenFile never read:
// each gets a warning naming it.
func TestClusterCheckKubeconfigRedirect(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	const token = "clustercmd-redirect-token"
	for _, tls := range []bool{false, true} {
		t.Run("tls="+strconv.FormatBool(tls), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			requests, tokens := 0, 0
			count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				requests++
				if strings.Contains(r.Header.Get("Authorization"), token) {
					tokens++
				}
				mu.Unlock()
				_, _ = w.Write([]byte(`{"metadata":{},"items":[]}`))
			})
			other := httptest.NewServer(count)
			if tls {
				other = httptest.NewTLSServer(count)
			}
			defer other.Close()
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
			}))
			defer srv.Close()
			dir := t.TempDir()
			mark := filepath.Join(dir, "exec-ran")
			kc := writeKubeconfig(t, dir, srv, srv.URL, fmt.Sprintf(`{token: %s, tokenFile: %s, exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, "touch %s"]}}`,
				token, filepath.Join(dir, "token"), mark))
			_, errOut, code := runGuarded(t, context.Background(), strings.NewReader(""), "--config", cfg, "cluster", "check", "--kubeconfig", kc)
			if code != app.ExitUnavailable || !strings.Contains(errOut, "307 Temporary Redirect to "+other.URL) || !strings.Contains(errOut, "follows no redirect") {
				t.Errorf("exit %d, want %d naming the redirect to %s\n%s", code, app.ExitUnavailable, other.URL, errOut)
			}
			mu.Lock()
			defer mu.Unlock()
			if requests != 0 || tokens != 0 {
				t.Errorf("the other origin received %d requests, %d with the token; want none", requests, tokens)
			}
			if strings.Contains(errOut, token) {
				t.Errorf("the token is in the output\n%s", errOut)
			}
			for _, w := range []string{"tokenFile is not supported", "exec is not supported"} {
				if !strings.Contains(errOut, w) {
					t.Errorf("no warning %q\n%s", w, errOut)
				}
			}
			if _, err := os.Stat(mark); err == nil {
				t.Error("the exec plugin ran")
			}
		})
	}
}

// TestClusterCheckKubeconfigLargeLists: a cluster of 2,000 Deployments
// (about 5 MB) and 100,000 Nodes (about 6 MB), each list over one
// response's 4 MiB, is read in pages and judged: exit 1 for the pool
// node's missing report, not 69 for a list cut short. The Nodes are
// asked for by the pool label; the server here ignores the selector, and
// the other 99,999 are left out all the same.
func TestClusterCheckKubeconfigLargeLists(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	var mu sync.Mutex
	var selectors []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, item := 0, func(int) string { return "" }
		if r.URL.Path == "/api/v1/nodes" {
			mu.Lock()
			selectors = append(selectors, r.URL.Query().Get("labelSelector"))
			mu.Unlock()
		}
		switch r.URL.Path {
		case "/apis/apps/v1/deployments":
			n, item = 2000, func(i int) string {
				return fmt.Sprintf(`{"metadata":{"name":"d%d","namespace":"default"},"spec":{"template":{"spec":{"containers":[{"name":"c","image":"registry.example/app:1","args":["%s"]}]}}}}`, i, strings.Repeat("x", 2400))
			}
		case "/api/v1/nodes":
			n, item = 100000, func(i int) string {
				labels := `{"kubernetes.io/os":"linux"}`
				if i == 99999 {
					labels = `{"payload":"task_runner"}`
				}
				return fmt.Sprintf(`{"metadata":{"name":"node-%06d","labels":%s}}`, i, labels)
			}
		}
		q := r.URL.Query()
		start, _ := strconv.Atoi(q.Get("continue"))
		limit := n
		if s := q.Get("limit"); s != "" {
			limit, _ = strconv.Atoi(s)
		}
		end := min(n, start+limit)
		var b strings.Builder
		b.WriteString(`{"metadata":{`)
		if end < n {
			fmt.Fprintf(&b, `"continue":"%d"`, end)
		}
		b.WriteString(`},"items":[`)
		for i := start; i < end; i++ {
			if i > start {
				b.WriteByte(',')
			}
			b.WriteString(item(i))
		}
		b.WriteString("]}")
		_, _ = w.Write([]byte(b.String()))
	}))
	defer srv.Close()
	kc := writeKubeconfig(t, t.TempDir(), srv, srv.URL, "{token: t}")
	out, errOut, code := runGuarded(t, context.Background(), strings.NewReader(""), "--config", cfg, "cluster", "check", "--kubeconfig", kc)
	if code != 1 || !strings.Contains(out, "node/node-099999") || !strings.Contains(out, "nodeprep health does not report to this Node") {
		t.Errorf("exit %d, want 1 judging node-099999\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "node-000000") {
		t.Errorf("judged Nodes outside the pool\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(selectors) != 200 || selectors[0] != "payload=task_runner" {
		t.Errorf("%d pages of Nodes with selectors %q…; want 200 (500 a page) selecting payload=task_runner", len(selectors), selectors[:min(3, len(selectors))])
	}
}
