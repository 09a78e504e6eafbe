package kubenode

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// What nodeprep writes on its Node.
const (
	// ConditionType is nodeprep's node condition. It follows
	// node-problem-detector's convention for a problem condition: status
	// "True" means the problem is there (a GPU the node booted with is
	// lost or unhealthy, or the adapter self-test fails), "False" that
	// the GPUs are healthy.
	ConditionType = "GPUUnhealthy"
	// LabelGPUReady is the label the cluster schedules on: "true" while
	// nodeprep's last run found the node's GPUs ready, "false" otherwise.
	// GPU workloads require it to be "true" (nodeprep/cluster render).
	LabelGPUReady = "nodeprep.dev/gpu-ready"
	// The condition's reasons (UpperCamelCase, as Kubernetes reasons).
	ReasonHealthy  = "GPUsHealthy"
	ReasonGPULost  = "GPUMissingOrUnhealthy"
	ReasonSelftest = "AdapterSelftestFailed"
	ReasonNotReady = "NodeprepNotReady"
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// DefaultTimeout bounds one Report (all of its requests): the health
// timer runs every minute, and an API server that does not answer must
// not hold the host lock.
const DefaultTimeout = 10 * time.Second

// API is an authenticated JSON client of one API server.
type API struct {
	server   *url.URL
	http     *http.Client
	token    string
	warnings []string
}

// Warnings are the lines, one a field, that name what of the kubeconfig
// the client was loaded from (Load, LoadAPI) nodeprep does not support,
// and what it does instead (Selection.Warnings); the command prints them.
func (a *API) Warnings() []string { return a.warnings }

// Client talks to the API server as the kubelet: with its client
// certificate, about its own Node only.
type Client struct {
	*API
	node string
}

// Load reads the kubeconfig at host path file under root, with the files
// it names (a relative path is relative to the kubeconfig's directory, as
// clientcmd resolves it; an absolute one is a host path under root), and
// returns a Client for the node its client certificate names. The
// kubeconfig is read with bounded.MaxKubeconfig's limit, the files it
// names with bounded.MaxPEM's; neither is waited on when it is not a
// regular file. What of the kubeconfig nodeprep does not support is in
// the client's Warnings. Errors: fault.ErrUnavailable when the kubeconfig
// does not exist (the node has never registered) or a file it names
// cannot be read; fault.ErrMalformed for a file that is not a regular
// file (bounded.ErrNotRegular) or is over the limit (bounded.ErrTooLarge),
// a kubeconfig ParseKubeconfig refuses, PEM that does not parse, and a
// certificate that is not a kubelet's (see NodeName).
func Load(root *hostfs.Root, file string) (*Client, error) {
	cred, warnings, err := loadCredential(file, root.ReadFile, ParseKubeconfig)
	if err != nil {
		return nil, err
	}
	c, err := New(cred)
	if err != nil {
		return nil, fault.Malformed(fmt.Errorf("kubeconfig %s: %w", file, err))
	}
	c.warnings = warnings
	return c, nil
}

// LoadAPI is Load for a kubeconfig of any user (ParseAnyKubeconfig) and
// returns an API client with its credential (NewAPI). read reads the
// kubeconfig and the files it names: bounded.ReadFile for paths on this
// machine (a cluster's kubeconfig names the cluster, not a node's host
// tree), a hostfs.Root's ReadFile for host paths. Errors as Load's.
func LoadAPI(read ReadFunc, file string) (*API, error) {
	cred, warnings, err := loadCredential(file, read, ParseAnyKubeconfig)
	if err != nil {
		return nil, err
	}
	api, err := NewAPI(cred)
	if err != nil {
		return nil, fault.Malformed(fmt.Errorf("kubeconfig %s: %w", file, err))
	}
	api.warnings = warnings
	return api, nil
}

// ReadFunc reads the regular file at path, of at most limit bytes
// (bounded.ReadFile, hostfs.Root.ReadFile).
type ReadFunc func(path string, limit int64) ([]byte, error)

// loadCredential reads the kubeconfig at file and the files it names
// with read, selects its context with parse and returns its credential
// and the warnings about what of it nodeprep does not support, each
// prefixed with the file.
func loadCredential(file string, read ReadFunc, parse func([]byte) (*Selection, error)) (Credential, []string, error) {
	data, err := read(file, bounded.MaxKubeconfig)
	if err != nil {
		return Credential{}, nil, readError(fmt.Errorf("reading kubeconfig %s: %w", file, err))
	}
	sel, err := parse(data)
	if err != nil {
		return Credential{}, nil, fault.Malformed(fmt.Errorf("kubeconfig %s: %w", file, err))
	}
	cred, err := sel.Credential(func(what, ref string) ([]byte, error) {
		if !path.IsAbs(ref) {
			ref = path.Join(path.Dir(file), ref)
		}
		b, err := read(ref, bounded.MaxPEM)
		if err != nil {
			return nil, readError(fmt.Errorf("reading the %s that kubeconfig %s names: %w", what, file, err))
		}
		return b, nil
	})
	if err != nil {
		return Credential{}, nil, err
	}
	var warnings []string
	for _, w := range sel.Warnings {
		warnings = append(warnings, file+": "+w)
	}
	return cred, warnings, nil
}

// readError marks an error of reading a kubeconfig or a file it names:
// what is not a regular file or is over its limit is malformed input,
// anything else unavailable.
func readError(err error) error {
	if errors.Is(err, bounded.ErrNotRegular) || errors.Is(err, bounded.ErrTooLarge) {
		return fault.Malformed(err)
	}
	return fault.Unavailable(err)
}

// Credential is what New needs: the server's https URL, the PEM of its CA
// (nil: the system's roots) and the client certificate and key (PEM), or
// a bearer token (NewAPI only).
type Credential struct {
	Server     string
	ServerName string // TLS server name to verify, when not the URL's host
	CA         []byte
	Cert, Key  []byte
	Token      string
}

// New returns a Client for cred. Errors: a server that is not an https
// URL, CA or key-pair PEM that does not parse, and a certificate that is
// not a kubelet's (NodeName).
func New(cred Credential) (*Client, error) {
	if len(cred.Cert) == 0 {
		return nil, errors.New("no client certificate: nodeprep reports with the kubelet's certificate only")
	}
	api, leaf, err := newAPI(cred)
	if err != nil {
		return nil, err
	}
	node, err := NodeName(leaf)
	if err != nil {
		return nil, err
	}
	api.token = "" // the kubelet's identity is its certificate
	return &Client{API: api, node: node}, nil
}

// NewAPI returns a client of the API server with cred's client
// certificate or bearer token. Errors: those of New but the kubelet's
// identity.
func NewAPI(cred Credential) (*API, error) {
	api, _, err := newAPI(cred)
	return api, err
}

func newAPI(cred Credential) (*API, *x509.Certificate, error) {
	if err := checkServer(cred.Server); err != nil {
		return nil, nil, err
	}
	u, _ := url.Parse(cred.Server)
	u.User = nil // never a basic-authentication header (see ParseAnyKubeconfig)
	cfg := &tls.Config{ServerName: cred.ServerName, MinVersion: tls.VersionTLS12}
	var leaf *x509.Certificate
	if len(cred.Cert) > 0 || len(cred.Key) > 0 {
		pair, err := tls.X509KeyPair(cred.Cert, cred.Key)
		if err != nil {
			return nil, nil, fmt.Errorf("client certificate and key: %w", err)
		}
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if len(cred.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cred.CA) {
			return nil, nil, errors.New("CA: no PEM certificate in it")
		}
		cfg.RootCAs = pool
	}
	return &API{server: u, http: newHTTPClient(cfg), token: cred.Token}, leaf, nil
}

// newHTTPClient is the one HTTP client policy of every request nodeprep
// sends to an API server, with tlsConfig (the CA, the client certificate):
//
//   - no redirect is followed (CheckRedirect answers
//     http.ErrUseLastResponse, and do turns the 3xx into an error wrapping
//     ErrRedirect): an API server does not redirect its clients, and
//     following one would send the bearer token or present the client
//     certificate to the origin the Location names (net/http keeps the
//     Authorization header on a redirect to the same host on another
//     port, or from https to http), and would count a Node report
//     answered there as delivered;
//   - no proxy (Proxy nil; HTTPS_PROXY is not read): the kubeconfig's
//     server is the only origin it talks to;
//   - the TLS handshake is bounded (5 s); the caller's context bounds the
//     rest.
func newHTTPClient(tlsConfig *tls.Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 5 * time.Second}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// ErrRedirect is wrapped by the error of a request the API server
// answered with a redirect (a 3xx status): nodeprep follows none, so no
// credential and no report leaves for the origin it names.
var ErrRedirect = errors.New("nodeprep follows no redirect from the API server")

// Get reads path (e.g. "/api/v1/nodes") into out (JSON). Errors as
// Report's; a 404 is an *APIError with Code 404.
func (a *API) Get(ctx context.Context, path string, out any) error {
	return a.do(ctx, http.MethodGet, path, "", nil, out)
}

// Do sends one request: in (if not nil) marshalled to JSON with content
// type ctype, the success's body decoded into out (if not nil). Errors as
// Get's; a non-2xx status is an *APIError. The drill uses it to cordon,
// mark and restore Nodes and to create and delete its canary.
func (a *API) Do(ctx context.Context, method, path, ctype string, in, out any) error {
	return a.do(ctx, method, path, ctype, in, out)
}

// Node is the name of the Node this client may change.
func (c *Client) Node() string { return c.node }

// Close releases the client's idle connections.
func (a *API) Close() { a.http.CloseIdleConnections() }

// NodeName returns the node a kubelet client certificate belongs to: its
// subject is CN=system:node:<name> with O=system:nodes, the identity the
// Node authorizer grants a kubelet (Kubernetes docs, "Using Node
// Authorization"); k3s issues client-kubelet.crt so, for the name it
// registers with (node-name, or the hostname, with "-<id>" under
// with-node-id). Errors: any other subject.
func NodeName(cert *x509.Certificate) (string, error) {
	name, ok := strings.CutPrefix(cert.Subject.CommonName, nodeUserPrefix)
	if !ok || name == "" {
		return "", fmt.Errorf("client certificate CN %q is not a kubelet's (system:node:<name>)", cert.Subject.CommonName)
	}
	for _, o := range cert.Subject.Organization {
		if o == nodesGroup {
			return name, nil
		}
	}
	return "", fmt.Errorf("client certificate of %s is not in group %s (O=%s)", cert.Subject.CommonName, nodesGroup, strings.Join(cert.Subject.Organization, ","))
}

func checkServer(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("kubeconfig server %s: %w", serverText(s), errNotHTTPS)
	}
	return nil
}

