package k3s

import (
	"regexp"
	"strings"
)

// Redacted stands for a value nodeprep does not print: it may be a secret.
const Redacted = "<redacted>"

// IsSecretKey reports whether a key names a secret: its name contains
// TOKEN, PASSWORD or SECRET in any case (K3S_TOKEN, K3S_AGENT_TOKEN_FILE,
// example.com/db-password, etcd-s3-secret-key). Values of such keys are
// never printed or stored by nodeprep.
func IsSecretKey(key string) bool {
	k := strings.ToUpper(key)
	return strings.Contains(k, "TOKEN") || strings.Contains(k, "PASSWORD") || strings.Contains(k, "SECRET")
}

// tokenLike matches what a join token looks like: k3s's
// "K10<ca hash>::<user>:<password>" (k3s docs, "Token": secure format)
// and Kubernetes bootstrap tokens "<6>.<16>" (kubeadm token format).
var tokenLike = regexp.MustCompile(`K10[0-9A-Fa-f]{8,}::\S*|\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)

// RedactEntry returns s — a label "key=value", a taint
// "key=value:Effect", a "KEY=VALUE" or kubelet-arg — fit to print: the
// value of a secret key (IsSecretKey) becomes Redacted (a taint keeps its
// effect), and anything that looks like a join token is replaced too.
func RedactEntry(s string) string {
	if key, rest, ok := strings.Cut(s, "="); ok && IsSecretKey(key) {
		s = key + "=" + Redacted
		if i := strings.LastIndex(rest, ":"); i >= 0 {
			switch TaintEffect(rest[i+1:]) {
			case NoSchedule, PreferNoSchedule, NoExecute:
				s += rest[i:]
			}
		}
	}
	return tokenLike.ReplaceAllString(s, Redacted)
}
