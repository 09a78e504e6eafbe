package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Verdicts of a Cell.
const (
	VerdictOK   = "ok"   // the rule holds
	VerdictFail = "fail" // the rule is broken: Reason and Fix say how
	VerdictNA   = "n/a"  // the rule does not apply to this pool
)

// Roles of a Row: why the object is judged.
const (
	RoleGPUWorkload  = "gpu-workload"  // requests nvidia.com/gpu or selects the pool
	RoleCloudTier    = "cloud-tier"    // a ScaledJob's Job template: judged on the fallback pools
	RoleDevicePlugin = "device-plugin" // the device plugin's DaemonSet or Helm values
	RoleTaintSquat   = "gpu-taint"     // tolerates the GPU taint without asking for a GPU
	RoleTrigger      = "trigger"       // a KEDA trigger on nodeprep's metrics
	RoleNodePool     = "nodepool"      // the fallback NodePool against the pool
)

// ColumnOnPrem and ColumnMetrics name the on-prem pool's column and the
// column of pool-independent rules (triggers); a NodePool's column is
// "nodepool/<name>".
const (
	ColumnOnPrem  = "on-prem"
	ColumnMetrics = "metrics"
)

// Cell is one rule's verdict for one object on one pool.
type Cell struct {
	Column  string `json:"column"`
	Verdict string `json:"verdict"`          // VerdictOK, VerdictFail or VerdictNA
	Reason  string `json:"reason,omitempty"` // why it fails (or a note on a pass)
	Fix     string `json:"fix,omitempty"`    // what to change, when it fails
}

// Row is one judged object.
type Row struct {
	Object string `json:"object"` // Object.ID
	Source string `json:"source"` // Object.Source
	Role   string `json:"role"`   // one of the Role* constants
	Cells  []Cell `json:"cells"`  // one per column of the Report, in its order
}

// Report is the result of Check: a table of objects × pools.
type Report struct {
	OK      bool      `json:"ok"`      // no cell failed, and at least one object was judged (Rows is not empty)
	Columns []string  `json:"columns"` // ColumnOnPrem, then "nodepool/<name>" per NodePool, then ColumnMetrics when a trigger was judged
	Rows    []Row     `json:"rows"`
	Skipped []Skipped `json:"skipped,omitempty"` // documents not judged
	// Ignored counts the workloads that neither ask for a GPU, select the
	// pool nor tolerate its taints: they have nothing to do with it.
	Ignored int `json:"ignored"`
}

// CheckOptions is what Check judges against.
type CheckOptions struct {
	Pool Pool
	// Metrics are the metric families nodeprep exports, by name, each with
	// its label names (nodeprep.MetricLabels).
	Metrics map[string][]string
	// Nodes, when set, are the cluster's real Nodes (ReadLive): each pool
	// node gets a row of its own (taints, nodeprep's label and condition),
	// and workloads are judged on the first healthy one instead of on a
	// node made from the pool's config.
	Nodes []corev1.Node
	// Cluster is true when the objects are the cluster's own (ReadLive):
	// a runtimeClassName then needs a RuntimeClass among them; checking
	// files, k3s's own classes (k3s.RuntimeClasses) count as present too.
	Cluster bool
}

// targetLabels are the labels Prometheus adds to every scraped series
// (Prometheus docs, "Jobs and instances"): a trigger may match on them.
var targetLabels = []string{"instance", "job"}

