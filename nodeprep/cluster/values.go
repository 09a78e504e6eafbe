package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// CheckInstanceType checks one of RenderOptions.FallbackInstanceTypes: a
// value of the node.kubernetes.io/instance-type label, so non-empty and a
// valid label value (at most 63 of A-Z a-z 0-9 - _ ., starting and ending
// alphanumeric; apimachinery validation.IsValidLabelValue), which also
// keeps whitespace and control characters out. The error says why.
func CheckInstanceType(s string) error {
	if s == "" {
		return errors.New(`instance type "" is empty`)
	}
	if errs := validation.IsValidLabelValue(s); len(errs) > 0 {
		return fmt.Errorf("instance type %s: %s", strconv.Quote(s), strings.Join(errs, "; "))
	}
	return nil
}

// CheckPrometheusAddress checks RenderOptions.PrometheusAddress: an
// absolute http or https URL with a host (KEDA's prometheus scaler
// serverAddress), parsed with net/url. The error says why.
func CheckPrometheusAddress(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%s is not a URL: %w", strconv.Quote(s), errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%s: want an absolute http:// or https:// URL, e.g. http://prometheus.monitoring.svc:9090", strconv.Quote(s))
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%s: the URL has no host", strconv.Quote(s))
	}
	return nil
}

// ParseNodeClass parses a NodePool nodeClassRef written "group/kind/name"
// (karpenter.k8s.aws/EC2NodeClass/default): three non-empty parts without
// whitespace or control characters. The error says why.
func ParseNodeClass(s string) (NodeClassRef, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return NodeClassRef{}, fmt.Errorf("%s: want group/kind/name, e.g. karpenter.k8s.aws/EC2NodeClass/default", strconv.Quote(s))
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 || Printable(s) != s {
		return NodeClassRef{}, fmt.Errorf("%s: whitespace or control characters in a nodeClassRef", strconv.Quote(s))
	}
	return NodeClassRef{Group: parts[0], Kind: parts[1], Name: parts[2]}, nil
}