// serverText is a server URL for a message, quoted, without its user
// information (user:password@, or a token as the user name), which is
// a credential: a URL that does not parse and has an '@' in it is not
// quoted at all.
func serverText(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil && strings.Contains(s, "@"):
		return "(not quoted: it does not parse as a URL and may hold a password)"
	case err != nil:
		return strconv.Quote(s)
	case u.User != nil:
		u.User = nil
		return strconv.Quote(u.String()) + " (its user information left out)"
	}
	return strconv.Quote(s)
}

// Reason is the condition's reason for a verdict: ReasonHealthy when
// ready, else by the nodeprep stage that failed (nodeprep.StageInventory
// "inventory": ReasonGPULost; nodeprep.StageSelftest "selftest":
// ReasonSelftest; any other: ReasonNotReady).
func Reason(ready bool, failedStage string) string {
	switch {
	case ready:
		return ReasonHealthy
	case failedStage == "inventory":
		return ReasonGPULost
	case failedStage == "selftest":
		return ReasonSelftest
	}
	return ReasonNotReady
}

// Health is what Report tells the Node.
type Health struct {
	Ready   bool      // the node's GPUs are ready
	Reason  string    // the condition's reason (Reason* constants)
	Message string    // the verdict, one line
	Now     time.Time // heartbeat time (and transition time on a change)
}