// Check judges objs against the pool, with the scheduler's own rules
// (component-helpers FindMatchingUntoleratedTaint for NoSchedule and
// NoExecute taints, nodeaffinity.GetRequiredNodeAffinity for nodeSelector
// and required node affinity):
//   - a GPU workload (requests nvidia.com/gpu, or selects the pool label)
//     must schedule on the pool and on every GPU NodePool;
//   - a ScaledJob's Job template must schedule on every GPU NodePool;
//   - the device plugin (a DaemonSet running k8s-device-plugin, or the
//     chart's values) must land on the pool and on every GPU NodePool, on
//     no other NodePool, and hand devices over as the nodes' CDI spec names
//     them;
//   - a workload other than a DaemonSet that tolerates a pool taint without
//     requesting a GPU must not be able to schedule on GPU nodes;
//   - a KEDA trigger naming nodeprep_ metrics must name exported ones with
//     their labels, and a ScaledJob must watch nodeprep_ready;
//   - a GPU NodePool must limit nvidia.com/gpu;
//   - a runtimeClassName must name a RuntimeClass that exists (in the
//     objects; checking files, k3s's own classes too), and a RuntimeClass
//     a workload names, nvidia-cdi or one for an NVIDIA handler must name
//     a handler the pool's nodes have (runtimeclass.go).
//
// A report with no rows is not OK: nothing was judged (an empty input, a
// wrong path, or only objects unrelated to the pool), and a CI step that
// checks nothing must not pass.
func Check(objs []Object, skipped []Skipped, opts CheckOptions) *Report {
	c := &checker{pool: opts.Pool, metrics: opts.Metrics, onprem: opts.Pool.node(), listStrategy: pluginListStrategy(objs),
		classes: runtimeClasses(objs, opts.Cluster), referenced: referencedClasses(objs), cluster: opts.Cluster}
	c.handlers, c.handlersFrom = nodeHandlers(opts.Nodes, opts.Pool)
	r := &Report{OK: true, Columns: []string{ColumnOnPrem}, Skipped: skipped}
	if opts.Nodes != nil {
		rows, healthy := c.nodeRows(opts.Nodes)
		if healthy != nil {
			c.onprem = healthy
		}
		for _, row := range rows {
			if row.Cells[0].Verdict == VerdictFail {
				r.OK = false
			}
		}
		r.Rows = append(r.Rows, rows...)
	}
	for i := range objs {
		if np := objs[i].NodePool; np != nil {
			c.nodePools = append(c.nodePools, np)
			r.Columns = append(r.Columns, "nodepool/"+np.Name)
		}
	}
	trig := false
	for i := range objs {
		o := &objs[i]
		rows := c.judge(o)
		if len(rows) == 0 && o.PodSpec != nil {
			r.Ignored++
		}
		if len(rows) == 0 && o.RuntimeClass != nil {
			r.Skipped = append(r.Skipped, Skipped{Source: o.Source, APIVersion: RuntimeClassAPIVersion, Kind: KindRuntimeClass, Name: o.Name})
		}
		for _, row := range rows {
			for _, cell := range row.Cells {
				if cell.Column == ColumnMetrics {
					trig = true
				}
				if cell.Verdict == VerdictFail {
					r.OK = false
				}
			}
			r.Rows = append(r.Rows, row)
		}
	}
	if trig {
		r.Columns = append(r.Columns, ColumnMetrics)
	}
	if ph := PlaceholderFindings(objs); len(ph) > 0 {
		r.Rows = append(r.Rows, ph...)
		r.OK = false
	}
	if len(r.Rows) == 0 {
		r.OK = false
	}
	// Every row gets a cell for every column, in the report's order.
	for i := range r.Rows {
		byCol := map[string]Cell{}
		for _, cell := range r.Rows[i].Cells {
			byCol[cell.Column] = cell
		}
		cells := make([]Cell, 0, len(r.Columns))
		for _, col := range r.Columns {
			cell, ok := byCol[col]
			if !ok {
				cell = Cell{Column: col, Verdict: VerdictNA}
			}
			cells = append(cells, cell)
		}
		r.Rows[i].Cells = cells
	}
	return r
}

type checker struct {
	pool      Pool
	metrics   map[string][]string
	onprem    *corev1.Node
	nodePools []*NodePool
	// listStrategy is the device plugin's device-list strategy among the
	// objects (pluginListStrategy).
	listStrategy string
	// classes are the RuntimeClasses that exist (runtimeClasses),
	// referenced the names workloads give (referencedClasses), cluster
	// CheckOptions.Cluster; handlers the pool nodes' runtime handlers and
	// handlersFrom where they come from (nodeHandlers).
	classes      map[string]classInfo
	referenced   map[string]bool
	cluster      bool
	handlers     []string
	handlersFrom string
}

