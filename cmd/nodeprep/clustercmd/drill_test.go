package clustercmd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestDrillUnreachable: with the API server gone, the drill's dry run and
// its --restore fail with exit 69 naming the listing that failed, and
// print no report (there is nothing to report), in text and in JSON.
func TestDrillUnreachable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	kc := writeKubeconfig(t, t.TempDir(), srv, srv.URL, "{token: x}")
	srv.Close() // connection refused from here on
	cfg := filepath.Join(clusterCorpus, "seed-sku", "config.yaml")
	for _, args := range [][]string{
		{"--restore"},
		{"--restore", "-o", "json"},
		{},
		{"-o", "json"},
	} {
		argv := append([]string{"--config", cfg, "cluster", "drill", "--kubeconfig", kc}, args...)
		out, errOut, code := runGuarded(t, context.Background(), strings.NewReader(""), argv...)
		if code != 69 || out != "" || !strings.Contains(errOut, "listing the nodes") || strings.Contains(errOut, "panic") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 69, nothing on stdout, the failed listing named", args, code, out, errOut)
		}
	}
}