// Result is what Report did.
type Result struct {
	Node string `json:"node" yaml:"node"`
	// Condition is the condition as sent.
	Condition Condition `json:"condition" yaml:"condition"`
	// Changed is true when the condition's status or the label changed
	// in this report.
	Changed bool   `json:"changed" yaml:"changed"`
	Label   string `json:"label" yaml:"label"` // the label as sent, key=value
}

// Condition is a NodeCondition as the API serves it (k8s.io/api/core/v1
// NodeCondition; times in RFC 3339, second precision).
type Condition struct {
	Type               string `json:"type" yaml:"type"`
	Status             string `json:"status" yaml:"status"`
	Reason             string `json:"reason,omitempty" yaml:"reason,omitempty"`
	Message            string `json:"message,omitempty" yaml:"message,omitempty"`
	LastHeartbeatTime  string `json:"lastHeartbeatTime,omitempty" yaml:"lastHeartbeatTime,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty" yaml:"lastTransitionTime,omitempty"`
}

// NodeObject is the part of a Node this package reads.
type NodeObject struct {
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Taints []Taint `json:"taints"`
	} `json:"spec"`
	Status struct {
		Conditions []Condition `json:"conditions"`
	} `json:"status"`
}

// Taint is a node taint (k8s.io/api/core/v1 Taint).
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Report sets ConditionType and LabelGPUReady on the client's Node: it
// reads the Node (for the condition's last transition), patches
// nodes/<name>/status with a strategic merge patch of the one condition
// (conditions merge on type, so the kubelet's own stay as they are), then
// nodes/<name> with a JSON merge patch of the one label. The transition
// time moves only when the status changes. Errors (fault.ErrUnavailable):
// the API server cannot be reached, refuses the credential, answers with
// a redirect (ErrRedirect: the report is not sent on, so it did not
// reach the kubeconfig's server and is not delivered), or answers a
// request with anything but success; the error names the request and
// carries the start of the server's message (APIError).
func (c *Client) Report(ctx context.Context, h Health) (*Result, error) {
	var node NodeObject
	if err := c.do(ctx, http.MethodGet, c.nodePath(""), "", nil, &node); err != nil {
		return nil, err
	}
	status, ready := "True", "false"
	if h.Ready {
		status, ready = "False", "true"
	}
	now := h.Now.UTC().Truncate(time.Second).Format(time.RFC3339)
	cond := Condition{Type: ConditionType, Status: status, Reason: h.Reason, Message: h.Message, LastHeartbeatTime: now, LastTransitionTime: now}
	res := &Result{Node: c.node, Label: LabelGPUReady + "=" + ready, Changed: true}
	for _, old := range node.Status.Conditions {
		if old.Type == ConditionType && old.Status == status && old.LastTransitionTime != "" {
			cond.LastTransitionTime = old.LastTransitionTime
			res.Changed = false
		}
	}
	if node.Metadata.Labels[LabelGPUReady] != ready {
		res.Changed = true
	}
	res.Condition = cond
	statusPatch := map[string]any{"status": map[string]any{"conditions": []Condition{cond}}}
	if err := c.do(ctx, http.MethodPatch, c.nodePath("/status"), "application/strategic-merge-patch+json", statusPatch, nil); err != nil {
		return nil, err
	}
	labelPatch := map[string]any{"metadata": map[string]any{"labels": map[string]string{LabelGPUReady: ready}}}
	if err := c.do(ctx, http.MethodPatch, c.nodePath(""), "application/merge-patch+json", labelPatch, nil); err != nil {
		return nil, err
	}
	return res, nil
}