var discard = logr.Discard()

func (c *checker) judge(o *Object) []Row {
	base := Row{Object: o.ID(), Source: o.Source}
	switch {
	case o.NodePool != nil:
		if !c.pool.isGPUNodePool(o.NodePool) {
			return nil
		}
		row := base
		row.Role = RoleNodePool
		row.Cells = []Cell{c.nodePoolCell(o.NodePool)}
		return []Row{row}
	case o.ScaledObject != nil:
		return c.triggerRows(base, o.ScaledObject.Spec.Triggers, false)
	case o.RuntimeClass != nil:
		if !c.judgesClass(o.RuntimeClass) {
			return nil
		}
		return []Row{c.classRow(base, o.RuntimeClass)}
	case o.Values != nil:
		row := base
		row.Role = RoleDevicePlugin
		row.Cells = c.withPodPath(c.devicePlugin(valuesPodSpec(o.Values), pluginSettings{
			listStrategy: deref(o.Values.DeviceListStrategy, "envvar"), idStrategy: deref(o.Values.DeviceIDStrategy, "uuid"),
			driverRoot: deref(o.Values.NvidiaDriverRoot, "/"), where: "values",
		}), o.Values.RuntimeClassName, true)
		row.Cells = c.withProfileHook(row.Cells, valuesPodSpec(o.Values))
		return c.withClass([]Row{row}, o.Values.RuntimeClassName)
	case o.PodSpec == nil:
		return nil
	}
	ps := o.PodSpec
	if o.Kind == "DaemonSet" && isDevicePlugin(ps) {
		row := base
		row.Role = RoleDevicePlugin
		row.Cells = c.withProfileHook(c.withPodPath(c.devicePlugin(ps, daemonSetSettings(ps)), ps.RuntimeClassName, true), ps)
		return c.withClass([]Row{row}, ps.RuntimeClassName)
	}
	var rows []Row
	gpus := gpuRequest(ps)
	switch {
	case o.ScaledJob != nil:
		row := base
		row.Role = RoleCloudTier
		row.Cells = c.scheduleCells(ps, gpus, false)
		rows = append(rows, row)
		rows = append(rows, c.triggerRows(base, o.ScaledJob.Spec.Triggers, true)...)
	case gpus > 0 || c.selectsPool(ps):
		row := base
		row.Role = RoleGPUWorkload
		row.Cells = c.withProfileHook(c.withPodPath(c.scheduleCells(ps, gpus, true), ps.RuntimeClassName, false), ps)
		rows = append(rows, row)
	case o.Kind != "DaemonSet" && c.toleratesPoolTaint(ps):
		row := base
		row.Role = RoleTaintSquat
		row.Cells = c.squatCells(ps)
		rows = append(rows, row)
		return rows
	}
	return c.withClass(rows, ps.RuntimeClassName)
}

func deref(p *string, def string) string {
	if p == nil || *p == "" {
		return def
	}
	return *p
}

