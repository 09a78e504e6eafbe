package kubenode

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// origin is an httptest server that counts the requests it receives and
// those that carry an Authorization header, and answers as an API server
// would (a Node for a Node's path, an empty list otherwise).
type origin struct {
	*httptest.Server
	mu             sync.Mutex
	requests, auth int
}

func newOrigin(t *testing.T, tls bool) *origin {
	o := &origin{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests++
		if r.Header.Get("Authorization") != "" {
			o.auth++
		}
		o.mu.Unlock()
		if strings.Contains(r.URL.Path, "/nodes/") {
			_, _ = w.Write([]byte(`{"metadata":{"name":"gpu-1"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"metadata":{},"items":[]}`))
	})
	if tls {
		o.Server = httptest.NewTLSServer(h)
	} else {
		o.Server = httptest.NewServer(h)
	}
	t.Cleanup(o.Close)
	return o
}

func (o *origin) counts() (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests, o.auth
}

// redirecting is an https API server that answers every request with
// code and a Location on target (same path).
func redirecting(t *testing.T, code int, target string) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.RequestURI(), code)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func caPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// kubeletPair is a self-signed kubelet client certificate and key for
// node (testkit.KubeletClientCert).
func kubeletPair(t *testing.T, node string) (cert, key []byte) {
	t.Helper()
	return testkit.KubeletClientCert(t, node)
}

// TestNoRedirectFollowed: an API server that redirects (301, 302, 303,
// 307, 308) to another origin, over http or https, gets a failure that
// names the status and that origin; the other origin receives no request,
// so neither the bearer token of `cluster check --kubeconfig` nor the
// Node report of node-report reaches it.
func TestNoRedirectFollowed(t *testing.T) {
	t.Parallel()
	const token = "redirect-test-token"
	for _, tls := range []bool{false, true} {
		for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
			t.Run(fmt.Sprintf("tls=%t/%d", tls, code), func(t *testing.T) {
				t.Parallel()
				other := newOrigin(t, tls)
				srv := redirecting(t, code, other.URL)
				api, err := NewAPI(Credential{Server: srv.URL, CA: caPEM(srv), Token: token})
				if err != nil {
					t.Fatal(err)
				}
				defer api.Close()
				var out any
				err = api.Get(context.Background(), "/api/v1/nodes", &out)
				if !errors.Is(err, ErrRedirect) || !errors.Is(err, fault.ErrUnavailable) ||
					!strings.Contains(err.Error(), strconv.Itoa(code)) || !strings.Contains(err.Error(), other.URL) {
					t.Errorf("Get = %v; want unavailable, ErrRedirect, naming %d and %s", err, code, other.URL)
				}
				err = api.List(context.Background(), "/apis/apps/v1/deployments", nil, func(json.RawMessage) error { return nil })
				if !errors.Is(err, ErrRedirect) {
					t.Errorf("List = %v; want ErrRedirect", err)
				}

				cert, key := kubeletPair(t, "gpu-1")
				c, err := New(Credential{Server: srv.URL, CA: caPEM(srv), Cert: cert, Key: key})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if res, err := c.Report(context.Background(), Health{Ready: true, Reason: ReasonHealthy, Now: time.Now()}); !errors.Is(err, ErrRedirect) {
					t.Errorf("Report = %+v, %v; want a failure wrapping ErrRedirect", res, err)
				}
				if n, auth := other.counts(); n != 0 || auth != 0 {
					t.Errorf("the other origin received %d requests, %d with an Authorization header; want 0", n, auth)
				}
			})
		}
	}
}