// GetNode reads the client's Node.
func (c *Client) GetNode(ctx context.Context) (*NodeObject, error) {
	var node NodeObject
	return &node, c.do(ctx, http.MethodGet, c.nodePath(""), "", nil, &node)
}

// Patch sends patch (marshalled to JSON) with content type ctype to
// nodes/<name><sub> ("" or "/status") and returns the API's error: the
// tests use it to prove what the credential may not do.
func (c *Client) Patch(ctx context.Context, sub, ctype string, patch any) error {
	return c.do(ctx, http.MethodPatch, c.nodePath(sub), ctype, patch, nil)
}

func (c *Client) nodePath(sub string) string {
	return "/api/v1/nodes/" + url.PathEscape(c.node) + sub
}

// APIError is a response that was not a success: the HTTP status and the
// API's Status message.
type APIError struct {
	Method, Path string
	Code         int    // HTTP status code
	Reason       string // the Status object's reason ("Forbidden", "NotFound", ...)
	Message      string // the Status object's message, or the body
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, e.Message)
}

// maxErrorText is how much of an error response's body an APIError
// keeps in its Message: the start of it on one line, with how much was
// left out. A Status object's message is a line or two; a larger body
// is not something to put whole into a log line.
const maxErrorText = 400

func (c *API) do(ctx context.Context, method, p, ctype string, in, out any) error {
	data, err := c.send(ctx, method, p, nil, ctype, in)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fault.Unavailable(fmt.Errorf("%s %s: decoding the response: %w", method, p, err))
		}
	}
	return nil
}