// scheduleCells judges ps on the pool (when onPrem) and on each GPU
// NodePool; other NodePools are n/a.
func (c *checker) scheduleCells(ps *corev1.PodSpec, gpus int64, onPrem bool) []Cell {
	var cells []Cell
	if onPrem {
		cell := Cell{Column: ColumnOnPrem, Verdict: VerdictOK}
		if reason, fix := schedulable(ps, c.onprem, "pool nodes"); reason != "" {
			cell = Cell{Column: ColumnOnPrem, Verdict: VerdictFail, Reason: reason, Fix: fix}
		}
		cells = append(cells, gpuReadyCell(cell, ps))
	}
	for _, np := range c.nodePools {
		col := "nodepool/" + np.Name
		if !c.pool.isGPUNodePool(np) {
			continue
		}
		cell := Cell{Column: col, Verdict: VerdictOK}
		node := fallbackNode(np, wanted(ps))
		if reason, fix := schedulable(ps, node, np.Name+" nodes"); reason != "" {
			cell = Cell{Column: col, Verdict: VerdictFail, Reason: reason, Fix: fix}
		} else if lim, ok := np.Spec.Limits[GPUResource]; ok && gpus > lim.Value() {
			cell = Cell{Column: col, Verdict: VerdictFail,
				Reason: fmt.Sprintf("a pod asks for %d nvidia.com/gpu, more than the NodePool's limit %s", gpus, lim.String()),
				Fix:    fmt.Sprintf("raise spec.limits[nvidia.com/gpu] of NodePool %s to at least %d", np.Name, gpus)}
		}
		cells = append(cells, cell)
	}
	return cells
}

// squatCells flags a pod without a GPU request that would schedule on GPU
// nodes because it tolerates their taint.
func (c *checker) squatCells(ps *corev1.PodSpec) []Cell {
	judge := func(col string, node *corev1.Node) Cell {
		if reason, _ := schedulable(ps, node, ""); reason != "" {
			return Cell{Column: col, Verdict: VerdictOK, Reason: "tolerates a GPU taint but cannot schedule on these nodes"}
		}
		t := c.toleratedPoolTaint(ps)
		return Cell{Column: col, Verdict: VerdictFail,
			Reason: fmt.Sprintf("tolerates %s without requesting nvidia.com/gpu: it will take GPU nodes' CPU and memory", taintString(t)),
			Fix:    fmt.Sprintf("remove the toleration for %s, or request nvidia.com/gpu", t.Key)}
	}
	cells := []Cell{judge(ColumnOnPrem, c.onprem)}
	for _, np := range c.nodePools {
		if c.pool.isGPUNodePool(np) {
			cells = append(cells, judge("nodepool/"+np.Name, fallbackNode(np, wanted(ps))))
		}
	}
	return cells
}

// schedulable returns "" when the scheduler's filters for taints and node
// affinity admit a pod with spec ps on node; otherwise the reason and the
// fix. where names the nodes in messages ("pool nodes").
func schedulable(ps *corev1.PodSpec, node *corev1.Node, where string) (reason, fix string) {
	// Every untolerated taint at once: one fix that adds one toleration
	// and then meets the next taint is no fix.
	if ts := untoleratedTaints(node.Spec.Taints, ps.Tolerations); len(ts) > 0 {
		return taintsReason(ts, ps.Tolerations)
	}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: *ps}).Match(node)
	if err != nil {
		return fmt.Sprintf("invalid node affinity: %v", err), "fix the node affinity's syntax"
	}
	if !ok {
		return explainAffinity(ps, node, where)
	}
	return "", ""
}

func tolerationFor(t corev1.Taint) corev1.Toleration {
	if t.Value == "" {
		return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: t.Effect}
	}
	return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect}
}

func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

