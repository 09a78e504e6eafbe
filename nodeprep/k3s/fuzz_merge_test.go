package k3s

import (
	"errors"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// FuzzMerge: any config.yaml, drop-in and k3s argument merge without a
// panic; a refusal is malformed input; every effective entry comes from one
// of the inputs.
func FuzzMerge(f *testing.F) {
	f.Add([]byte("node-label: [site=lab, rack=r1]\n"), []byte("node-label+: [gpu=yes]\n"), "--node-taint=a=b:NoSchedule")
	f.Add([]byte("node-taint: x:NoExecute\nnode-label:\n"), []byte("node-taint+:\n  - y:NoSchedule\n"), "")
	f.Add([]byte("- not a map\n"), []byte("{}"), "--node-label")
	f.Add([]byte("node-label: {a: b}\n"), []byte(""), "--node-label x=y --node-taint")
	const cfg, drop = "/etc/rancher/k3s/config.yaml", "/etc/rancher/k3s/config.yaml.d/50-x.yaml"
	f.Fuzz(func(t *testing.T, config, dropIn []byte, arg string) {
		eff, err := Merge([]File{{Path: cfg, Data: config}, {Path: drop, Data: dropIn}}, []string{arg})
		if err != nil {
			if !errors.Is(err, fault.ErrMalformed) {
				t.Fatalf("refusal not marked malformed: %v", err)
			}
			return
		}
		for _, list := range [][]Entry{eff.NodeLabels, eff.NodeTaints} {
			for _, e := range list {
				if e.Source != cfg && e.Source != drop && e.Source != ArgsSource {
					t.Fatalf("entry %q from unknown source %q", e.Value, e.Source)
				}
			}
		}
	})
}
