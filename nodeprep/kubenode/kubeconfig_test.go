package kubenode

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// k3sKubelet is the kubeconfig k3s writes for its kubelet, its files by
// absolute path under the default data-dir.
var k3sKubelet = testkit.KubeletKubeconfig("https://127.0.0.1:6444", "/var/lib/rancher/k3s/agent/server-ca.crt",
	"/var/lib/rancher/k3s/agent/client-kubelet.crt", "/var/lib/rancher/k3s/agent/client-kubelet.key")

func TestParseKubeconfig(t *testing.T) {
	t.Parallel()
	sel, err := ParseKubeconfig([]byte(k3sKubelet))
	if err != nil {
		t.Fatal(err)
	}
	if sel.Context != "Default" || sel.Cluster.Server != "https://127.0.0.1:6444" ||
		sel.Cluster.CertificateAuthority != "/var/lib/rancher/k3s/agent/server-ca.crt" ||
		sel.User.ClientCertificate != "/var/lib/rancher/k3s/agent/client-kubelet.crt" ||
		sel.User.ClientKey != "/var/lib/rancher/k3s/agent/client-kubelet.key" {
		t.Errorf("k3s kubelet kubeconfig: %+v", sel)
	}

	inline := `{"clusters":[{"name":"c","cluster":{"server":"https://10.0.0.1:6443","certificate-authority-data":"Y2E="}}],
"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],
"users":[{"name":"u","user":{"client-certificate-data":"Y2VydA==","client-key-data":"a2V5"}}]}`
	sel, err = ParseKubeconfig([]byte(inline))
	if err != nil {
		t.Fatal(err)
	}
	if string(sel.Cluster.CertificateAuthorityData) != "ca" || string(sel.User.ClientCertificateData) != "cert" || string(sel.User.ClientKeyData) != "key" || sel.Context != "x" {
		t.Errorf("inline data, the only context: %+v", sel)
	}

	for _, tc := range []struct{ name, data, want string }{
		{"not yaml", "clusters: [", "parsing kubeconfig"},
		{"no context", "clusters: []", "no current-context and 0 contexts"},
		{"unknown current context", strings.Replace(k3sKubelet, "current-context: Default", "current-context: other", 1), `current-context "other" is not one of its contexts`},
		{"missing cluster", strings.Replace(k3sKubelet, "cluster: local", "cluster: remote", 1), `names cluster "remote"`},
		{"missing user", strings.Replace(k3sKubelet, "user: user", "user: admin", 1), `names user "admin"`},
		{"http server", strings.Replace(k3sKubelet, "https://127", "http://127", 1), "not an https:// URL"},
		{"token only", strings.Replace(strings.Replace(k3sKubelet, "client-certificate: /var/lib/rancher/k3s/agent/client-kubelet.crt", "token: abc", 1), "    client-key: /var/lib/rancher/k3s/agent/client-kubelet.key\n", "", 1), "no client certificate and key"},
		{"bad base64", strings.Replace(inline, `"Y2E="`, `"%%%"`, 1), "parsing kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseKubeconfig([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseKubeconfig([]byte(strings.Replace(k3sKubelet, "https://127.0.0.1:6444", "ftp://x", 1))); !errors.Is(err, errNotHTTPS) {
		t.Errorf("error %v does not wrap errNotHTTPS", err)
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ready bool
		stage string
		want  string
	}{
		{true, "", ReasonHealthy}, {false, "inventory", ReasonGPULost}, {false, "selftest", ReasonSelftest}, {false, "cdi", ReasonNotReady}, {false, "", ReasonNotReady},
	} {
		if got := Reason(tc.ready, tc.stage); got != tc.want {
			t.Errorf("Reason(%t, %q) = %q, want %q", tc.ready, tc.stage, got, tc.want)
		}
	}
}

// FuzzParseKubeconfig: any input parses or is refused with an error;
// what parses has an https server and a client certificate and key.
func FuzzParseKubeconfig(f *testing.F) {
	f.Add([]byte(k3sKubelet))
	f.Add([]byte(`{"current-context":"a","contexts":[{"name":"a","context":{"cluster":"a","user":"a"}}]}`))
	f.Add([]byte("users: [{name: u, user: {client-key-data: !!binary a2V5}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sel, err := ParseKubeconfig(data)
		if err != nil {
			return
		}
		if checkServer(sel.Cluster.Server) != nil {
			t.Errorf("accepted server %q", sel.Cluster.Server)
		}
		if sel.User.ClientCertificate == "" && len(sel.User.ClientCertificateData) == 0 {
			t.Error("accepted a user without a client certificate")
		}
	})
}

// TestKubeconfigWarnings: each field of clientcmd's v1 cluster and user
// that nodeprep does not support gets one warning naming it and what
// nodeprep does instead, never its value; k3s's kubelet kubeconfig gets
// none, and the kubelet's kubeconfig with a token says it is not sent.
func TestKubeconfigWarnings(t *testing.T) {
	t.Parallel()
	if sel, err := ParseKubeconfig([]byte(k3sKubelet)); err != nil || len(sel.Warnings) != 0 {
		t.Errorf("k3s kubelet kubeconfig: %v, warnings %q", err, sel.Warnings)
	}
	const secret = "warning-test-secret"
	kc := func(cluster, user string) string {
		return "current-context: x\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:6443\"" + cluster + "}\n" +
			"contexts:\n- name: x\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: t" + user + "}\n"
	}
	for _, tt := range []struct{ name, cluster, user, want string }{
		{"insecure-skip-tls-verify", ", insecure-skip-tls-verify: true", "", "always verifies the server's certificate"},
		{"proxy-url", ", proxy-url: \"http://" + secret + "@proxy:3128\"", "", "through no proxy"},
		{"disable-compression", ", disable-compression: true", "", "gzip"},
		{"tokenFile", "", ", tokenFile: /run/" + secret, "does not read it"},
		{"exec", "", ", exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/" + secret + ", args: [" + secret + "]}", "never runs a credential plugin"},
		{"auth-provider", "", ", auth-provider: {name: oidc, config: {id-token: " + secret + "}}", "runs no auth provider"},
		{"username/password", "", ", username: admin, password: " + secret, "no basic authentication"},
		{"as, as-uid, as-groups, as-user-extra", "", ", as: " + secret + ", as-groups: [system:masters]", "impersonates no one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sel, err := ParseAnyKubeconfig([]byte(kc(tt.cluster, tt.user)))
			if err != nil {
				t.Fatal(err)
			}
			if len(sel.Warnings) != 1 || !strings.Contains(sel.Warnings[0], tt.name+" is not supported") ||
				!strings.Contains(sel.Warnings[0], tt.want) || strings.Contains(sel.Warnings[0], secret) {
				t.Errorf("warnings %q; want one naming %s, saying %q, without the value", sel.Warnings, tt.name, tt.want)
			}
		})
	}
	withToken := strings.Replace(k3sKubelet, "    client-key:", "    token: abc\n    client-key:", 1)
	if sel, err := ParseKubeconfig([]byte(withToken)); err != nil || len(sel.Warnings) != 1 || !strings.Contains(sel.Warnings[0], "token is not sent") {
		t.Errorf("kubelet kubeconfig with a token: %v, warnings %q", err, sel.Warnings)
	}
}