func tolerationString(t corev1.Toleration) string {
	var parts []string
	if t.Key != "" {
		parts = append(parts, "key: "+t.Key)
	}
	op := t.Operator
	if op == "" {
		op = corev1.TolerationOpEqual
	}
	parts = append(parts, "operator: "+string(op))
	if t.Value != "" || op == corev1.TolerationOpEqual {
		parts = append(parts, fmt.Sprintf("value: %q", t.Value))
	}
	if t.Effect != "" {
		parts = append(parts, "effect: "+string(t.Effect))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// nearTolerations explains why tolerations of the taint's key do not
// tolerate it: the wrong operator, value or effect.
func nearTolerations(tols []corev1.Toleration, t corev1.Taint) string {
	var out []string
	for _, tol := range tols {
		if tol.Key != t.Key {
			if tol.Key != "" && levenshtein.ComputeDistance(tol.Key, t.Key) <= 2 {
				out = append(out, fmt.Sprintf("toleration key %q is not %q", tol.Key, t.Key))
			}
			continue
		}
		var why []string
		if tol.Effect != "" && tol.Effect != t.Effect {
			why = append(why, fmt.Sprintf("effect %s, not %s", tol.Effect, t.Effect))
		}
		op := tol.Operator
		if op == "" {
			op = corev1.TolerationOpEqual
		}
		switch op {
		case corev1.TolerationOpEqual:
			if tol.Value != t.Value {
				why = append(why, fmt.Sprintf("operator Equal with value %q, not %q", tol.Value, t.Value))
			}
		case corev1.TolerationOpExists:
			if tol.Value != "" {
				why = append(why, fmt.Sprintf("operator Exists with a value (%q): the API server refuses it", tol.Value))
			}
		default:
			why = append(why, fmt.Sprintf("operator %s does not match a taint", op))
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("the toleration %s has %s", tolerationString(tol), strings.Join(why, " and ")))
		}
	}
	return strings.Join(out, "; ")
}

// explainAffinity says which nodeSelector entry or node affinity term keeps
// the pod off node.
func explainAffinity(ps *corev1.PodSpec, node *corev1.Node, where string) (string, string) {
	keys := make([]string, 0, len(ps.NodeSelector))
	for k := range ps.NodeSelector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := ps.NodeSelector[k]
		have, ok := node.Labels[k]
		switch {
		case ok && have == want:
			continue
		case ok:
			return fmt.Sprintf("nodeSelector %s=%s: %s have %s=%s", k, want, where, k, have),
				fmt.Sprintf("set nodeSelector %s: %q", k, have)
		default:
			reason := fmt.Sprintf("nodeSelector %s=%s: %s have no label %s", k, want, where, k)
			if near := nearestKey(k, node.Labels); near != "" {
				return reason + fmt.Sprintf(" (they have %s=%s)", near, node.Labels[near]),
					fmt.Sprintf("set nodeSelector %s: %q instead of %s", near, node.Labels[near], k)
			}
			return reason, fmt.Sprintf("drop nodeSelector %s, or add the label %s=%s to the nodes", k, k, want)
		}
	}
	a := ps.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return "required node affinity does not match", "check the pod's node affinity"
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	var why []string
	for i, term := range terms {
		for _, e := range term.MatchExpressions {
			sel := corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{e}}}}
			ns, err := nodeaffinity.NewNodeSelector(&sel)
			if err != nil || !ns.Match(node) {
				have := "no label " + e.Key
				if v, ok := node.Labels[e.Key]; ok {
					have = e.Key + "=" + v
				}
				why = append(why, fmt.Sprintf("term %d: %s %s %v (%s have %s)", i+1, e.Key, e.Operator, e.Values, where, have))
				break
			}
		}
	}
	if len(why) == 0 {
		return "required node affinity: no nodeSelectorTerm matches", "check the pod's node affinity"
	}
	return "required node affinity: " + strings.Join(why, "; "), "make one nodeSelectorTerm match the nodes' labels, or use preferredDuringScheduling for a preference"
}

// nearestKey returns the label key of m within edit distance 2 of k ("" if none).
func nearestKey(k string, m map[string]string) string {
	best, bestD := "", 3
	for key := range m {
		if d := levenshtein.ComputeDistance(k, key); d < bestD || d == bestD && key < best {
			best, bestD = key, d
		}
	}
	return best
}

// wanted returns the labels a pod asks for: its nodeSelector and the
// single values of In expressions in its required and preferred affinity.
func wanted(ps *corev1.PodSpec) map[string]string {
	m := map[string]string{}
	if a := ps.Affinity; a != nil && a.NodeAffinity != nil {
		add := func(es []corev1.NodeSelectorRequirement) {
			for _, e := range es {
				if e.Operator == corev1.NodeSelectorOpIn && len(e.Values) > 0 {
					m[e.Key] = e.Values[0]
				}
			}
		}
		if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			for _, t := range r.NodeSelectorTerms {
				add(t.MatchExpressions)
			}
		}
		for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			add(p.Preference.MatchExpressions)
		}
	}
	for k, v := range ps.NodeSelector {
		m[k] = v
	}
	return m
}

