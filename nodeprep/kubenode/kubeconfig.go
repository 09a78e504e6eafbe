// Package kubenode tells the Kubernetes API server what nodeprep knows of
// this node's GPUs: a node condition of nodeprep's own (ConditionType) and
// a label (LabelGPUReady) on the node's Node object, sent with the
// kubelet's own credential — the kubeconfig k3s writes for its kubelet,
// <data-dir>/agent/kubelet.kubeconfig (k3s pkg/agent/config: a
// client certificate CN=system:node:<node name>, O=system:nodes).
//
// It is a small authenticated JSON client of its own (net/http,
// crypto/tls), not client-go: the whole of it is three requests (get the
// Node, a strategic-merge patch of nodes/<name>/status, a merge patch of
// nodes/<name>) and, for `cluster check --kubeconfig`, paged lists (List),
// and client-go with the API types would add tens of megabytes and their
// init to the program that links it. Every request follows one policy
// (newHTTPClient): no redirect is followed and no proxy used, so no
// credential and no report goes anywhere but the kubeconfig's server.
//
// With that credential the Node authorizer and the NodeRestriction
// admission plugin let the client change only its own Node, and never
// its taints (Kubernetes plugin/pkg/admission/noderestriction); this
// package never sends a taint.
package kubenode

import (
	"errors"
	"fmt"
	"net/url"
	"path"

	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
)

// KubeletKubeconfig is the kubelet's kubeconfig under k3s's data-dir
// (k3s pkg/agent/config get: filepath.Join(DataDir, "agent",
// "kubelet.kubeconfig")); its certificate, key and CA are files beside
// it (client-kubelet.crt, client-kubelet.key, server-ca.crt).
func KubeletKubeconfig(dataDir string) string {
	return path.Join(dataDir, "agent", "kubelet.kubeconfig")
}

// Kubeconfig is the part of a kubeconfig file (clientcmd's v1 Config)
// that selects one server and one credential: the current context's
// cluster and user. Preferences, extensions and namespaces are ignored;
// the credentials and connection settings nodeprep does not support are
// warned about (Selection.Warnings).
type Kubeconfig struct {
	CurrentContext string         `json:"current-context"`
	Clusters       []namedCluster `json:"clusters"`
	Contexts       []namedContext `json:"contexts"`
	Users          []namedUser    `json:"users"`
}

type namedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

type namedContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster string `json:"cluster"`
		User    string `json:"user"`
	} `json:"context"`
}

type namedUser struct {
	Name string `json:"name"`
	User User   `json:"user"`
}

// Cluster is a kubeconfig cluster: the server's https URL and its CA,
// as a file (CertificateAuthority) or inline PEM (base64 in the file).
// The fields after TLSServerName are read only to warn that nodeprep
// does not do what they ask (Selection.Warnings).
type Cluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	TLSServerName            string `json:"tls-server-name"`

	InsecureSkipTLSVerify bool   `json:"insecure-skip-tls-verify"`
	ProxyURL              string `json:"proxy-url"`
	DisableCompression    bool   `json:"disable-compression"`
}

// User is a kubeconfig user's client certificate and key, as files or
// inline PEM (base64 in the file), or its bearer token. The fields after
// Token are read only to warn that nodeprep does not do what they ask
// (Selection.Warnings).
type User struct {
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         []byte `json:"client-key-data"`
	Token                 string `json:"token"`

	TokenFile         string `json:"tokenFile"`
	Impersonate       string `json:"as"`
	ImpersonateUID    string `json:"as-uid"`
	ImpersonateGroups any    `json:"as-groups"`
	ImpersonateExtra  any    `json:"as-user-extra"`
	Username          string `json:"username"`
	Password          string `json:"password"`
	AuthProvider      any    `json:"auth-provider"`
	Exec              any    `json:"exec"`
}

