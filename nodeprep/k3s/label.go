package k3s

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// Label is a node label, written "key=value" (k3s --node-label, the
// kubelet's --node-labels). The zero value is not a valid label.
type Label struct {
	// Key is a Kubernetes qualified name ("[prefix/]name").
	Key string
	// Value is a Kubernetes label value (may be empty).
	Value string
}

// ParseLabel parses "key=value" (split at the first '=') and validates it
// with ValidateLabel. The error names s and the rule it breaks and is marked
// fault.ErrMalformed.
func ParseLabel(s string) (Label, error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok {
		// Not shown: with no key to judge it by, it may be a pasted token.
		return Label{}, fault.Malformed(fmt.Errorf("a label with no '=' (%d characters, not shown: it may be a secret): want key=value", len(s)))
	}
	l := Label{Key: key, Value: value}
	if err := l.Validate(); err != nil {
		return Label{}, err
	}
	return l, nil
}

// ParseLabels parses each string with ParseLabel and returns all the errors
// joined, each naming the item's place ("item 3: …"; marked
// fault.ErrMalformed), or the labels in the order given.
func ParseLabels(ss []string) ([]Label, error) { return parseEach(ss, ParseLabel) }

// String returns "key=value", exactly what ParseLabel accepted.
func (l Label) String() string { return l.Key + "=" + l.Value }

// MarshalText encodes the label as its String form (for JSON and YAML).
func (l Label) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses the label with ParseLabel.
func (l *Label) UnmarshalText(b []byte) error {
	v, err := ParseLabel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Validate checks the label with the rules the kubelet applies to
// --node-labels (cmd/kubelet/app/options ValidateKubeletFlags): the key is a
// qualified name (validation.IsQualifiedName), the value a label value
// (validation.IsValidLabelValue), and a key in the kubernetes.io or k8s.io
// namespaces must be one the kubelet may set on itself (IsKubeletLabel). A
// kubelet given any other label refuses to start, so the k3s agent exits.
// The error names the label and the rule and is marked fault.ErrMalformed.
func (l Label) Validate() error {
	shown := RedactEntry(l.String())
	if errs := validation.IsQualifiedName(l.Key); len(errs) > 0 {
		return fault.Malformed(fmt.Errorf("label %q: key %q is not a qualified name: %s", shown, RedactEntry(l.Key), strings.Join(errs, "; ")))
	}
	if errs := validation.IsValidLabelValue(l.Value); len(errs) > 0 {
		return fault.Malformed(fmt.Errorf("label %q: value %s is not a valid label value: %s", shown, quoteValue(l.Key, l.Value), strings.Join(errs, "; ")))
	}
	if IsKubernetesLabel(l.Key) && !IsKubeletLabel(l.Key) {
		return fault.Malformed(fmt.Errorf("label %q: the kubelet may not set labels in the kubernetes.io or k8s.io namespaces except under kubelet.kubernetes.io/, node.kubernetes.io/ or %s", shown, strings.Join(kubeletLabels, ", ")))
	}
	return nil
}

// quoteValue quotes a label or taint value for an error, or says it is
// not shown: the value of a secret key (IsSecretKey), or a token.
func quoteValue(key, value string) string {
	if IsSecretKey(key) || tokenLike.MatchString(value) {
		return Redacted
	}
	return fmt.Sprintf("%q", value)
}

// kubeletLabels is the kubelet's fixed set of kubernetes.io labels it may set
// on its own Node object: k8s.io/kubelet/pkg/apis/well_known_labels.go
// (kubeletLabels), the constants from k8s.io/api/core/v1/well_known_labels.go.
var kubeletLabels = []string{
	"kubernetes.io/hostname",
	"kubernetes.io/arch",
	"kubernetes.io/os",
	"beta.kubernetes.io/arch",
	"beta.kubernetes.io/os",
	"beta.kubernetes.io/instance-type",
	"node.kubernetes.io/instance-type",
	"topology.kubernetes.io/region",
	"topology.kubernetes.io/zone",
	"failure-domain.beta.kubernetes.io/region",
	"failure-domain.beta.kubernetes.io/zone",
}

// kubeletLabelNamespaces are the namespaces (and their subdomains) in which
// a kubelet may set any label: k8s.io/kubelet/pkg/apis/well_known_labels.go
// (kubeletLabelNamespaces: LabelNamespaceSuffixKubelet, LabelNamespaceSuffixNode).
var kubeletLabelNamespaces = []string{"kubelet.kubernetes.io", "node.kubernetes.io"}

// labelNamespace returns the prefix of a label key ("" when it has none).
func labelNamespace(key string) string {
	ns, _, ok := strings.Cut(key, "/")
	if !ok {
		return ""
	}
	return ns
}

func inDomain(ns, domain string) bool {
	return ns == domain || strings.HasSuffix(ns, "."+domain)
}

// IsKubernetesLabel reports whether key's prefix is kubernetes.io, k8s.io or
// a subdomain of either: the namespaces reserved by Kubernetes
// (cmd/kubelet/app/options/options.go isKubernetesLabel).
func IsKubernetesLabel(key string) bool {
	ns := labelNamespace(key)
	return inDomain(ns, "kubernetes.io") || inDomain(ns, "k8s.io")
}

// IsKubeletLabel reports whether the kubelet may set key on its own Node
// object: one of the fixed set (kubernetes.io/hostname, kubernetes.io/arch,
// kubernetes.io/os, the beta and topology/failure-domain region and zone
// labels, the instance-type labels) or any key under kubelet.kubernetes.io/
// or node.kubernetes.io/ (or their subdomains). Rule and lists from
// k8s.io/kubelet/pkg/apis/well_known_labels.go IsKubeletLabel.
func IsKubeletLabel(key string) bool {
	for _, k := range kubeletLabels {
		if key == k {
			return true
		}
	}
	ns := labelNamespace(key)
	for _, allowed := range kubeletLabelNamespaces {
		if inDomain(ns, allowed) {
			return true
		}
	}
	return false
}

// TaintEffect is a taint's effect (k8s.io/api/core/v1 TaintEffect).
type TaintEffect string

// The taint effects Kubernetes knows (core/v1 types.go).
const (
	NoSchedule       TaintEffect = "NoSchedule"       // new pods without a toleration are not scheduled (Kubernetes taints docs)
	PreferNoSchedule TaintEffect = "PreferNoSchedule" // the scheduler avoids the node when it can
	NoExecute        TaintEffect = "NoExecute"        // running pods without a toleration are evicted too
)

// Taint is a node taint, written "key[=value]:Effect" (k3s --node-taint, the
// kubelet's --register-with-taints, kubectl taint's syntax).
type Taint struct {
	// Key is a Kubernetes qualified name.
	Key string
	// Value is a label value, possibly empty.
	Value string
	// Effect is NoSchedule, PreferNoSchedule or NoExecute.
	Effect TaintEffect
	// withEquals records "key=:Effect" (an explicit empty value) so that
	// String prints back exactly what was parsed.
	withEquals bool
}

// ParseTaint parses "key[=value]:Effect" and validates it with
// Taint.Validate. The error names s and the rule it breaks and is marked
// fault.ErrMalformed.
func ParseTaint(s string) (Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		shown := fmt.Sprintf("%q", RedactEntry(s))
		if !strings.Contains(s, "=") {
			// Not shown: with no key to judge it by, it may be a pasted token.
			shown = fmt.Sprintf("with no ':' (%d characters, not shown: it may be a secret)", len(s))
		}
		return Taint{}, fault.Malformed(fmt.Errorf("taint %s: want key[=value]:Effect (Effect one of NoSchedule, PreferNoSchedule, NoExecute)", shown))
	}
	if strings.Contains(effect, ":") {
		return Taint{}, fault.Malformed(fmt.Errorf("taint %q: more than one ':'; want key[=value]:Effect", RedactEntry(s)))
	}
	key, value, eq := strings.Cut(kv, "=")
	t := Taint{Key: key, Value: value, Effect: TaintEffect(effect), withEquals: eq && value == ""}
	if err := t.validate(s); err != nil {
		return Taint{}, err
	}
	return t, nil
}