// TestErrorBodyTrimmed: an error response's body is kept in the
// APIError's message as its start on one line, with how much was left
// out; a Status object's message is kept whole.
func TestErrorBodyTrimmed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, body, want string
		max              int
	}{
		{"4 MB body", strings.Repeat("x", 4<<20), "and the rest unread)", maxErrorText + 60},
		{"100 KB of lines", strings.Repeat("line\n", 20000), "bytes more and the rest unread", maxErrorText + 60},
		{"10 KB", strings.Repeat("y", 10000), "(9600 bytes more)", maxErrorText + 60},
		{"a Status", `{"kind":"Status","reason":"Forbidden","message":"nodes \"gpu-1\" is forbidden"}`, `nodes "gpu-1" is forbidden`, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			api, err := NewAPI(Credential{Server: srv.URL, CA: caPEM(srv)})
			if err != nil {
				t.Fatal(err)
			}
			defer api.Close()
			err = api.Get(context.Background(), "/api/v1/nodes", nil)
			var ae *APIError
			if !errors.As(err, &ae) || ae.Code != 500 {
				t.Fatalf("Get = %v; want an APIError 500", err)
			}
			if len(ae.Message) > tt.max || strings.Contains(ae.Message, "\n") || !strings.Contains(ae.Message, tt.want) {
				t.Errorf("message of %d bytes, want at most %d on one line containing %q: %.200q", len(ae.Message), tt.max, tt.want, ae.Message)
			}
		})
	}
}

// listServer serves n objects at every path in pages, as the API server
// pages a LIST: limit objects from the continue token on (all of them
// when there is no limit); each object is item(i). It records the limits
// asked for. A page of more than bounded.MaxAPIResponse bytes is served
// as it is (the client must ask for smaller ones).
type listServer struct {
	n    int
	item func(i int) string
	mu   sync.Mutex
	lims []int
}

func (l *listServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	start, _ := strconv.Atoi(q.Get("continue"))
	limit := l.n
	if s := q.Get("limit"); s != "" {
		limit, _ = strconv.Atoi(s)
	}
	l.mu.Lock()
	l.lims = append(l.lims, limit)
	l.mu.Unlock()
	end := min(l.n, start+limit)
	var b strings.Builder
	b.WriteString(`{"kind":"List","metadata":{`)
	if end < l.n {
		fmt.Fprintf(&b, `"continue":"%d"`, end)
	}
	b.WriteString(`},"items":[`)
	for i := start; i < end; i++ {
		if i > start {
			b.WriteByte(',')
		}
		b.WriteString(l.item(i))
	}
	b.WriteString("]}")
	_, _ = w.Write([]byte(b.String()))
}

// TestListPaged: List reads 100,000 Nodes (about 7 MB, over one
// response's bounded.MaxAPIResponse) in pages of ListPageSize and calls
// item with each, in order; objects of 20 KB each are asked for again in
// smaller pages when a page of ListPageSize is over the limit.
func TestListPaged(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		n        int
		item     func(int) string
		maxLimit int
	}{
		{"100,000 Nodes", 100000, func(i int) string { return fmt.Sprintf(`{"metadata":{"name":"node-%06d"}}`, i) }, ListPageSize},
		{"1,000 objects of 20 KB", 1000, func(i int) string {
			return fmt.Sprintf(`{"metadata":{"name":"node-%06d","annotations":{"a":"%s"}}}`, i, strings.Repeat("a", 20000))
		}, ListPageSize},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ls := &listServer{n: tt.n, item: tt.item}
			srv := httptest.NewTLSServer(ls)
			defer srv.Close()
			api, err := NewAPI(Credential{Server: srv.URL, CA: caPEM(srv)})
			if err != nil {
				t.Fatal(err)
			}
			defer api.Close()
			next := 0
			err = api.List(context.Background(), "/api/v1/nodes", nil, func(raw json.RawMessage) error {
				var o struct{ Metadata struct{ Name string } }
				if err := json.Unmarshal(raw, &o); err != nil {
					return err
				}
				if want := fmt.Sprintf("node-%06d", next); o.Metadata.Name != want {
					return fmt.Errorf("object %d is %q, want %q", next, o.Metadata.Name, want)
				}
				next++
				return nil
			})
			if err != nil || next != tt.n {
				t.Fatalf("List = %v after %d objects; want %d", err, next, tt.n)
			}
			for _, l := range ls.lims {
				if l < 1 || l > tt.maxLimit {
					t.Fatalf("limits asked for: %v; want each in 1..%d", ls.lims, tt.maxLimit)
				}
			}
		})
	}
}

