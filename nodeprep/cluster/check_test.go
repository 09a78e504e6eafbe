package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// metrics mirrors nodeprep.MetricLabels (this package may not import
// nodeprep; the cmd golden tests use the real table).
var metrics = map[string][]string{
	"nodeprep_ready": nil, "nodeprep_last_run_timestamp_seconds": nil, "nodeprep_gpus": nil,
	"nodeprep_stage_ok": {"stage"},
}

func mustPool(t testing.TB, label string, taints ...string) Pool {
	t.Helper()
	l, err := k3s.ParseLabel(label)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := k3s.ParseTaints(taints)
	if err != nil {
		t.Fatal(err)
	}
	return Pool{Label: l, Labels: []k3s.Label{l}, Taints: ts, Arch: "amd64", DeviceNames: []string{"uuid"}, DriverRoot: "/run/opengl-driver"}
}

// seedPool is the first seed setup: sku=gpu:NoSchedule, payload=task_runner.
func seedPool(t testing.TB) Pool { return mustPool(t, "payload=task_runner", "sku=gpu:NoSchedule") }

func checkString(t *testing.T, pool Pool, manifest string) *Report {
	t.Helper()
	objs, skipped, err := Read("m.yaml", strings.NewReader(manifest))
	if err != nil {
		t.Fatal(err)
	}
	return Check(objs, skipped, CheckOptions{Pool: pool, Metrics: metrics})
}

func cell(t *testing.T, r *Report, object, column string) Cell {
	t.Helper()
	for _, row := range r.Rows {
		if row.Object != object {
			continue
		}
		for _, c := range row.Cells {
			if c.Column == column && c.Verdict != VerdictNA {
				return c
			}
		}
	}
	t.Fatalf("no judged cell %s × %s in %+v", object, column, r.Rows)
	return Cell{}
}

const gpuPod = `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]
  runtimeClassName: nvidia-cdi
`

// TestSchedulingReasons: each way a pod misses the pool gives its exact
// reason and a fix.
func TestSchedulingReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec  string
		ok          bool
		reason, fix string
	}{
		{"tolerated and selected", "  nodeSelector: {payload: task_runner, nodeprep.dev/gpu-ready: \"true\"}\n  tolerations: [{key: sku, operator: Equal, value: gpu, effect: NoSchedule}]\n", true, "", ""},
		{"Exists without effect", "  nodeSelector: {nodeprep.dev/gpu-ready: \"true\"}\n  tolerations: [{key: sku, operator: Exists}]\n", true, "", ""},
		{"gpu-ready by affinity", "  tolerations: [{key: sku, operator: Exists}]\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: nodeprep.dev/gpu-ready, operator: In, values: [\"true\"]}]}]}}}\n", true, "", ""},
		{"ignores gpu-ready", "  nodeSelector: {payload: task_runner}\n  tolerations: [{key: sku, operator: Exists}]\n", false, "does not require nodeprep.dev/gpu-ready=true", `add nodeSelector nodeprep.dev/gpu-ready: "true"`},
		{"missing toleration", "", false, "untolerated taint sku=gpu:NoSchedule", "add toleration {key: sku, operator: Equal, value: \"gpu\", effect: NoSchedule}"},
		{"wrong effect", "  tolerations: [{key: sku, operator: Equal, value: gpu, effect: NoExecute}]\n", false, "effect NoExecute, not NoSchedule", "add toleration"},
		{"Equal without value", "  tolerations: [{key: sku, operator: Equal, effect: NoSchedule}]\n", false, `operator Equal with value "", not "gpu"`, "add toleration"},
		{"key typo", "  tolerations: [{key: skus, operator: Exists}]\n", false, `toleration key "skus" is not "sku"`, "add toleration"},
		{"selector value typo", "  nodeSelector: {payload: task_runer}\n  tolerations: [{operator: Exists}]\n", false, "nodeSelector payload=task_runer: pool nodes have payload=task_runner", `set nodeSelector payload: "task_runner"`},
		{"selector key typo", "  nodeSelector: {paylod: task_runner}\n  tolerations: [{operator: Exists}]\n", false, "no label paylod (they have payload=task_runner)", "set nodeSelector payload"},
		{"required affinity", "  tolerations: [{operator: Exists}]\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: payload, operator: In, values: [other]}]}]}}}\n", false, "term 1: payload In [other] (pool nodes have payload=task_runner)", "make one nodeSelectorTerm match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := checkString(t, seedPool(t), gpuPod+tt.spec)
			c := cell(t, r, "pod/p", ColumnOnPrem)
			if (c.Verdict == VerdictOK) != tt.ok || !strings.Contains(c.Reason, tt.reason) || !strings.Contains(c.Fix, tt.fix) {
				t.Errorf("cell %+v; want ok=%t, reason containing %q, fix containing %q", c, tt.ok, tt.reason, tt.fix)
			}
			if r.OK != tt.ok {
				t.Errorf("report OK %t, want %t", r.OK, tt.ok)
			}
		})
	}
}

