package k3s

import (
	"errors"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

func TestKubeletConfigFindings(t *testing.T) {
	t.Parallel()
	ours := &Effective{NodeTaints: []Entry{{Value: "nvidia.com/gpu=present:NoSchedule", Source: "/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml"}}}
	tests := []struct {
		name string
		data string
		eff  *Effective
		want []string // one substring per finding, in order
	}{
		{"nothing about taints or labels", "kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n", ours, nil},
		{"empty file", "", ours, nil},
		{"registerWithTaints replaced by k3s's flag", "registerWithTaints:\n- {key: dedicated, value: gpu, effect: NoSchedule}\n", ours,
			[]string{"registerWithTaints (dedicated=gpu:NoSchedule) never reaches the node"}},
		{"registerWithTaints without node-taint", "registerWithTaints:\n- {key: dedicated, effect: NoExecute}\n", &Effective{}, nil},
		{"invalid taint", "registerWithTaints:\n- {key: dedicated, value: gpu, effect: NoSchedul}\n", &Effective{},
			[]string{`registerWithTaints entry "dedicated=gpu:NoSchedul"`}},
		{"nodeLabels", "nodeLabels: {gpu: \"yes\"}\n", ours, []string{"nodeLabels is not a kubelet config field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errs, err := KubeletConfigFindings("/nix/store/x-kubelet.conf", []byte(tt.data), tt.eff)
			if err != nil {
				t.Fatal(err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("findings %v, want %d", errs, len(tt.want))
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tt.want[i]) || !strings.Contains(e.Error(), "/nix/store/x-kubelet.conf") {
					t.Errorf("finding %q, want it to name the file and say %q", e, tt.want[i])
				}
			}
		})
	}
	if _, err := KubeletConfigFindings("k.conf", []byte("registerWithTaints: {a: [\n"), ours); !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("malformed YAML: %v, want malformed", err)
	}
}

// TestKubeletConfigFindingsAliasBomb: a kubelet config whose one taint,
// with a 20 KB key, is aliased 1,000 times (a 25 KB file that decodes to
// 20 MB, and 4,000 times that took 2.3 GiB in check-node) is refused as
// malformed before yaml.v3 expands it, naming the file.
func TestKubeletConfigFindingsAliasBomb(t *testing.T) {
	t.Parallel()
	data := "registerWithTaints:\n- &t {key: " + strings.Repeat("k", 20000) + ", effect: NoSchedule}\n" + strings.Repeat("- *t\n", 1000)
	errs, err := KubeletConfigFindings("k.conf", []byte(data), &Effective{})
	if !errors.Is(err, fault.ErrMalformed) || !errors.Is(err, yamlbound.ErrExpands) || !strings.Contains(err.Error(), "k.conf") {
		t.Fatalf("error %v (and %d findings), want it malformed, naming k.conf and what it expands to", err, len(errs))
	}
}

// FuzzKubeletConfigFindings: any file is judged or refused as malformed,
// never a panic.
func FuzzKubeletConfigFindings(f *testing.F) {
	f.Add([]byte("registerWithTaints:\n- {key: a, value: b, effect: NoSchedule}\nnodeLabels: {a: b}\n"))
	f.Add([]byte("registerWithTaints: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := KubeletConfigFindings("k.conf", data, &Effective{NodeTaints: []Entry{{Value: "a:NoSchedule"}}})
		if err != nil && !errors.Is(err, fault.ErrMalformed) {
			t.Fatalf("error %v is not marked malformed", err)
		}
	})
}