// gpuRequest is the most nvidia.com/gpu any one container (or init
// container) asks for, in limits or requests.
func gpuRequest(ps *corev1.PodSpec) int64 {
	var n int64
	for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
		for _, ct := range cs {
			for _, rl := range []corev1.ResourceList{ct.Resources.Limits, ct.Resources.Requests} {
				if q, ok := rl[GPUResource]; ok {
					n = max(n, q.Value())
				}
			}
		}
	}
	return n
}

// selectsPool reports whether the pod names the pool label's key in its
// nodeSelector or its node affinity.
func (c *checker) selectsPool(ps *corev1.PodSpec) bool {
	k := c.pool.Label.Key
	if k == "" {
		return false
	}
	if _, ok := ps.NodeSelector[k]; ok {
		return true
	}
	if a := ps.Affinity; a != nil && a.NodeAffinity != nil {
		if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			for _, t := range r.NodeSelectorTerms {
				if slices.ContainsFunc(t.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool { return e.Key == k }) {
					return true
				}
			}
		}
		for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if slices.ContainsFunc(p.Preference.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool { return e.Key == k }) {
				return true
			}
		}
	}
	return false
}

func (c *checker) toleratedPoolTaint(ps *corev1.PodSpec) corev1.Taint {
	for _, t := range c.onprem.Spec.Taints {
		if schedcorev1.TolerationsTolerateTaint(discard, ps.Tolerations, &t, false) {
			return t
		}
	}
	return corev1.Taint{}
}

// toleratesPoolTaint reports whether a toleration of ps tolerates one of
// the pool's taints (a keyless Exists toleration tolerates them all).
func (c *checker) toleratesPoolTaint(ps *corev1.PodSpec) bool {
	return c.toleratedPoolTaint(ps).Key != ""
}

// nodePoolCell judges a GPU NodePool against the pool: its taints have the
// pool's keys and effects, and it limits nvidia.com/gpu.
func (c *checker) nodePoolCell(np *NodePool) Cell {
	col := "nodepool/" + np.Name
	var why, fixes []string
	for _, pt := range c.pool.Taints {
		found := false
		for _, t := range np.Spec.Template.Spec.Taints {
			if t.Key == pt.Key && string(t.Effect) == string(pt.Effect) {
				found = true
			}
		}
		if !found {
			why = append(why, fmt.Sprintf("no taint %s:%s like the pool's %s (non-GPU pods could land on these nodes, or GPU pods' tolerations miss)", pt.Key, pt.Effect, pt))
			fixes = append(fixes, fmt.Sprintf("add taint {key: %s, value: %q, effect: %s} to spec.template.spec.taints", pt.Key, pt.Value, pt.Effect))
		}
	}
	if np.Spec.Template.Metadata.Labels[LabelGPUReady] != "true" {
		why = append(why, fmt.Sprintf("the template has no label %s=true: GPU pods, which require it, cannot schedule on these nodes", LabelGPUReady))
		fixes = append(fixes, fmt.Sprintf("add %s: \"true\" to spec.template.metadata.labels", LabelGPUReady))
	}
	if _, ok := np.Spec.Limits[GPUResource]; !ok {
		why = append(why, "no limits on nvidia.com/gpu: the fallback can grow without bound")
		fixes = append(fixes, "set spec.limits: {nvidia.com/gpu: <most GPUs you will pay for>}")
	}
	if len(why) == 0 {
		return Cell{Column: col, Verdict: VerdictOK}
	}
	return Cell{Column: col, Verdict: VerdictFail, Reason: strings.Join(why, "; "), Fix: strings.Join(fixes, "; ")}
}
