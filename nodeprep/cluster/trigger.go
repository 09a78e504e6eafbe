package cluster

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
)

// MetricReady is the metric a cloud tier must watch: 1 on a pool node whose
// last nodeprep run (up or health) declared it ready.
const MetricReady = "nodeprep_ready"

// triggerRows judges the prometheus triggers: every nodeprep_ metric a
// query names must be one nodeprep exports, matched only on its labels or
// the target's; requireReady demands one trigger on MetricReady.
func (c *checker) triggerRows(base Row, triggers []ScaleTrigger, requireReady bool) []Row {
	var why, fixes []string
	ready := false
	judged := false
	for i, t := range triggers {
		if t.Type != "prometheus" {
			continue
		}
		q := t.Metadata["query"]
		if err := QueryStructure(q); err != nil {
			judged = true
			why = append(why, fmt.Sprintf("trigger %d: query does not parse: %v", i+1, err))
			fixes = append(fixes, fmt.Sprintf("fix trigger %d's query (its brackets and quotes); promtool or the Prometheus UI shows the full parse error", i+1))
			// The broken query is the finding: no second one for the metric.
			ready = ready || slices.ContainsFunc(MetricRefs(q), func(r MetricRef) bool { return r.Name == MetricReady })
			continue
		}
		refs := MetricRefs(q)
		if len(refs) > 0 {
			judged = true
		}
		for _, ref := range refs {
			labels, ok := c.metrics[ref.Name]
			if !ok {
				why = append(why, fmt.Sprintf("trigger %d: nodeprep exports no metric %s", i+1, ref.Name))
				if near := nearestMetric(ref.Name, c.metrics); near != "" {
					fixes = append(fixes, fmt.Sprintf("use %s", near))
				} else {
					fixes = append(fixes, "use one of: "+strings.Join(sortedKeys(c.metrics), ", "))
				}
				continue
			}
			if ref.Name == MetricReady {
				ready = true
				if len(ref.Labels) == 0 {
					why = append(why, fmt.Sprintf("trigger %d: %s selects no pool: every pool's nodes count, so one pool's ready nodes hide another's outage", i+1, MetricReady))
					fixes = append(fixes, fmt.Sprintf(`match %s on the scrape job of this pool's nodes, e.g. %s{job="gpu-pool-a"} (nodeprep cluster render --scrape-job writes it)`, MetricReady, MetricReady))
				}
			}
			for _, l := range ref.Labels {
				if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
					have := append(slices.Clone(labels), targetLabels...)
					why = append(why, fmt.Sprintf("trigger %d: %s has no label %q (it has %s)", i+1, ref.Name, l, strings.Join(have, ", ")))
					fixes = append(fixes, fmt.Sprintf("drop the matcher on %q", l))
				}
			}
		}
	}
	if requireReady && !slices.ContainsFunc(triggers, isWorkTrigger) {
		judged = true
		why = append(why, "no trigger on the work waiting (a queue's scaler): with only the health trigger KEDA starts maxReplicaCount Jobs whenever the pool is down, with or without work")
		fixes = append(fixes, "add your queue's trigger, e.g. type rabbitmq with mode QueueLength (nodeprep cluster render --queue-name --queue-host writes one), and multipleScalersCalculation max")
	}
	if requireReady && !ready {
		judged = true
		why = append(why, "no prometheus trigger watches "+MetricReady+": the cloud tier does not notice when the pool breaks")
		fixes = append(fixes, "add a prometheus trigger on "+MetricReady+" (nodeprep cluster render writes one)")
	}
	if !judged {
		return nil
	}
	row := base
	row.Role = RoleTrigger
	cell := Cell{Column: ColumnMetrics, Verdict: VerdictOK}
	if len(why) > 0 {
		cell = Cell{Column: ColumnMetrics, Verdict: VerdictFail, Reason: strings.Join(why, "; "), Fix: strings.Join(fixes, "; ")}
	}
	row.Cells = []Cell{cell}
	return []Row{row}
}

// isWorkTrigger reports whether t scales on the work waiting: any scaler
// but prometheus (a queue's: rabbitmq, kafka, aws-sqs-queue, …), or a
// prometheus trigger whose query names none of nodeprep's metrics.
func isWorkTrigger(t ScaleTrigger) bool {
	return t.Type != "prometheus" || len(MetricRefs(t.Metadata["query"])) == 0
}

// MetricRef is one nodeprep_ metric a PromQL query names, with the label
// names its selector matches on.
type MetricRef struct {
	Name   string
	Labels []string
}

// MetricRefs scans a PromQL query for metric names starting nodeprep_ and
// the label names in the selector braces that follow each. It is a scanner,
// not a parser (the Prometheus parser would pull in the whole Prometheus
// module for two facts): string literals are skipped, so a name in a label
// value does not count.
func MetricRefs(q string) []MetricRef {
	var refs []MetricRef
	for i := 0; i < len(q); {
		ch := q[i]
		switch {
		case ch == '"' || ch == '\'' || ch == '`':
			i = skipString(q, i)
		case isIdentStart(ch):
			j := i
			for j < len(q) && isIdent(q[j]) {
				j++
			}
			name := q[i:j]
			i = j
			if !strings.HasPrefix(name, "nodeprep_") {
				continue
			}
			ref := MetricRef{Name: name}
			k := j
			for k < len(q) && (q[k] == ' ' || q[k] == '\t' || q[k] == '\n') {
				k++
			}
			if k < len(q) && q[k] == '{' {
				ref.Labels, i = selectorLabels(q, k+1)
			}
			refs = append(refs, ref)
		default:
			i++
		}
	}
	return refs
}