// Selection is a kubeconfig's current context resolved: its cluster and
// user, with file references still as written.
type Selection struct {
	Context string
	Cluster Cluster
	User    User
	// Warnings name, one line each, the fields of the cluster and user
	// that nodeprep does not support and what it does instead (the
	// caller prints them): clientcmd's v1 Config fields (k8s.io/client-go
	// tools/clientcmd/api/v1 types.go) beyond the server, its CA and TLS
	// server name, the client certificate and key, and the token.
	Warnings []string
}

// unsupported returns the warnings for the fields of sel's cluster and
// user that nodeprep does not support (Selection.Warnings). It never
// quotes a field's value: a password or an exec plugin's arguments may
// be secrets.
// sends says what nodeprep authenticates with instead.
func (sel *Selection) unsupported(clusterName, userName, sends string) []string {
	var w []string
	cl, u := sel.Cluster, sel.User
	cw := func(cond bool, field, instead string) {
		if cond {
			w = append(w, fmt.Sprintf("kubeconfig cluster %q: %s is not supported: %s", clusterName, field, instead))
		}
	}
	uw := func(cond bool, field, instead string) {
		if cond {
			w = append(w, fmt.Sprintf("kubeconfig user %q: %s is not supported: %s", userName, field, instead))
		}
	}
	cw(cl.InsecureSkipTLSVerify, "insecure-skip-tls-verify", "nodeprep always verifies the server's certificate (with certificate-authority, or the system's roots)")
	cw(cl.ProxyURL != "", "proxy-url", "nodeprep connects to the server directly, through no proxy")
	cw(cl.DisableCompression, "disable-compression", "nodeprep lets Go's HTTP client ask for gzip responses")
	uw(u.TokenFile != "", "tokenFile", "nodeprep does not read it; "+sends)
	uw(u.Exec != nil, "exec", "nodeprep never runs a credential plugin; "+sends)
	uw(u.AuthProvider != nil, "auth-provider", "nodeprep runs no auth provider; "+sends)
	uw(u.Username != "" || u.Password != "", "username/password", "nodeprep sends no basic authentication; "+sends)
	uw(u.Impersonate != "" || u.ImpersonateUID != "" || u.ImpersonateGroups != nil || u.ImpersonateExtra != nil,
		"as, as-uid, as-groups, as-user-extra", "nodeprep impersonates no one; it acts as the user the credential names")
	return w
}

// ParseKubeconfig parses a kubeconfig (YAML or JSON) and resolves its
// current context (clientcmd's rules: current-context names a context,
// which names a cluster and a user; a file with no current-context and
// exactly one context uses it, as k3s's single-context files do).
// Errors (all plain, for the caller to mark): not YAML, no context to
// use, a context that names a missing cluster or user, a server that is
// not an https URL, a user without a client certificate and key (a
// token alone is not the kubelet's credential).
func ParseKubeconfig(data []byte) (*Selection, error) {
	sel, err := parseKubeconfig(data, "it reports with the client certificate")
	if err != nil {
		return nil, err
	}
	if (sel.User.ClientCertificate == "" && len(sel.User.ClientCertificateData) == 0) ||
		(sel.User.ClientKey == "" && len(sel.User.ClientKeyData) == 0) {
		return nil, fmt.Errorf("kubeconfig user of context %q has no client certificate and key: nodeprep reports with the kubelet's certificate only", sel.Context)
	}
	if sel.User.Token != "" {
		sel.Warnings = append(sel.Warnings, fmt.Sprintf("kubeconfig user of context %q: its token is not sent: nodeprep reports with the kubelet's client certificate only", sel.Context))
	}
	return sel, nil
}

// ParseAnyKubeconfig is ParseKubeconfig for any user: a client
// certificate, a bearer token, or neither (the CA alone). For both, user
// information in the server URL (https://user:password@host) is left out
// of the Selection's server, with a warning; no error or warning quotes
// it.
func ParseAnyKubeconfig(data []byte) (*Selection, error) {
	return parseKubeconfig(data, "it sends the token field, or the client certificate")
}