// send sends one request to path p with query q and returns the body
// of a success (2xx), of at most bounded.MaxAPIResponse bytes. Errors
// (fault.ErrUnavailable): the request's, a body over the limit
// (bounded.ErrTooLarge, never cut and parsed), a redirect (ErrRedirect,
// naming the status and the Location's origin; see newHTTPClient), and
// any other status as an *APIError.
func (c *API) send(ctx context.Context, method, p string, q url.Values, ctype string, in any) ([]byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", method, p, err)
		}
		body = bytes.NewReader(b)
	}
	u := *c.server
	u.Path = strings.TrimSuffix(u.Path, "/") + p
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, p, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "nodeprep")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("%s %s: %w", method, u.Redacted(), err))
	}
	defer resp.Body.Close() //nolint:errcheck // read-only body
	if resp.StatusCode/100 == 3 {
		return nil, fault.Unavailable(fmt.Errorf("%s %s: the API server answered %s to %s: %w, so it was not sent there",
			method, u.Redacted(), resp.Status, locationOrigin(resp), ErrRedirect))
	}
	if resp.StatusCode/100 != 2 {
		// The start of the body is enough to say what went wrong; the
		// rest is not read.
		data, err := io.ReadAll(io.LimitReader(resp.Body, bounded.MaxAPIError+1))
		if err != nil && len(data) == 0 {
			data = []byte(err.Error())
		}
		e := &APIError{Method: method, Path: p, Code: resp.StatusCode, Message: string(data)}
		var st struct{ Reason, Message string }
		if len(data) <= bounded.MaxAPIError && json.Unmarshal(data, &st) == nil && st.Message != "" {
			e.Reason, e.Message = st.Reason, st.Message
		}
		e.Message = OneLine(e.Message, maxErrorText, len(data) > bounded.MaxAPIError)
		return nil, fault.Unavailable(e)
	}
	data, err := bounded.ReadAll(resp.Body, bounded.MaxAPIResponse)
	if err != nil {
		return nil, fault.Unavailable(fmt.Errorf("%s %s: reading the response: %w", method, u.Redacted(), err))
	}
	return data, nil
}

// locationOrigin is the origin (scheme://host) a redirect's Location
// names, resolved against the request, for the error: never its path or
// query, which may carry what the server put there.
func locationOrigin(resp *http.Response) string {
	loc, err := resp.Location()
	switch {
	case errors.Is(err, http.ErrNoLocation):
		return "no Location"
	case err != nil || loc.Host == "":
		return "an unreadable Location"
	}
	return (&url.URL{Scheme: loc.Scheme, Host: loc.Host}).String()
}

