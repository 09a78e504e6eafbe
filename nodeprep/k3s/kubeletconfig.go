package k3s

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/bounded/yamlbound"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// KubeletConfigFindings judges the kubelet config file k3s passes with
// --kubelet-arg=config=FILE (on NixOS, services.k3s.extraKubeletConfig and
// gracefulNodeShutdown write one), named source, against the node-taint
// list k3s builds --register-with-taints from (eff.NodeTaints):
//   - a registerWithTaints entry that is not a valid taint is an error:
//     the kubelet cannot register the node with it;
//   - registerWithTaints beside a non-empty node-taint list is an error:
//     k3s passes --register-with-taints on the kubelet's command line
//     whenever node-taint is set (and nodeprep always sets it), a flag
//     wins over the config file (kubelet docs, "Set Kubelet Parameters
//     Via A Configuration File": command-line flags take precedence), so
//     the file's taints never reach the node;
//   - a nodeLabels key (KubeletConfiguration has no such field: node
//     labels are the --node-labels flag) is an error: the kubelet, which
//     decodes its config leniently after a strict decode fails, ignores it
//     with a warning, and the node registers without those labels.
//
// Errors (the second result): the file is larger than
// bounded.MaxK3sConfig, expands through its aliases past
// yamlbound.MaxK3sConfig (yamlbound.ErrExpands), or is not YAML
// (fault.ErrMalformed).
func KubeletConfigFindings(source string, data []byte, eff *Effective) ([]error, error) {
	if len(data) > bounded.MaxK3sConfig {
		return nil, fault.Malformed(fmt.Errorf("reading kubelet config %q: %w", source, bounded.ErrTooLarge))
	}
	var kc struct {
		RegisterWithTaints []struct {
			Key    string `yaml:"key"`
			Value  string `yaml:"value"`
			Effect string `yaml:"effect"`
		} `yaml:"registerWithTaints"`
		NodeLabels map[string]string `yaml:"nodeLabels"`
	}
	// Before yaml.v3 expands it: one taint with a long key aliased
	// thousands of times is a small file that decodes, and is judged
	// entry by entry, to gigabytes.
	if err := yamlbound.CheckFirst(data, yamlbound.MaxK3sConfig); err != nil {
		return nil, fault.Malformed(fmt.Errorf("reading kubelet config %q: %w", source, err))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&kc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fault.Malformed(fmt.Errorf("reading kubelet config %q: %w", source, err))
	}
	var errs []error
	var taints []string
	for _, t := range kc.RegisterWithTaints {
		s := t.Key
		if t.Value != "" {
			s += "=" + t.Value
		}
		s += ":" + t.Effect
		if _, err := ParseTaint(s); err != nil {
			errs = append(errs, fmt.Errorf("%s: registerWithTaints entry %q: %w: the kubelet cannot register the node with it", source, RedactEntry(s), err))
			continue
		}
		taints = append(taints, s)
	}
	if len(taints) > 0 && eff != nil && len(eff.NodeTaints) > 0 {
		errs = append(errs, fmt.Errorf("%s: registerWithTaints (%s) never reaches the node: k3s passes --register-with-taints from node-taint (%s), and the kubelet's flag wins over its config file; fix: list these taints in nodeprep's join.taints (or k3s's node-taint) and remove registerWithTaints", source, strings.Join(taints, ", "), joinEntries(eff.NodeTaints)))
	}
	if len(kc.NodeLabels) > 0 {
		errs = append(errs, fmt.Errorf("%s: nodeLabels is not a kubelet config field (node labels are the --node-labels flag): the kubelet ignores it and the node registers without those labels; fix: list them in nodeprep's join.labels (or k3s's node-label)", source))
	}
	return errs, nil
}

// joinEntries is the entries' values, comma-separated, redacted.
func joinEntries(es []Entry) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = RedactEntry(e.Value)
	}
	return strings.Join(s, ", ")
}