// parseKubeconfig is ParseAnyKubeconfig; sends says, in the warnings
// about credentials nodeprep does not use, what it sends instead.
func parseKubeconfig(data []byte, sends string) (*Selection, error) {
	if len(data) > bounded.MaxKubeconfig {
		return nil, fmt.Errorf("kubeconfig is %d bytes, more than %d", len(data), bounded.MaxKubeconfig)
	}
	var kc Kubeconfig
	if err := yamlbound.CheckFirst(data, yamlbound.MaxKubeconfig); err != nil { // before yaml.Unmarshal expands it
		return nil, fmt.Errorf("parsing kubeconfig: %w", err)
	}
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, fmt.Errorf("parsing kubeconfig: %w", err)
	}
	ctxName := kc.CurrentContext
	if ctxName == "" {
		if len(kc.Contexts) != 1 {
			return nil, fmt.Errorf("kubeconfig has no current-context and %d contexts", len(kc.Contexts))
		}
		ctxName = kc.Contexts[0].Name
	}
	var sel *Selection
	for _, c := range kc.Contexts {
		if c.Name != ctxName {
			continue
		}
		sel = &Selection{Context: ctxName}
		cl, ok := find(kc.Clusters, func(n namedCluster) (string, Cluster) { return n.Name, n.Cluster }, c.Context.Cluster)
		if !ok {
			return nil, fmt.Errorf("kubeconfig context %q names cluster %q, which it does not define", ctxName, c.Context.Cluster)
		}
		u, ok := find(kc.Users, func(n namedUser) (string, User) { return n.Name, n.User }, c.Context.User)
		if !ok {
			return nil, fmt.Errorf("kubeconfig context %q names user %q, which it does not define", ctxName, c.Context.User)
		}
		sel.Cluster, sel.User = cl, u
		sel.Warnings = sel.unsupported(c.Context.Cluster, c.Context.User, sends)
		break
	}
	if sel == nil {
		return nil, fmt.Errorf("kubeconfig current-context %q is not one of its contexts", ctxName)
	}
	if err := checkServer(sel.Cluster.Server); err != nil {
		return nil, err
	}
	// User information in the server URL would become a basic
	// authentication header (Go's client sends it when a request has no
	// Authorization): nodeprep sends none, so it is left out.
	if u, _ := url.Parse(sel.Cluster.Server); u.User != nil {
		u.User = nil
		sel.Cluster.Server = u.String()
		sel.Warnings = append(sel.Warnings, fmt.Sprintf("kubeconfig cluster %q: user information in server is not supported: nodeprep sends no basic authentication and leaves it out of the URL; %s", kc.clusterOf(ctxName), sends))
	}
	return sel, nil
}

// Credential resolves sel's file references with read (given each path
// as written; the caller resolves relative ones) into a Credential.
// Errors are read's, naming the file.
func (sel *Selection) Credential(read func(what, path string) ([]byte, error)) (Credential, error) {
	cred := Credential{Server: sel.Cluster.Server, ServerName: sel.Cluster.TLSServerName, Token: sel.User.Token}
	var err error
	get := func(what, ref string, inline []byte) []byte {
		if err != nil || len(inline) > 0 || ref == "" {
			return inline
		}
		var b []byte
		b, err = read(what, ref)
		return b
	}
	cred.CA = get("CA", sel.Cluster.CertificateAuthority, sel.Cluster.CertificateAuthorityData)
	cred.Cert = get("client certificate", sel.User.ClientCertificate, sel.User.ClientCertificateData)
	cred.Key = get("client key", sel.User.ClientKey, sel.User.ClientKeyData)
	return cred, err
}

// clusterOf is the name of the cluster context ctxName names.
func (kc *Kubeconfig) clusterOf(ctxName string) string {
	for _, c := range kc.Contexts {
		if c.Name == ctxName {
			return c.Context.Cluster
		}
	}
	return ""
}

func find[N any, V any](list []N, kv func(N) (string, V), name string) (V, bool) {
	for _, n := range list {
		if k, v := kv(n); k == name {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// errNotHTTPS is the server URL's fault; ParseKubeconfig wraps it.
var errNotHTTPS = errors.New("not an https:// URL with a host")