// OneLine is s for a log line: control characters (newlines included)
// as spaces, surrounding space trimmed, and cut to its first max bytes
// (at a rune boundary) with how many bytes were left out; more says s is
// itself the start of a longer text (" and more").
func OneLine(s string, max int, more bool) string {
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s))
	cut := 0
	if len(s) > max {
		end := max
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		cut, s = len(s)-end, s[:end]
	}
	switch {
	case cut > 0 && more:
		s += fmt.Sprintf(" … (%d bytes more and the rest unread)", cut)
	case cut > 0:
		s += fmt.Sprintf(" … (%d bytes more)", cut)
	case more:
		s += " … (the rest unread)"
	}
	return s
}

// ListPageSize is how many objects one LIST request asks for (its limit
// parameter): kubectl's default chunk size (--chunk-size, 500). A page
// whose response is over bounded.MaxAPIResponse is asked for again with
// half the limit, down to one object; the largest object etcd stores
// (1.5 MiB by default) fits in one response.
const ListPageSize = 500

// maxList is bounded.MaxAPIList; the tests lower it.
var maxList = bounded.MaxAPIList

// minPageCharge is the least a page counts toward maxList, in bytes: an
// API server may answer a page with fewer objects than asked for, even
// none, and a continue token (a label selector that matches few of
// many objects), but not without end.
const minPageCharge = 4 << 10

// List reads the list at path (e.g. "/api/v1/nodes"), with query's
// parameters (labelSelector, fieldSelector; nil for none), page by page, as
// the API server pages a LIST (Kubernetes API concepts, "Retrieving
// large results sets in chunks"): each request carries limit, the next
// one the continue token of the last, until a page has none. It calls
// item with each object's JSON, in order; an error of item ends the list
// with it. Each response is bounded by bounded.MaxAPIResponse (a larger
// one is asked for again in smaller pages) and all of them together by
// bounded.MaxAPIList, each page counted as at least minPageCharge bytes,
// so that a server giving empty pages with new continue tokens is cut
// after 32,769 requests at most. Errors (fault.ErrUnavailable): Get's (a
// 404, when the API is not served, is an *APIError with Code 404), a
// list over bounded.MaxAPIList (wrapping bounded.ErrTooLarge), a
// continue token the list gave before (a cycle), a page that does not
// decode, and item's.
func (a *API) List(ctx context.Context, path string, query url.Values, item func(json.RawMessage) error) error {
	limit, cont, total, pages, items := ListPageSize, "", 0, 0, 0
	seen := map[string]bool{} // the continue tokens given, within maxList
	for {
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("limit", strconv.Itoa(limit))
		if cont != "" {
			q.Set("continue", cont)
		}
		data, err := a.send(ctx, http.MethodGet, path, q, "", nil)
		if errors.Is(err, bounded.ErrTooLarge) && limit > 1 {
			limit /= 2
			continue
		}
		if err != nil {
			return err
		}
		total += max(len(data), minPageCharge)
		pages++
		if total > maxList {
			return fault.Unavailable(fmt.Errorf("GET %s: the list is over the %d MiB nodeprep reads of one list after %d pages (%d objects): %w",
				path, maxList>>20, pages, items, bounded.ErrTooLarge))
		}
		var page struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			return fault.Unavailable(fmt.Errorf("GET %s: decoding page %d of the list: %w", path, pages, err))
		}
		data = nil
		for _, it := range page.Items {
			if err := item(it); err != nil {
				return err
			}
			items++
		}
		if page.Metadata.Continue == "" {
			return nil
		}
		if page.Metadata.Continue == cont {
			return fault.Unavailable(fmt.Errorf("GET %s: page %d of the list gives the same continue token as the one before", path, pages))
		}
		if seen[page.Metadata.Continue] {
			return fault.Unavailable(fmt.Errorf("GET %s: page %d of the list gives a continue token it gave before: the pages go round in a cycle", path, pages))
		}
		seen[page.Metadata.Continue] = true
		cont = page.Metadata.Continue
	}
}
