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
// nodes/<name>), and client-go with the API types would add tens of
// megabytes and their init to the program that links it.
//
// With that credential the Node authorizer and the NodeRestriction
// admission plugin let the client change only its own Node, and never
// its taints (Kubernetes plugin/pkg/admission/noderestriction); this
// package never sends a taint.
package kubenode

import (
	"errors"
	"fmt"
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
// that selects one server and one client certificate: the current
// context's cluster and user. Other fields (preferences, extensions,
// namespaces, exec plugins, tokens) are ignored.
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
type Cluster struct {
	Server                   string `json:"server"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	TLSServerName            string `json:"tls-server-name"`
}

// User is a kubeconfig user's client certificate and key, as files or
// inline PEM (base64 in the file).
type User struct {
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         []byte `json:"client-key-data"`
	Token                 string `json:"token"`
}

// Selection is a kubeconfig's current context resolved: its cluster and
// user, with file references still as written.
type Selection struct {
	Context string
	Cluster Cluster
	User    User
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
	sel, err := ParseAnyKubeconfig(data)
	if err != nil {
		return nil, err
	}
	if (sel.User.ClientCertificate == "" && len(sel.User.ClientCertificateData) == 0) ||
		(sel.User.ClientKey == "" && len(sel.User.ClientKeyData) == 0) {
		return nil, fmt.Errorf("kubeconfig user of context %q has no client certificate and key: nodeprep reports with the kubelet's certificate only", sel.Context)
	}
	return sel, nil
}

// ParseAnyKubeconfig is ParseKubeconfig for any user: a client
// certificate, a bearer token, or neither (the CA alone).
func ParseAnyKubeconfig(data []byte) (*Selection, error) {
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
		break
	}
	if sel == nil {
		return nil, fmt.Errorf("kubeconfig current-context %q is not one of its contexts", ctxName)
	}
	if err := checkServer(sel.Cluster.Server); err != nil {
		return nil, err
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