// TestListBounds: a list whose pages add up to more than maxList, a page
// that is one object over bounded.MaxAPIResponse, a server that gives
// the same continue token again or a token it gave before (a cycle of
// empty pages), and one that gives empty pages with new tokens without
// end (each page counts as at least minPageCharge) fail clearly: unavailable, naming what
// was too large or wrong, never "unexpected end of JSON input".
func TestListBounds(t *testing.T) {
	// Not parallel: it lowers maxList.
	defer func(m int) { maxList = m }(maxList)
	maxList = 2 << 20
	huge := strings.Repeat("h", bounded.MaxAPIResponse)
	for _, tt := range []struct {
		name string
		h    http.Handler
		want []string
	}{
		{"pages over the total", &listServer{n: 1 << 30, item: func(i int) string {
			return fmt.Sprintf(`{"metadata":{"name":"n%d","annotations":{"a":"%s"}}}`, i, strings.Repeat("a", 1000))
		}},
			[]string{"the list is over the 2 MiB nodeprep reads of one list", "file too large"}},
		{"one object over a response", &listServer{n: 2, item: func(int) string { return `{"metadata":{"name":"` + huge + `"}}` }},
			[]string{"more than the 4 MiB nodeprep reads"}},
		{"same continue token", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"metadata":{"continue":"x"},"items":[]}`))
		}), []string{"same continue token"}},
		{"two continue tokens in turn", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next := "a"
			if r.URL.Query().Get("continue") == "a" {
				next = "b"
			}
			_, _ = w.Write([]byte(`{"metadata":{"continue":"` + next + `"},"items":[]}`))
		}), []string{"a continue token it gave before"}},
		{"empty pages with new tokens forever", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.Atoi(r.URL.Query().Get("continue"))
			_, _ = w.Write([]byte(`{"metadata":{"continue":"` + strconv.Itoa(n+1) + `"},"items":[]}`))
		}), []string{"the list is over the 2 MiB nodeprep reads of one list after 513 pages", "file too large"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(tt.h)
			defer srv.Close()
			api, err := NewAPI(Credential{Server: srv.URL, CA: caPEM(srv)})
			if err != nil {
				t.Fatal(err)
			}
			defer api.Close()
			err = api.List(context.Background(), "/api/v1/nodes", nil, func(json.RawMessage) error { return nil })
			if !errors.Is(err, fault.ErrUnavailable) || strings.Contains(fmt.Sprint(err), "unexpected end") {
				t.Fatalf("List = %v; want unavailable", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("List = %v; want it to say %q", err, w)
				}
			}
		})
	}
}

// FuzzOneLine: whatever an error body holds, OneLine gives one line of
// valid UTF-8 (when the body is), without control characters, at most
// max bytes of the body and the note of what was cut.
func FuzzOneLine(f *testing.F) {
	f.Add("nodes \"gpu-1\" is forbidden\n", 10, false)
	f.Add(strings.Repeat("é", 300), 401, true)
	f.Add("\x00\x1b[31mred\x7f", 3, false)
	f.Fuzz(func(t *testing.T, s string, max int, more bool) {
		if max < 0 || max > 1<<16 {
			return
		}
		got := OneLine(s, max, more)
		if strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Errorf("OneLine(%q) = %q holds a control character", s, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Errorf("OneLine(%q) = %q is not valid UTF-8", s, got)
		}
		if len(got) > max+len(" … (99999999999 bytes more and the rest unread)") {
			t.Errorf("OneLine(%d bytes, %d) = %d bytes", len(s), max, len(got))
		}
	})
}