func TestTaintSquatter(t *testing.T) {
	t.Parallel()
	pool := seedPool(t)
	squat := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      tolerations: [{key: sku, operator: Exists}]\n      containers: [{name: c, image: i}]\n"
	c := cell(t, checkString(t, pool, squat), "deployment/web", ColumnOnPrem)
	if c.Verdict != VerdictFail || !strings.Contains(c.Reason, "without requesting nvidia.com/gpu") {
		t.Errorf("squatter: %+v", c)
	}
	// A monitoring DaemonSet that tolerates everything is not flagged.
	ds := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: node-exporter}\nspec:\n  template:\n    spec:\n      tolerations: [{operator: Exists}]\n      containers: [{name: c, image: prom/node-exporter}]\n"
	if r := checkString(t, pool, ds); len(r.Rows) != 0 || r.Ignored != 1 {
		t.Errorf("DaemonSet: rows %+v, ignored %d", r.Rows, r.Ignored)
	}
}

func TestMetricRefs(t *testing.T) {
	t.Parallel()
	got := MetricRefs(`sum(nodeprep_stage_ok{stage="selftest", instance=~"gpu.*"}) + count(nodeprep_ready == 1) or label_replace(up, "x", "nodeprep_fake", "", "")`)
	want := []MetricRef{{Name: "nodeprep_stage_ok", Labels: []string{"stage", "instance"}}, {Name: "nodeprep_ready"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MetricRefs = %+v, want %+v", got, want)
	}
}

// FuzzMetricRefs: the scanner never panics, and every name it returns is a
// nodeprep_ identifier that occurs in the query.
func FuzzMetricRefs(f *testing.F) {
	f.Add(`sum(nodeprep_stage_ok{stage="selftest"}) or vector(0)`)
	f.Add(`nodeprep_ready{instance=~"a\\"b", job='x'}`)
	f.Add("nodeprep_ready{")
	f.Fuzz(func(t *testing.T, q string) {
		for _, r := range MetricRefs(q) {
			if !strings.HasPrefix(r.Name, "nodeprep_") || !strings.Contains(q, r.Name) {
				t.Fatalf("ref %q from %q", r.Name, q)
			}
			for _, l := range r.Labels {
				if l == "" || !strings.Contains(q, l) {
					t.Fatalf("label %q from %q", l, q)
				}
			}
		}
	})
}

func TestTriggers(t *testing.T) {
	t.Parallel()
	const queue = `
  - type: rabbitmq
    metadata: {host: "amqp://mq:5672/", queueName: jobs, mode: QueueLength, value: "1"}`
	sj := func(query, more string) string {
		return fmt.Sprintf(`apiVersion: keda.sh/v1alpha1
kind: ScaledJob
metadata: {name: cloud}
spec:
  jobTargetRef: {template: {spec: {containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: 1}}}]}}}
  triggers:
  - type: prometheus
    metadata: {serverAddress: "http://p", threshold: "1", query: %q}%s
`, query, more)
	}
	tests := []struct{ query, more, reason string }{
		{`count(nodeprep_ready{job="pool-a"} == 1)`, queue, ""},
		{PoolDownQuery("pool-a", DefaultQueueMetric, "jobs", 900), queue, ""},
		// A work trigger may be a prometheus query on the work's own metric.
		{PoolDownQuery("pool-a", DefaultQueueMetric, "jobs", 900), `
  - type: prometheus
    metadata: {serverAddress: "http://p", threshold: "1", query: "sum(rabbitmq_queue_messages_ready)"}`, ""},
		// The old rendered query: every pool's nodes count.
		{`((count((nodeprep_ready == 1) and ((time() - nodeprep_last_run_timestamp_seconds) < 900)) or vector(0)) == bool 0) * 8`, queue,
			"trigger 1: nodeprep_ready selects no pool"},
		// The health trigger alone: Jobs whenever the pool is down, work or not.
		{`count(nodeprep_ready{job="pool-a"} == 1)`, "", "no trigger on the work waiting"},
		{`count(nodeprep_redy{job="pool-a"} == 1)`, queue, "nodeprep exports no metric nodeprep_redy"},
		{`count(nodeprep_ready{pool="a"} == 1)`, queue, `nodeprep_ready has no label "pool"`},
		{"sum(nodeprep_gpus)", queue, "no prometheus trigger watches nodeprep_ready"},
		{"nodeprep_ready{{{", queue, `query does not parse: '{' at offset 16 is not closed`},
		{"count(nodeprep_ready == 1", queue, `query does not parse: '(' at offset 5 is not closed`},
		{"count(nodeprep_ready == 1))", queue, `query does not parse: ')' at offset 26 closes nothing`},
		{`count(nodeprep_ready{instance="a) == 1)`, queue, "query does not parse: the string starting at offset 30 is not closed"},
		{"sum(nodeprep_ready[5m)]", queue, `query does not parse: ')' at offset 21 does not close '[' at offset 18`},
		{" ", queue, "query does not parse: the query is empty"},
		// Brackets inside strings and comments do not count.
		{"count(nodeprep_ready{instance=~\"a(\\\"\"} == 1) # (", queue, ""},
	}
	for _, tt := range tests {
		c := cell(t, checkString(t, seedPool(t), sj(tt.query, tt.more)), "scaledjob/cloud", ColumnMetrics)
		if (tt.reason == "") != (c.Verdict == VerdictOK) || !strings.Contains(c.Reason, tt.reason) {
			t.Errorf("query %q: %+v, want reason %q", tt.query, c, tt.reason)
		}
	}
}

// TestPoolDownQuery: the health trigger's query selects the pool by its
// scrape job in both of its nodeprep metrics, and the queue by name.
func TestPoolDownQuery(t *testing.T) {
	t.Parallel()
	q := PoolDownQuery("gpu-a", "rabbitmq_queue_messages_ready", "jobs", 270)
	want := `(sum(rabbitmq_queue_messages_ready{queue="jobs"}) or vector(0)) * ((count((nodeprep_ready{job="gpu-a"} == 1) and ((time() - nodeprep_last_run_timestamp_seconds{job="gpu-a"}) < 270)) or vector(0)) == bool 0)`
	if q != want {
		t.Errorf("query\n%s\nwant\n%s", q, want)
	}
	if err := QueryStructure(q); err != nil {
		t.Error(err)
	}
}

// FuzzQueryStructure: the structural check never panics, and a query made
// of a valid one by removing its last closing bracket fails it.
func FuzzQueryStructure(f *testing.F) {
	f.Add(`((count((nodeprep_ready == 1) and ((time() - nodeprep_last_run_timestamp_seconds) < 900)) or vector(0)) == bool 0) * 4`)
	f.Add(`sum(rate(x{a="b)"}[5m]))`)
	f.Add("nodeprep_ready{{{")
	f.Add("`a\\`")
	f.Fuzz(func(t *testing.T, q string) {
		if QueryStructure(q) != nil {
			return
		}
		if i := strings.LastIndexAny(q, ")}]"); i >= 0 && !strings.ContainsAny(q, "\"'`#") {
			if QueryStructure(q[:i]+q[i+1:]) == nil {
				t.Fatalf("%q passes without its last closing bracket", q)
			}
		}
	})
}

func renderSeed(t testing.TB, pool Pool) []Document {
	t.Helper()
	docs, err := Render(RenderOptions{Pool: pool, FallbackInstanceTypes: []string{"g5.xlarge"}, MaxGPUs: 8,
		Image: "ghcr.io/example/render:1.0", PrometheusAddress: "http://prometheus.monitoring.svc:9090",
		ScrapeJob: "gpu-pool", QueueName: "gpu-jobs", QueueHost: "amqp://rabbitmq.queues.svc:5672/",
		NodeClass: NodeClassRef{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// TestCheckFindsPlaceholders: render's output with its placeholders left
// in is not OK: each placeholder is a finding of its own, naming the field.
func TestCheckFindsPlaceholders(t *testing.T) {
	t.Parallel()
	pool := seedPool(t)
	docs, err := Render(RenderOptions{Pool: pool, FallbackInstanceTypes: []string{"g5.xlarge"}, MaxGPUs: 8})
	if err != nil {
		t.Fatal(err)
	}
	objs, skipped, err := Read("render.yaml", bytes.NewReader(Join(docs)))
	if err != nil {
		t.Fatal(err)
	}
	r := Check(objs, skipped, CheckOptions{Pool: pool, Metrics: metrics})
	var got []string
	for _, row := range r.Rows {
		if row.Role == RolePlaceholder {
			got = append(got, row.Object+" "+row.Cells[0].Reason)
		}
	}
	want := []string{
		"job/default/nodeprep-gpu containers[0].image still holds the placeholder REPLACE_ME",
		"scaledjob/default/nodeprep-gpu-fallback spec.jobTargetRef.template.spec.containers[0].image still holds the placeholder REPLACE_ME",
		"scaledjob/default/nodeprep-gpu-fallback spec.triggers[0].metadata.host still holds the placeholder REPLACE_ME",
		"scaledjob/default/nodeprep-gpu-fallback spec.triggers[0].metadata.queueName still holds the placeholder REPLACE_ME",
		"scaledjob/default/nodeprep-gpu-fallback spec.triggers[1].metadata.query still holds the placeholder REPLACE_ME",
		"scaledjob/default/nodeprep-gpu-fallback spec.triggers[1].metadata.serverAddress still holds the placeholder REPLACE_ME",
		"nodepool/nodeprep-gpu-fallback spec.template.spec.nodeClassRef.group still holds the placeholder REPLACE_ME",
		"nodepool/nodeprep-gpu-fallback spec.template.spec.nodeClassRef.kind still holds the placeholder REPLACE_ME",
		"nodepool/nodeprep-gpu-fallback spec.template.spec.nodeClassRef.name still holds the placeholder REPLACE_ME",
	}
	if r.OK || !slices.Equal(got, want) {
		t.Errorf("ok %t, placeholder findings:\n%s\nwant:\n%s", r.OK, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCheckNamesEveryTaint: a workload that tolerates none of two pool
// taints (one with the wrong effect) is told about both at once, with one
// toleration for each.
func TestCheckNamesEveryTaint(t *testing.T) {
	t.Parallel()
	pool := mustPool(t, "payload=task_runner", "nvidia.com/gpu=present:NoSchedule", "sku=gpu:NoSchedule")
	r := checkString(t, pool, gpuPod+"  nodeSelector: {payload: task_runner, nodeprep.dev/gpu-ready: \"true\"}\n  tolerations: [{key: sku, operator: Equal, value: gpu, effect: NoExecute}]\n")
	c := cell(t, r, "pod/p", ColumnOnPrem)
	for _, want := range []string{"untolerated taints (2) nvidia.com/gpu=present:NoSchedule, sku=gpu:NoSchedule (", "effect NoExecute, not NoSchedule"} {
		if !strings.Contains(c.Reason, want) {
			t.Errorf("reason %q does not contain %q", c.Reason, want)
		}
	}
	if !strings.Contains(c.Fix, "key: nvidia.com/gpu") || !strings.Contains(c.Fix, "key: sku") {
		t.Errorf("fix %q does not add both tolerations", c.Fix)
	}
}

// TestRenderPassesCheck: check passes on render's own output, for both
// seed setups.
func TestRenderPassesCheck(t *testing.T) {
	t.Parallel()
	for _, pool := range []Pool{seedPool(t), mustPool(t, "nodeprep.dev/pool=gpu", "nvidia.com/gpu=present:NoSchedule", "dedicated=ml:NoExecute")} {
		objs, skipped, err := Read("render.yaml", bytes.NewReader(Join(renderSeed(t, pool))))
		if err != nil {
			t.Fatal(err)
		}
		r := Check(objs, skipped, CheckOptions{Pool: pool, Metrics: metrics})
		if !r.OK || len(skipped) != 0 {
			t.Errorf("pool %s: check fails on render's output: %+v", pool.Label, r.Rows)
		}
		roles := map[string]bool{}
		for _, row := range r.Rows {
			roles[row.Role] = true
		}
		for _, want := range []string{RoleDevicePlugin, RoleGPUWorkload, RoleCloudTier, RoleTrigger, RoleNodePool} {
			if !roles[want] {
				t.Errorf("no %s row in %+v", want, r.Rows)
			}
		}
	}
}

func TestRenderNeedsPoolLabel(t *testing.T) {
	t.Parallel()
	if _, err := Render(RenderOptions{}); err == nil || !strings.Contains(err.Error(), "pool label") {
		t.Errorf("err = %v", err)
	}
}

// TestRenderMatchesCRDSchemas checks every rendered KEDA and Karpenter
// field against the projects' published CRD schemas (known property,
// type, enum, required), as the API server would.
func TestRenderMatchesCRDSchemas(t *testing.T) {
	t.Parallel()
	schemas := map[string]string{"scaledjob.yaml": "keda.sh_scaledjobs.v1alpha1.json", "nodepool.yaml": "karpenter.sh_nodepools.v1.json"}
	for _, d := range renderSeed(t, seedPool(t)) {
		name, ok := schemas[d.File]
		if !ok {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(upstream, "crds", name))
		if err != nil {
			t.Fatal(err)
		}
		var schema map[string]any
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(d.Data)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(js, &doc); err != nil {
			t.Fatal(err)
		}
		if errs := validateSchema("", doc, schema); len(errs) > 0 {
			t.Errorf("%s against %s:\n%s", d.File, name, strings.Join(errs, "\n"))
		}
	}
	// The validator is not vacuous: a misspelt field fails it.
	raw, _ := os.ReadFile(filepath.Join(upstream, "crds", "karpenter.sh_nodepools.v1.json"))
	var schema map[string]any
	json.Unmarshal(raw, &schema)
	bad := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"requirements": []any{}, "nodeClassRef": map[string]any{"group": "g", "kind": "k", "name": "n"}, "taint": []any{}}}, "disruption": map[string]any{"consolidationPolicy": "Sometimes"}}}
	if errs := validateSchema("", bad, schema); len(errs) != 2 {
		t.Errorf("a bad NodePool gave %q; want the unknown field and the enum", errs)
	}
}

// validateSchema checks v against an OpenAPI v3 structural schema: the
// subset CRDs use (object properties and additionalProperties, arrays,
// scalars, enum, required, anyOf, int-or-string, preserve-unknown-fields).
func validateSchema(path string, v any, s map[string]any) []string {
	if s["x-kubernetes-preserve-unknown-fields"] == true && s["properties"] == nil {
		return nil
	}
	if s["x-kubernetes-int-or-string"] == true {
		switch v.(type) {
		case string, float64:
			return nil
		}
		return []string{path + ": want an integer or a string"}
	}
	if alts, ok := s["anyOf"].([]any); ok && s["type"] == nil {
		for _, alt := range alts {
			if len(validateSchema(path, v, alt.(map[string]any))) == 0 {
				return nil
			}
		}
		return []string{path + ": matches no anyOf branch"}
	}
	var errs []string
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
		errs = append(errs, fmt.Sprintf("%s: %v not in enum %v", path, v, enum))
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return append(errs, path+": want an object")
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range asSlice(s["required"]) {
			if _, ok := m[r.(string)]; !ok {
				errs = append(errs, fmt.Sprintf("%s: required field %s missing", path, r))
			}
		}
		for k, x := range m {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, validateSchema(path+"."+k, x, ps)...)
				continue
			}
			if ap, ok := s["additionalProperties"].(map[string]any); ok {
				errs = append(errs, validateSchema(path+"."+k, x, ap)...)
				continue
			}
			if s["x-kubernetes-preserve-unknown-fields"] == true || path == ".metadata" {
				continue
			}
			errs = append(errs, fmt.Sprintf("%s: unknown field %q", path, k))
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return append(errs, path+": want an array")
		}
		if items, ok := s["items"].(map[string]any); ok {
			for i, x := range a {
				errs = append(errs, validateSchema(fmt.Sprintf("%s[%d]", path, i), x, items)...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			errs = append(errs, path+": want a string")
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			errs = append(errs, path+": want an integer")
		}
	case "number":
		if _, ok := v.(float64); !ok {
			errs = append(errs, path+": want a number")
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			errs = append(errs, path+": want a boolean")
		}
	}
	return errs
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// BenchmarkCheck1000 reads and checks one file of 1,000 GPU Deployments
// against the pool and a fallback NodePool.
func BenchmarkCheck1000(b *testing.B) {
	var buf bytes.Buffer
	for _, d := range renderSeed(b, seedPool(b)) {
		if d.File == "nodepool.yaml" {
			buf.Write(d.Data)
		}
	}
	for i := range 1000 {
		fmt.Fprintf(&buf, `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: w%d, namespace: team}
spec:
  replicas: 2
  selector: {matchLabels: {app: w%d}}
  template:
    metadata: {labels: {app: w%d}}
    spec:
      nodeSelector: {payload: task_runner}
      tolerations: [{key: sku, operator: Equal, value: gpu, effect: NoSchedule}]
      affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, preference: {matchExpressions: [{key: karpenter.sh/nodepool, operator: DoesNotExist}]}}]}}
      containers:
      - name: main
        image: registry.example/w:%d
        args: [--serve, --port=8080]
        env: [{name: A, value: b}]
        resources: {limits: {nvidia.com/gpu: 1, cpu: "4", memory: 16Gi}, requests: {cpu: "2", memory: 8Gi}}
`, i, i, i, i)
	}
	data := buf.Bytes()
	pool := seedPool(b)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		objs, skipped, err := Read("bench.yaml", bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if r := Check(objs, skipped, CheckOptions{Pool: pool, Metrics: metrics}); !r.OK || len(r.Rows) != 1001 {
			b.Fatalf("ok %t, %d rows", r.OK, len(r.Rows))
		}
	}
}

// TestJSONListReadsBack: render's documents as one JSON list read back as
// the same objects as the YAML stream, and pass check.
func TestJSONListReadsBack(t *testing.T) {
	t.Parallel()
	pool := seedPool(t)
	docs := renderSeed(t, pool)
	js, err := JSONList(docs)
	if err != nil {
		t.Fatal(err)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(js, &items); err != nil || len(items) != len(docs) {
		t.Fatalf("not a JSON list of %d documents (%d, %v):\n%s", len(docs), len(items), err, js)
	}
	fromJSON, skipped, err := Read("render.json", bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	fromYAML, _, err := Read("render.yaml", bytes.NewReader(Join(docs)))
	if err != nil {
		t.Fatal(err)
	}
	ids := func(objs []Object) (out []string) {
		for _, o := range objs {
			if o.Kind == KindHelmValues {
				o.Name = "" // named by its file
			}
			out = append(out, o.Kind+" "+o.Name)
		}
		return out
	}
	if got, want := ids(fromJSON), ids(fromYAML); !slices.Equal(got, want) {
		t.Errorf("from JSON %q, from YAML %q", got, want)
	}
	if fromJSON[1].Source != "render.json#1/1" {
		t.Errorf("source %q, want render.json#1/1", fromJSON[1].Source)
	}
	if r := Check(fromJSON, skipped, CheckOptions{Pool: pool, Metrics: metrics}); !r.OK {
		t.Errorf("check fails on the JSON list: %+v", r.Rows)
	}
}

// TestCheckNothingJudged: a check that judges no object is not OK, whether
// the input is empty or holds only objects unrelated to the pool.
func TestCheckNothingJudged(t *testing.T) {
	t.Parallel()
	for name, manifest := range map[string]string{
		"empty":         "",
		"comments only": "# nothing\n---\n",
		"unrelated":     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: c, image: nginx}]}}}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\n",
	} {
		r := checkString(t, seedPool(t), manifest)
		if r.OK || len(r.Rows) != 0 {
			t.Errorf("%s: ok %v with %d rows; want not ok, no rows", name, r.OK, len(r.Rows))
		}
	}
	if r := checkString(t, seedPool(t), "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {containers: [{name: c, image: nginx}]}}}\n"); r.Ignored != 1 {
		t.Errorf("ignored %d, want 1", r.Ignored)
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"job/default/web", "job/default/web"},
		{`C:\path`, `C:\path`}, // nothing to escape: a backslash stays single
		{"evil\u202egpj", `evil\u202egpj`},
		{"a\u2066b\u2069", `a\u2066b\u2069`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"nl\nesc\x1b[31m", `nl\nesc\x1b[31m`},
		{"bad\xffutf8", `bad\xffutf8`},
		{`back\slash` + "\u202e", `back\\slash\u202e`},
		{"grüße ☃", "grüße ☃"},
		{"\U000e0001tag", `\U000e0001tag`},
	}
	for _, tt := range tests {
		if got := Printable(tt.in); got != tt.want {
			t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzPrintable: the result holds only printable runes, and printing it
// again changes nothing.
func FuzzPrintable(f *testing.F) {
	f.Add("evil\u202egpj")
	f.Add("a\\b\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		p := Printable(s)
		for _, r := range p {
			if !unicode.IsPrint(r) || r == utf8.RuneError && !strings.Contains(s, "\ufffd") {
				t.Fatalf("Printable(%q) = %q holds %U", s, p, r)
			}
		}
		if Printable(p) != p {
			t.Fatalf("Printable(%q) = %q is not stable", s, p)
		}
	})
}

// TestRenderValues: Render refuses, as malformed input naming the value,
// a bad name, namespace, image or capacity type and a negative or
// fractional-second duration; consolidateAfter nil is the 5m default and
// zero is rendered as Karpenter's 0s, which check reads back.
func TestRenderValues(t *testing.T) {
	t.Parallel()
	d := func(s string) *time.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	pool := seedPool(t)
	for _, tt := range []struct {
		opts RenderOptions
		want string
	}{
		{RenderOptions{Name: "x/y"}, `name "x/y": a lowercase RFC 1123 subdomain`},
		{RenderOptions{Namespace: "Bad_NS"}, `namespace "Bad_NS": a lowercase RFC 1123 label`},
		{RenderOptions{Image: "bad image ref"}, `image "bad image ref": whitespace`},
		{RenderOptions{Image: "img\u202e"}, `image "img\u202e": whitespace or control`},
		{RenderOptions{CapacityTypes: []string{"spot", "bogus"}}, `capacity type "bogus": want one of on-demand, spot, reserved`},
		{RenderOptions{HealthInterval: -time.Minute}, `health interval -1m0s: want a positive duration`},
		{RenderOptions{ConsolidateAfter: d("-1m")}, `consolidateAfter -1m0s: want 0s or a positive duration`},
		{RenderOptions{ConsolidateAfter: d("1.5s")}, `consolidateAfter 1.5s: want whole seconds`},
		{RenderOptions{QueueHost: "http://mq:15672"}, `"http://mq:15672": want an absolute amqp:// or amqps:// URL`},
		{RenderOptions{QueueHost: "amqp://user:secret@"}, `"amqp://user:xxxxx@": the URL has no host`},
		{RenderOptions{QueueName: `jobs"}`}, `queue name "jobs\"}": whitespace, control characters, quotes or backslashes`},
		{RenderOptions{ScrapeJob: "gpu pool"}, `scrape job "gpu pool": whitespace`},
		{RenderOptions{QueueMetric: "rabbitmq-ready"}, `queue metric "rabbitmq-ready": want a Prometheus metric name`},
		{RenderOptions{QueueBacklog: -1}, `queue backlog -1 is negative`},
	} {
		tt.opts.Pool = pool
		if _, err := Render(tt.opts); !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err = %v, want malformed naming %q", tt.opts, err, tt.want)
		}
	}
	for _, tt := range []struct {
		after *time.Duration
		want  string
	}{{nil, "5m"}, {d("0s"), "0s"}, {d("1h30m"), "1h30m"}, {d("90s"), "1m30s"}} {
		docs, err := Render(RenderOptions{Pool: pool, ConsolidateAfter: tt.after})
		if err != nil {
			t.Fatal(err)
		}
		objs, _, err := Read("render.yaml", bytes.NewReader(Join(docs)))
		if err != nil {
			t.Fatalf("consolidateAfter %s: check refuses render's output: %v", tt.want, err)
		}
		var got []string
		for _, o := range objs {
			if o.NodePool != nil {
				got = append(got, o.NodePool.Spec.Disruption.ConsolidateAfter)
			}
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("consolidateAfter %v: rendered %q, want %q", tt.after, got, tt.want)
		}
	}
}