// TestKubeconfigServerUserinfo: a server URL's user information
// (https://user:password@host) is never quoted in an error, whether the
// URL is refused (not https, or does not parse) or not; an https server
// with it gets a warning without its value, and the user information is
// left out of the server nodeprep uses, so no request carries it (Go's
// client would turn it into a basic-authentication header).
func TestKubeconfigServerUserinfo(t *testing.T) {
	t.Parallel()
	const secret = "server-userinfo-secret"
	kc := func(server string) []byte {
		return []byte("current-context: x\nclusters:\n- name: c\n  cluster: {server: \"" + server + "\"}\n" +
			"contexts:\n- name: x\n  context: {cluster: c, user: u}\nusers:\n- name: u\n  user: {token: t}\n")
	}
	for _, server := range []string{
		"http://u:" + secret + "@127.0.0.1:6443",
		"ftp://" + secret + "@host",
		"https://u:" + secret + "@[::1",
		"https://" + secret + ":@",
	} {
		_, err := ParseAnyKubeconfig(kc(server))
		if !errors.Is(err, errNotHTTPS) || strings.Contains(err.Error(), secret) {
			t.Errorf("server %q: error %v; want errNotHTTPS without the user information", server, err)
		}
	}
	for _, user := range []string{"u:" + secret, secret, secret + ":"} {
		sel, err := ParseAnyKubeconfig(kc("https://" + user + "@127.0.0.1:6443/prefix"))
		if err != nil {
			t.Fatal(err)
		}
		if sel.Cluster.Server != "https://127.0.0.1:6443/prefix" {
			t.Errorf("user %q: server %q; want it without the user information", user, sel.Cluster.Server)
		}
		if len(sel.Warnings) != 1 || !strings.Contains(sel.Warnings[0], "user information in server is not supported") || strings.Contains(strings.Join(sel.Warnings, "\n"), secret) {
			t.Errorf("user %q: warnings %q; want one about the user information, without it", user, sel.Warnings)
		}
	}
}
