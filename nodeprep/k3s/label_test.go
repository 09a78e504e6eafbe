package k3s

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func TestParseLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Label
		wantErr string // substring; "" means valid
	}{
		{in: "site=lab", want: Label{"site", "lab"}},
		{in: "nvidia.com/gpu.product=NVIDIA-H200", want: Label{"nvidia.com/gpu.product", "NVIDIA-H200"}},
		{in: "empty=", want: Label{"empty", ""}},
		{in: "node.kubernetes.io/instance-type=dgx", want: Label{"node.kubernetes.io/instance-type", "dgx"}},
		{in: "foo.node.kubernetes.io/x=y", want: Label{"foo.node.kubernetes.io/x", "y"}},
		{in: "kubelet.kubernetes.io/x=y", want: Label{"kubelet.kubernetes.io/x", "y"}},
		{in: "topology.kubernetes.io/zone=a", want: Label{"topology.kubernetes.io/zone", "a"}},
		{in: "example.com/kubernetes.io=x", want: Label{"example.com/kubernetes.io", "x"}},
		// F11: the kubelet refuses node-role.kubernetes.io/* and the agent exits.
		{in: "node-role.kubernetes.io/gpu=true", wantErr: "kubelet may not set"},
		{in: "kubernetes.io/role=gpu", wantErr: "kubelet may not set"},
		{in: "x.k8s.io/y=z", wantErr: "kubelet may not set"},
		{in: "k8s.io/y=z", wantErr: "kubelet may not set"},
		{in: "node-restriction.kubernetes.io/a=b", wantErr: "kubelet may not set"},
		{in: "noequals", wantErr: "want key=value"},
		{in: "=v", wantErr: "not a qualified name"},
		{in: "bad key=v", wantErr: "not a qualified name"},
		{in: "k=bad value", wantErr: "not a valid label value"},
		{in: "k=a=b", wantErr: "not a valid label value"},
		{in: "k=" + strings.Repeat("a", 64), wantErr: "not a valid label value"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLabel(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseLabel(%q): %v", tc.in, err)
				}
				if got != tc.want || got.String() != tc.in {
					t.Errorf("ParseLabel(%q) = %#v (%q), want %#v", tc.in, got, got, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("ParseLabel(%q) error %v, want one marked malformed", tc.in, err)
			}
			named := strings.Contains(err.Error(), tc.in) || !strings.Contains(tc.in, "=") && strings.Contains(err.Error(), "not shown")
			if !strings.Contains(err.Error(), tc.wantErr) || !named {
				t.Errorf("ParseLabel(%q) error %q: want it to name the value (or say why not) and say %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestParseTaint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Taint
		wantErr string
	}{
		{in: "nvidia.com/gpu=present:NoSchedule", want: Taint{Key: "nvidia.com/gpu", Value: "present", Effect: NoSchedule}},
		{in: "dedicated=infra:NoExecute", want: Taint{Key: "dedicated", Value: "infra", Effect: NoExecute}},
		{in: "gpu:PreferNoSchedule", want: Taint{Key: "gpu", Effect: PreferNoSchedule}},
		{in: "node-role.kubernetes.io/control-plane=:NoSchedule", want: Taint{Key: "node-role.kubernetes.io/control-plane", Effect: NoSchedule, withEquals: true}},
		// F11: a misspelt effect.
		{in: "nvidia.com/gpu=present:NoScheduled", wantErr: `effect "NoScheduled" is not one of`},
		{in: "nvidia.com/gpu=present", wantErr: "want key[=value]:Effect"},
		{in: "a:b:NoSchedule", wantErr: "more than one ':'"},
		{in: "a=b=c:NoSchedule", wantErr: "not a valid label value"},
		{in: "bad key:NoSchedule", wantErr: "not a qualified name"},
		{in: ":NoSchedule", wantErr: "not a qualified name"},
		{in: "k=v:noschedule", wantErr: "is not one of"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTaint(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseTaint(%q): %v", tc.in, err)
				}
				if got != tc.want || got.String() != tc.in {
					t.Errorf("ParseTaint(%q) = %#v (%q), want %#v", tc.in, got, got, tc.want)
				}
				return
			}
			if err == nil || !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("ParseTaint(%q) error %v, want one marked malformed", tc.in, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("ParseTaint(%q) error %q: want it to name the value and say %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestParseListsJoinErrors(t *testing.T) {
	t.Parallel()
	_, err := ParseLabels([]string{"ok=1", "node-role.kubernetes.io/gpu=true", "bad"})
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "node-role.kubernetes.io/gpu=true") || !strings.Contains(err.Error(), "item 3") {
		t.Errorf("ParseLabels error %v: want both bad values named, marked malformed", err)
	}
	_, err = ParseTaints([]string{"a:NoSchedule", "b:Nope"})
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "b:Nope") {
		t.Errorf("ParseTaints error %v: want b:Nope named, marked malformed", err)
	}
}

func TestIsKubeletLabel(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"kubernetes.io/hostname":                   true,
		"kubernetes.io/arch":                       true,
		"kubernetes.io/os":                         true,
		"beta.kubernetes.io/arch":                  true,
		"beta.kubernetes.io/os":                    true,
		"beta.kubernetes.io/instance-type":         true,
		"node.kubernetes.io/instance-type":         true,
		"topology.kubernetes.io/region":            true,
		"topology.kubernetes.io/zone":              true,
		"failure-domain.beta.kubernetes.io/region": true,
		"failure-domain.beta.kubernetes.io/zone":   true,
		"node.kubernetes.io/anything":              true,
		"a.b.kubelet.kubernetes.io/x":              true,
		"node-role.kubernetes.io/worker":           false,
		"kubernetes.io/role":                       false,
		"topology.kubernetes.io/rack":              false,
		"xnode.kubernetes.io/x":                    false,
	} {
		if got := IsKubeletLabel(key); got != want {
			t.Errorf("IsKubeletLabel(%q) = %v, want %v", key, got, want)
		}
	}
}

func FuzzParseLabel(f *testing.F) {
	for _, s := range []string{"site=lab", "nvidia.com/gpu.count=8", "empty=", "a=b=c", "node-role.kubernetes.io/gpu=true", "", "=", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLabel(s)
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("ParseLabel(%q) error %v not marked malformed", s, err)
			}
			return
		}
		if l.String() != s {
			t.Fatalf("ParseLabel(%q).String() = %q", s, l.String())
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLabel(%q) accepted but Validate: %v", s, err)
		}
	})
}

func FuzzParseTaint(f *testing.F) {
	for _, s := range []string{"nvidia.com/gpu=present:NoSchedule", "k:NoExecute", "k=:PreferNoSchedule", "k=v", "a:b:c", ":", "", "k=v:NoScheduled"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tt, err := ParseTaint(s)
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("ParseTaint(%q) error %v not marked malformed", s, err)
			}
			return
		}
		if tt.String() != s {
			t.Fatalf("ParseTaint(%q).String() = %q", s, tt.String())
		}
		again, err := ParseTaint(tt.String())
		if err != nil || again != tt {
			t.Fatalf("ParseTaint(%q) round trip: %#v, %v", s, again, err)
		}
	})
}