// ParseTaints parses each string with ParseTaint and returns all the errors
// joined, each naming the item's place (marked fault.ErrMalformed), or the
// taints in the order given.
func ParseTaints(ss []string) ([]Taint, error) { return parseEach(ss, ParseTaint) }

// parseEach parses each string with parse: the values in the order given,
// or every error joined, each naming the item's place ("item 3: …"), marked
// fault.ErrMalformed.
func parseEach[T any](ss []string, parse func(string) (T, error)) ([]T, error) {
	out := make([]T, 0, len(ss))
	var errs []error
	for i, s := range ss {
		v, err := parse(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d: %w", i+1, err))
			continue
		}
		out = append(out, v)
	}
	if len(errs) > 0 {
		return nil, fault.Malformed(errors.Join(errs...))
	}
	return out, nil
}

// String returns "key=value:Effect", or "key:Effect" when the value is
// empty; a taint parsed from "key=:Effect" prints back that way.
func (t Taint) String() string {
	if t.Value != "" || t.withEquals {
		return t.Key + "=" + t.Value + ":" + string(t.Effect)
	}
	return t.Key + ":" + string(t.Effect)
}

// MarshalText encodes the taint as its String form (for JSON and YAML).
func (t Taint) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText parses the taint with ParseTaint.
func (t *Taint) UnmarshalText(b []byte) error {
	v, err := ParseTaint(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Validate checks the taint with the rules of the API server's taint
// validation and kubectl's parser: the key is a qualified name, the value a
// label value, the effect one of NoSchedule, PreferNoSchedule, NoExecute.
// Taint keys are not limited to the kubelet's label namespaces
// (node-role.kubernetes.io/control-plane:NoSchedule is common). The error is
// marked fault.ErrMalformed.
func (t Taint) Validate() error { return t.validate(t.String()) }

func (t Taint) validate(s string) error {
	s = RedactEntry(s)
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fault.Malformed(fmt.Errorf("taint %q: key %q is not a qualified name: %s", s, RedactEntry(t.Key), strings.Join(errs, "; ")))
	}
	if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
		return fault.Malformed(fmt.Errorf("taint %q: value %s is not a valid label value: %s", s, quoteValue(t.Key, t.Value), strings.Join(errs, "; ")))
	}
	switch t.Effect {
	case NoSchedule, PreferNoSchedule, NoExecute:
	default:
		effect := fmt.Sprintf("%q", RedactEntry(string(t.Effect)))
		if IsSecretKey(t.Key) {
			effect = Redacted
		}
		return fault.Malformed(fmt.Errorf("taint %q: effect %s is not one of NoSchedule, PreferNoSchedule, NoExecute", s, effect))
	}
	return nil
}
