package cluster

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"

	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

// LabelGPUReady is the label nodeprep keeps on each node's Node
// (nodeprep/kubenode): "true" while the node's GPUs pass nodeprep health,
// "false" once one is lost or fails its self-test. GPU workloads require
// it "true", so that the scheduler stops sending them to a node whose GPUs
// broke after boot; the fallback NodePool's nodes carry it from the
// template.
const LabelGPUReady = kubenode.LabelGPUReady

// LabelSelftest is the label `nodeprep up` writes into the k3s drop-in
// with the node's other labels (nodepolicy.LabelSelftest): "passed" on a
// node whose adapter self-test passed, which is every pool node that
// registered ready under the default policy. Workloads may select it.
const LabelSelftest = "nodeprep.dev/selftest"

// ConditionGPUUnhealthy is the node condition nodeprep sets beside the
// label (node-problem-detector's convention: "True" is the problem).
const ConditionGPUUnhealthy = kubenode.ConditionType

// gpuReadyRequired reports whether ps can only schedule on nodes labelled
// LabelGPUReady=true: nodeSelector LabelGPUReady: "true", or every term of
// its required node affinity asking for it (In ["true"]).
func gpuReadyRequired(ps *corev1.PodSpec) bool {
	if ps.NodeSelector[LabelGPUReady] == "true" {
		return true
	}
	a := ps.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		ok := false
		for _, e := range t.MatchExpressions {
			if e.Key == LabelGPUReady && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == "true" {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// gpuReadyCell turns an on-prem cell that passes into a failure when the
// GPU workload ps does not require LabelGPUReady=true: such pods keep
// landing on a node whose GPUs nodeprep found broken.
func gpuReadyCell(cell Cell, ps *corev1.PodSpec) Cell {
	if cell.Verdict != VerdictOK || gpuReadyRequired(ps) {
		return cell
	}
	return Cell{Column: cell.Column, Verdict: VerdictFail,
		Reason: fmt.Sprintf("does not require %s=true: the scheduler keeps sending its pods to a node whose GPUs broke after boot (nodeprep health sets it false)", LabelGPUReady),
		Fix:    fmt.Sprintf("add nodeSelector %s: \"true\"", LabelGPUReady)}
}

// untoleratedTaints returns every NoSchedule and NoExecute taint of
// taints that tolerations do not tolerate, in the node's order (the
// scheduler's TaintToleration filter, component-helpers
// TolerationsTolerateTaint, applied to each taint rather than stopping at
// the first).
func untoleratedTaints(taints []corev1.Taint, tolerations []corev1.Toleration) []corev1.Taint {
	var out []corev1.Taint
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !schedcorev1.TolerationsTolerateTaint(discard, tolerations, t, false) {
			out = append(out, *t)
		}
	}
	return out
}

// taintsReason is the reason and fix for untolerated taints ts: each one
// named, with why a near toleration misses it, and one toleration to add
// for each.
func taintsReason(ts []corev1.Taint, tols []corev1.Toleration) (reason, fix string) {
	var why, add []string
	for _, t := range ts {
		r := taintString(t)
		if near := nearTolerations(tols, t); near != "" {
			r += " (" + near + ")"
		}
		why = append(why, r)
		add = append(add, tolerationString(tolerationFor(t)))
	}
	noun := "taint"
	if len(ts) > 1 {
		noun = fmt.Sprintf("taints (%d)", len(ts))
	}
	return "untolerated " + noun + " " + strings.Join(why, ", "), "add toleration " + strings.Join(add, " and ")
}

// PlaceholderFindings returns one Row per value left at a render
// Placeholder (REPLACE_ME...) in objs: a manifest that still holds one is
// not ready to apply, whatever else it gets right. The row's role is
// RolePlaceholder and its one cell, in column ColumnOnPrem, fails.
func PlaceholderFindings(objs []Object) []Row {
	var rows []Row
	for i := range objs {
		o := &objs[i]
		var v any
		switch {
		case o.NodePool != nil:
			v = o.NodePool
		case o.ScaledJob != nil:
			v = o.ScaledJob
		case o.ScaledObject != nil:
			v = o.ScaledObject
		case o.Values != nil:
			v = o.Values
		case o.PodSpec != nil:
			v = o.PodSpec
		default:
			continue
		}
		paths := placeholderPaths(v)
		if o.Name != "" && strings.Contains(o.Name, Placeholder) {
			paths = append([]string{"metadata.name"}, paths...)
		}
		for _, p := range paths {
			rows = append(rows, Row{Object: o.ID(), Source: o.Source, Role: RolePlaceholder, Cells: []Cell{{
				Column: ColumnOnPrem, Verdict: VerdictFail,
				Reason: fmt.Sprintf("%s still holds the placeholder %s", p, Placeholder),
				Fix:    "replace it with your value (cluster render writes placeholders where it cannot know one)",
			}}})
		}
	}
	return rows
}

// RolePlaceholder is a Row for a value left at a render placeholder.
const RolePlaceholder = "placeholder"

// placeholderPaths returns the dotted paths of the string values in v's
// JSON form that hold Placeholder, sorted.
func placeholderPaths(v any) []string {
	m, err := toJSONValue(v)
	if err != nil {
		return nil
	}
	var out []string
	var walk func(p string, x any)
	walk = func(p string, x any) {
		switch t := x.(type) {
		case map[string]any:
			for k, y := range t {
				walk(join(p, k), y)
			}
		case []any:
			for i, y := range t {
				walk(fmt.Sprintf("%s[%d]", p, i), y)
			}
		case string:
			if strings.Contains(t, Placeholder) {
				out = append(out, p)
			}
		}
	}
	walk("", m)
	sort.Strings(out)
	return out
}

func join(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

func toJSONValue(v any) (any, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m any
	return m, json.Unmarshal(js, &m)
}
