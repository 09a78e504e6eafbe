package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

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

// CheckName checks RenderOptions.Name: the Job's name, and with
// "-fallback" the ScaledJob's and the NodePool's, so both must be DNS-1123
// subdomains (lower-case alphanumerics, '-' and '.', at most 253,
// starting and ending alphanumeric; apimachinery
// validation.IsDNS1123Subdomain, the rule the API server applies to these
// kinds' names). The error says why.
func CheckName(s string) error {
	for _, n := range []string{s, s + "-fallback"} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			return fmt.Errorf("name %s: %s", strconv.Quote(n), strings.Join(errs, "; "))
		}
	}
	return nil
}

// CheckNamespace checks RenderOptions.Namespace: a DNS-1123 label (at
// most 63 lower-case alphanumerics and '-', starting and ending
// alphanumeric; apimachinery validation.IsDNS1123Label, the API server's
// rule for Namespace names). The error says why.
func CheckNamespace(s string) error {
	if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
		return fmt.Errorf("namespace %s: %s", strconv.Quote(s), strings.Join(errs, "; "))
	}
	return nil
}

// CheckImage checks RenderOptions.Image: non-empty, without whitespace,
// control or other non-printable characters. It is a simple check, not a
// parse of the reference grammar (registry/path:tag@digest): the kubelet
// and the registry judge the rest, and a reference this passes can still
// fail to pull. The error says why.
func CheckImage(s string) error {
	if s == "" {
		return errors.New(`image "" is empty`)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || unicode.IsSpace(r) }) >= 0 || Printable(s) != s {
		return fmt.Errorf("image %s: whitespace or control characters in an image reference", strconv.Quote(s))
	}
	return nil
}

// CapacityTypes are the values of Karpenter's karpenter.sh/capacity-type
// label (Karpenter v1 docs, NodePools: on-demand, spot, and reserved for
// capacity reservations).
var CapacityTypes = []string{"on-demand", "spot", "reserved"}

// CheckCapacityType checks one of RenderOptions.CapacityTypes: one of
// CapacityTypes. The error says why.
func CheckCapacityType(s string) error {
	if !containsString(CapacityTypes, s) {
		return fmt.Errorf("capacity type %s: want one of %s", strconv.Quote(s), strings.Join(CapacityTypes, ", "))
	}
	return nil
}

// consolidateAfterPattern is Karpenter v1's validation of a NodePool's
// spec.disruption.consolidateAfter (the CRD's kubebuilder pattern): one or
// more whole-number s, m or h components ("0s", "1h30m"), or Never.
var consolidateAfterPattern = regexp.MustCompile(`^(([0-9]+(s|m|h))+|Never)$`)

// CheckConsolidateAfter checks a NodePool's
// spec.disruption.consolidateAfter as Karpenter's CRD does
// (consolidateAfterPattern): "0s" (consolidate at once) and "Never" are
// valid, a negative or fractional duration is not. The error says why.
func CheckConsolidateAfter(s string) error {
	if !consolidateAfterPattern.MatchString(s) {
		return fmt.Errorf("consolidateAfter %s: want a duration of whole s, m or h (0s, 30s, 1h30m) or Never", strconv.Quote(Printable(s)))
	}
	return nil
}

// CheckDuration checks a duration render writes, what naming it in the
// error: positive (or zero where zeroOK: Karpenter's consolidateAfter
// "0s"), and whole seconds, which both the NodePool's consolidateAfter
// (CheckConsolidateAfter) and the trigger's staleness in seconds need.
// The error says why.
func CheckDuration(what string, d time.Duration, zeroOK bool) error {
	switch {
	case d < 0 || (d == 0 && !zeroOK):
		want := "a positive duration"
		if zeroOK {
			want = "0s or a positive duration"
		}
		return fmt.Errorf("%s %s: want %s", what, d, want)
	case d%time.Second != 0:
		return fmt.Errorf("%s %s: want whole seconds", what, d)
	}
	return nil
}

// CheckQueueHost checks RenderOptions.QueueHost: an absolute amqp:// or
// amqps:// URL with a host, the form KEDA's RabbitMQ scaler takes in its
// host parameter with protocol amqp (KEDA docs, scalers/rabbitmq-queue),
// parsed with net/url. The error says why; it does not repeat a password
// the URL holds.
func CheckQueueHost(s string) error {
	u, err := url.Parse(s)
	shown := strconv.Quote(s)
	if err == nil && u.User != nil {
		shown = strconv.Quote(u.Redacted())
	}
	switch {
	case err != nil:
		return errors.New("the queue host is not a URL")
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return fmt.Errorf("%s: want an absolute amqp:// or amqps:// URL, e.g. amqp://rabbitmq.queues.svc:5672/", shown)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%s: the URL has no host", shown)
	}
	return nil
}

// CheckQueueName checks RenderOptions.QueueName: RabbitMQ allows any
// UTF-8 queue name up to 255 bytes; render also refuses whitespace,
// control characters, quotes and backslashes, because the name goes into
// a PromQL label matcher of the health trigger. The error says why.
func CheckQueueName(s string) error { return checkMatcherValue("queue name", s, 255) }

// CheckScrapeJob checks RenderOptions.ScrapeJob, the value of a Prometheus
// job label: non-empty, at most 253 bytes, without whitespace, control
// characters, quotes or backslashes (it goes into a PromQL label matcher).
// The error says why.
func CheckScrapeJob(s string) error { return checkMatcherValue("scrape job", s, 253) }

func checkMatcherValue(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%s %q is empty", what, s)
	case len(s) > max:
		return fmt.Errorf("%s %s is %d bytes, at most %d", what, strconv.Quote(s), len(s), max)
	case strings.IndexFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("\"'`\\", r)
	}) >= 0:
		return fmt.Errorf("%s %s: whitespace, control characters, quotes or backslashes", what, strconv.Quote(s))
	}
	return nil
}
