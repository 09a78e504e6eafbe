package k3s

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// The token of these tests: k3s's secure format, K10<CA hash>::<user>:<password>.
const testToken = "K1075d5c2b1f6a1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5::server:9f8e7d6c5b4a"

// TestEnvironmentFileSecrets (#22 item 4): a malformed line of the k3s
// EnvironmentFile is never quoted; the error names the line and, where
// one can be told, the key.
func TestEnvironmentFileSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line string
		want       []string // in the error
	}{
		{"export", "export K3S_TOKEN=" + testToken, []string{"line 2", "K3S_TOKEN", "export"}},
		{"export quoted", "export K3S_TOKEN=\"" + testToken + "\"", []string{"line 2", "K3S_TOKEN", "export"}},
		{"space", "K3S_TOKEN " + testToken, []string{"line 2", "K3S_TOKEN", "white space"}},
		{"colon", "K3S_TOKEN: " + testToken, []string{"line 2", "K3S_TOKEN", "':'"}},
		{"bare token", testToken, []string{"line 2", "no '='"}},
		{"bare plain token", "mysecretjointoken", []string{"line 2", "no '='"}},
		{"bad key", "K3S-TOKEN=" + testToken, []string{"line 2", "not a variable name"}},
		{"after a comment", "# the token:\n" + testToken, []string{"line 3", "no '='"}},
		{"lower-case key", "k3s_token " + testToken, []string{"line 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := "K3S_DATA_DIR=/data/k3s\n" + tc.line + "\n"
			_, err := ParseEnvironmentFile([]byte(data))
			if err == nil {
				t.Fatalf("%q: no error", tc.line)
			}
			msg := err.Error()
			for _, secret := range []string{testToken, "9f8e7d6c5b4a", "mysecretjointoken", "K1075d5c2", "k3s_token"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q quotes the token", msg)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

// TestLabelTaintSecrets (#22 item 4): a token put by mistake in a label or
// taint is not quoted; the error still says what is wrong.
func TestLabelTaintSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		taint    bool
		want     string // in the error
	}{
		{"label with a token value", "K3S_TOKEN=" + testToken, false, `K3S_TOKEN=<redacted>`},
		{"label of a secret key", "example.com/db-password=hunter2:x", false, "db-password=<redacted>"},
		{"bare token as a label", testToken, false, "not shown"},
		{"bare word as a label", "mysecretjointoken", false, "want key=value"},
		{"token in a label under another key", "join=" + testToken, false, "join=<redacted>"},
		{"taint with a token value", "K3S_TOKEN=" + testToken + ":NoSchedule", true, "K3S_TOKEN=<redacted>"},
		{"bare token as a taint", testToken, true, "<redacted>"},
		{"secret taint with a bad effect", "SECRET=abcdef:Nope", true, "SECRET=<redacted>"},
		{"bare word as a taint", "mysecretjointoken", true, "not shown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tc.taint {
				_, err = ParseTaints([]string{tc.in})
			} else {
				_, err = ParseLabels([]string{tc.in})
			}
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("%q: error %v, want malformed", tc.in, err)
			}
			msg := err.Error()
			for _, secret := range []string{"9f8e7d6c5b4a", "hunter2", "mysecretjointoken", "abcdef"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q quotes the secret", msg)
				}
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q lacks %q", msg, tc.want)
			}
		})
	}
}

// TestPlanSecrets: the token in a k3s file (a label of config.yaml, a
// document that is the token alone) is not quoted by Plan's errors.
func TestPlanSecrets(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{
		"token as a label":   "node-label: [\"token=" + testToken + "\"]\n",
		"token as the file":  testToken + "\n",
		"token as a taint":   "node-taint: [\"" + testToken + "\"]\n",
		"token in bad YAML":  "token: " + testToken + "\nnode-label: [a\n",
		"token as a flag":    "---token: " + testToken + "\n",
		"token as a kubelet": "kubelet-arg: [\"register-with-taints=K3S_TOKEN=" + testToken + ":NoSchedule\"]\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			root := newHost(t, map[string]string{cfgPath: data})
			_, err := Plan(root, Options{Taints: mustTaints(t, "nvidia.com/gpu=present:NoSchedule")})
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), "9f8e7d6c5b4a") {
				t.Errorf("error %q quotes the token", err)
			}
		})
	}
}

// TestOwnSecretLabels: nodeprep refuses to put a label or taint whose key
// names a secret on the Node (every pod could read it there), without
// quoting its value.
func TestOwnSecretLabels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		labels []Label
		taints []Taint
	}{
		{labels: []Label{{Key: "K3S_TOKEN", Value: "abc123secret"}}},
		{labels: []Label{{Key: "example.com/db-password", Value: "abc123secret"}}},
		{taints: []Taint{{Key: "secret", Value: "abc123secret", Effect: NoSchedule}}},
	} {
		err := CheckUnique(tc.labels, tc.taints)
		if !errors.Is(err, fault.ErrMalformed) || strings.Contains(err.Error(), "abc123secret") || !strings.Contains(err.Error(), Redacted) {
			t.Errorf("CheckUnique(%v, %v) = %v; want malformed, the value redacted", tc.labels, tc.taints, err)
		}
	}
}

func TestRedactEntry(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"gpu=yes":                           "gpu=yes",
		"K3S_TOKEN=abc":                     "K3S_TOKEN=<redacted>",
		"k3s_agent_token_file=/x":           "k3s_agent_token_file=<redacted>",
		"Secret=v:NoExecute":                "Secret=<redacted>:NoExecute",
		"a=" + testToken:                    "a=<redacted>",
		"abcdef.0123456789abcdef":           "<redacted>",
		"nvidia.com/gpu=present:NoSchedule": "nvidia.com/gpu=present:NoSchedule",
	} {
		if got := RedactEntry(in); got != want {
			t.Errorf("RedactEntry(%q) = %q, want %q", in, got, want)
		}
	}
}
