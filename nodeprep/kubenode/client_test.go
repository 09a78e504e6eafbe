package kubenode

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// TestResponseLimit: a response body of bounded.MaxAPIResponse bytes is
// read and decoded; a longer one is refused (unavailable, too large), not
// read to its end, nor cut short and decoded.
func TestResponseLimit(t *testing.T) {
	t.Parallel()
	body := func(n int) string { return `{"a":"` + strings.Repeat("x", n-len(`{"a":""}`)) + `"}` }
	for _, tt := range []struct {
		name string
		size int
		want error
	}{
		{"at the limit", bounded.MaxAPIResponse, nil},
		{"one byte over", bounded.MaxAPIResponse + 1, bounded.ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(body(tt.size)))
			}))
			defer srv.Close()
			u, _ := url.Parse(srv.URL)
			api := &API{server: u, http: srv.Client()}
			var out struct{ A string }
			err := api.Get(context.Background(), "/api/v1/nodes", &out)
			if tt.want == nil {
				if err != nil || len(out.A) != tt.size-len(`{"a":""}`) {
					t.Errorf("Get = %v, %d bytes decoded", err, len(out.A))
				}
				return
			}
			if !errors.Is(err, tt.want) || !errors.Is(err, fault.ErrUnavailable) {
				t.Errorf("Get = %v; want unavailable, %v", err, tt.want)
			}
		})
	}
}

// TestLoadNotRegular: a kubeconfig that is a FIFO is refused at once as
// malformed input (not waited on), as is one over bounded.MaxKubeconfig.
func TestLoadNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "agent/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "agent/big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, bounded.MaxKubeconfig+1); err != nil {
		t.Fatal(err)
	}
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]error{"/agent/fifo": bounded.ErrNotRegular, "/agent/big": bounded.ErrTooLarge} {
		done := make(chan error, 1)
		go func() { _, err := Load(root, file); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, want) || !errors.Is(err, fault.ErrMalformed) {
				t.Errorf("Load(%s) = %v; want malformed, %v", file, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%s) blocked", file)
		}
	}
}