// QueryStructure checks a PromQL query's structure: it is not empty, its
// parentheses, braces and brackets nest and close, and its string literals
// ("...", '...', `...`) end. It is not a PromQL parser (see MetricRefs for
// why nodeprep has none): a query that passes may still be wrong, but one
// that fails is refused by Prometheus (KEDA's trigger then reports errors).
// The error names the offending character and its byte offset.
func QueryStructure(q string) error {
	if strings.TrimSpace(q) == "" {
		return errors.New("the query is empty")
	}
	type open struct {
		ch  byte
		off int
	}
	var stack []open
	closer := map[byte]byte{'(': ')', '{': '}', '[': ']'}
	for i := 0; i < len(q); {
		switch ch := q[i]; ch {
		case '"', '\'', '`':
			if !stringClosed(q, i) {
				return fmt.Errorf("the string starting at offset %d is not closed", i)
			}
			i = skipString(q, i)
			continue
		case '#':
			// A comment runs to the end of the line (PromQL lexer).
			for i < len(q) && q[i] != '\n' {
				i++
			}
			continue
		case '(', '{', '[':
			stack = append(stack, open{ch, i})
		case ')', '}', ']':
			if len(stack) == 0 {
				return fmt.Errorf("%q at offset %d closes nothing", ch, i)
			}
			top := stack[len(stack)-1]
			if closer[top.ch] != ch {
				return fmt.Errorf("%q at offset %d does not close %q at offset %d", ch, i, top.ch, top.off)
			}
			stack = stack[:len(stack)-1]
		}
		i++
	}
	if len(stack) > 0 {
		top := stack[len(stack)-1]
		return fmt.Errorf("%q at offset %d is not closed", top.ch, top.off)
	}
	return nil
}

// stringClosed reports whether the string literal starting at q[i] has its
// closing quote (skipString returns len(q) both for a literal that ends on
// the last byte and for one that never ends). Backquoted strings have no
// escapes (PromQL follows Go).
func stringClosed(q string, i int) bool {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		if q[j] == '\\' && quote != '`' {
			j++
			continue
		}
		if q[j] == quote {
			return true
		}
	}
	return false
}

// selectorLabels reads the label names of a selector starting after '{'
// and returns them and the index after '}'.
func selectorLabels(q string, i int) ([]string, int) {
	var labels []string
	expectName := true
	for i < len(q) {
		ch := q[i]
		switch {
		case ch == '}':
			return labels, i + 1
		case ch == '"' || ch == '\'' || ch == '`':
			i = skipString(q, i)
		case ch == ',':
			expectName = true
			i++
		case isIdentStart(ch) && expectName:
			j := i
			for j < len(q) && isIdent(q[j]) {
				j++
			}
			labels = append(labels, q[i:j])
			expectName = false
			i = j
		default:
			i++
		}
	}
	return labels, i
}

func skipString(q string, i int) int {
	quote := q[i]
	i++
	for i < len(q) {
		if q[i] == '\\' && quote != '`' {
			i += 2
			continue
		}
		if q[i] == quote {
			return i + 1
		}
		i++
	}
	return i
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c == ':' || c >= '0' && c <= '9' }

func nearestMetric(name string, m map[string][]string) string {
	best, bestD := "", 2 // one edit away: a typo, not another metric
	for _, k := range sortedKeys(m) {
		if d := levenshtein.ComputeDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The names render gives the ScaledJob's two triggers.
const (
	// TriggerBacklog is the queue trigger: the work waiting.
	TriggerBacklog = "queue-backlog"
	// TriggerPoolDown is the health trigger: the work waiting while the
	// pool is down.
	TriggerPoolDown = "pool-down"
)

// DefaultQueueMetric is the Prometheus metric of a RabbitMQ queue's ready
// messages, labelled queue and vhost, as RabbitMQ's rabbitmq_prometheus
// plugin exports it with per-object metrics (its /metrics/per-object
// endpoint, or prometheus.return_per_object_metrics = true).
const DefaultQueueMetric = "rabbitmq_queue_messages_ready"

var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// CheckQueueMetric checks RenderOptions.QueueMetric: a Prometheus metric
// name ([a-zA-Z_:][a-zA-Z0-9_:]*, Prometheus docs "Metric names and
// labels"). The error says why.
func CheckQueueMetric(s string) error {
	if !metricName.MatchString(s) {
		return fmt.Errorf("queue metric %q: want a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)", s)
	}
	return nil
}

// PoolDownQuery is the health trigger's PromQL: the messages ready in
// queue (queueMetric{queue="<queue>"}, summed over vhosts, 0 when
// absent) times 1 while no node of the scrape job job reports
// nodeprep_ready 1 from a run younger than staleSeconds, and times 0
// otherwise. It is 0 with no work waiting however broken the pool is, and
// it counts only the pool it guards: another pool's ready nodes (another
// scrape job) do not hide this one's outage. job, queue and queueMetric
// must pass CheckScrapeJob, CheckQueueName and CheckQueueMetric.
func PoolDownQuery(job, queueMetric, queue string, staleSeconds int64) string {
	return fmt.Sprintf(`(sum(%s{queue=%q}) or vector(0)) * ((count((%s{job=%q} == 1) and ((time() - nodeprep_last_run_timestamp_seconds{job=%q}) < %d)) or vector(0)) == bool 0)`,
		queueMetric, queue, MetricReady, job, job, staleSeconds)
}
