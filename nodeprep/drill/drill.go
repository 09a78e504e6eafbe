// Package drill runs the failover drill the hybrid setups prescribe
// ("measure actual RTO with quarterly fallback drills: cordon on-prem
// nodes → fallback spin-up → return") against a live cluster: it takes
// the on-prem GPU nodes away from new pods, watches a canary GPU pod move
// to the fallback pool, gives the nodes back, watches the canary return,
// and waits for the fallback's added nodes to go. Every change it makes
// carries its drill id, and it undoes all of them on any failure, missed
// deadline or cancellation.
package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/kubenode"
)

// Client is the part of the API client the drill needs:
// kubenode.API (its HTTP policy: no redirects, no proxies, bounded
// bodies, paged lists).
type Client interface {
	List(ctx context.Context, path string, query url.Values, item func(json.RawMessage) error) error
	Do(ctx context.Context, method, path, ctype string, in, out any) error
}

// The marks the drill leaves on what it changes.
const (
	// AnnotationID is on every Node the drill changed and its canary
	// pods: the drill's id. Its presence makes another drill refuse to
	// start until `--restore` cleared it.
	AnnotationID = "nodeprep.dev/drill"
	// AnnotationRestore is on every Node the drill changed: JSON of what
	// to put back (restoreState).
	AnnotationRestore = "nodeprep.dev/drill-restore"
	// LabelCanary is on the drill's canary pods, value the drill id.
	LabelCanary = "nodeprep.dev/drill"
	// LabelGPUReady is nodeprep's health label (nodeprep/cluster
	// LabelGPUReady): GPU workloads select "true".
	LabelGPUReady = "nodeprep.dev/gpu-ready"
	// LabelNodePool is the label Karpenter puts on the nodes of a
	// NodePool (karpenter.sh/nodepool): the default fallback selector.
	LabelNodePool = "karpenter.sh/nodepool"
	// GPUResource is the extended resource the canary requests.
	GPUResource = "nvidia.com/gpu"
)

// The ways to take the on-prem nodes away from new GPU pods.
const (
	// ModeCordon sets spec.unschedulable (kubectl cordon).
	ModeCordon = "cordon"
	// ModeNotReady sets nodeprep.dev/gpu-ready=false, as `nodeprep
	// health` does on a GPU fault: only pods that select the label move.
	ModeNotReady = "not-gpu-ready"
)

// ErrMarked is wrapped by Plan's error when a Node or pod already carries
// a drill's marks (fault.ErrLocked: another drill runs, or one was
// interrupted and could not restore; `--restore` clears them).
var ErrMarked = errors.New("another drill's marks are present")

// Options configure a drill. Zero values take the defaults named.
type Options struct {
	// ID names this drill in its marks; required.
	ID string
	// PoolKey, PoolValue are the pool label: the on-prem GPU nodes carry
	// it and no FallbackSelector label. Required.
	PoolKey, PoolValue string
	// FallbackLabel is the label key that marks a fallback node (any
	// value); default LabelNodePool.
	FallbackLabel string
	// Mode is ModeCordon (default) or ModeNotReady.
	Mode string
	// Namespace, Image, GPUs and Tolerations make the canary pod: it
	// selects the pool label and nodeprep.dev/gpu-ready=true, requests
	// GPUs nvidia.com/gpu (default 1) and tolerates the pool's taints.
	// Namespace default "default"; Image is required.
	Namespace   string
	Image       string
	GPUs        int
	Tolerations []Toleration
	// RuntimeClass is the canary's runtimeClassName ("" for none).
	RuntimeClass string
	// Deadline bounds each phase; default 10 minutes.
	Deadline time.Duration
	// ReclaimDeadline bounds the reclaim phase (the fallback's added
	// nodes gone), which waits for the NodePool's consolidateAfter;
	// default 20 minutes.
	ReclaimDeadline time.Duration
	// Poll is how often the drill reads the cluster; default 1 s.
	Poll time.Duration
	// Log, when set, gets one line per step.
	Log func(msg string)
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Toleration is a pod toleration (k8s.io/api/core/v1 Toleration).
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"`
}

func (o *Options) defaults() error {
	if o.FallbackLabel == "" {
		o.FallbackLabel = LabelNodePool
	}
	if o.Mode == "" {
		o.Mode = ModeCordon
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.GPUs == 0 {
		o.GPUs = 1
	}
	if o.Deadline == 0 {
		o.Deadline = 10 * time.Minute
	}
	if o.ReclaimDeadline == 0 {
		o.ReclaimDeadline = 20 * time.Minute
	}
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	switch {
	case o.ID == "":
		return fault.Usage(errors.New("drill: no drill id"))
	case o.PoolKey == "":
		return fault.Usage(errors.New("drill: no pool label"))
	case o.Mode != ModeCordon && o.Mode != ModeNotReady:
		return fault.Usage(fmt.Errorf("drill: mode %q: want %s or %s", o.Mode, ModeCordon, ModeNotReady))
	case o.Image == "":
		return fault.Usage(errors.New("drill: no canary image"))
	case o.GPUs < 0 || o.Deadline < 0 || o.ReclaimDeadline < 0 || o.Poll < 0:
		return fault.Usage(errors.New("drill: negative GPUs, deadline or poll interval"))
	}
	return nil
}

// Phase is one measured step of a drill.
type Phase struct {
	Name string `json:"name"`
	// What the phase waits for, in words.
	Until string `json:"until"`
	// Seconds is how long it took (to the millisecond), or how long it
	// ran before it failed.
	Seconds float64 `json:"seconds"`
	// OK is false for the phase that missed its deadline or failed.
	OK bool `json:"ok"`
	// Node is where the canary ran at the phase's end, when it ran.
	Node string `json:"node,omitempty"`
}

// The phases, in order.
const (
	PhaseBaseline = "baseline" // the canary runs on-prem
	PhaseFailover = "failover" // nodes taken away → the canary runs on the fallback (the RTO)
	PhaseReturn   = "return"   // nodes given back → the canary runs on-prem again
	PhaseReclaim  = "reclaim"  // the fallback's added nodes are gone
)

// Report is what a drill did and measured.
type Report struct {
	ID     string   `json:"id"`
	DryRun bool     `json:"dryRun"`
	Mode   string   `json:"mode"`
	OnPrem []string `json:"onPrem"`
	// FallbackBefore are the fallback nodes present before the drill.
	FallbackBefore []string `json:"fallbackBefore"`
	Phases         []Phase  `json:"phases"`
	// Added are the fallback nodes that appeared during the drill, and
	// AddedGPUs their nvidia.com/gpu capacity: what the failover cost.
	Added     []string `json:"added"`
	AddedGPUs int64    `json:"addedGPUs"`
	// Restored names every Node the drill put back, Deleted every pod it
	// removed.
	Restored []string `json:"restored"`
	Deleted  []string `json:"deleted"`
	// OK is true when the drill, the restore or, for a dry run, the plan
	// succeeded; Error says why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Plan reads the cluster and returns the report of a dry run: the
// on-prem nodes the drill would change and the fallback nodes present. It
// changes nothing. Errors: ErrMarked (fault.ErrLocked) when a Node or pod
// carries a drill's marks, no on-prem node (fault.ErrCheckFailed), and
// the client's (fault.ErrUnavailable).
func Plan(ctx context.Context, c Client, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	nodes, err := listNodes(ctx, c)
	if err != nil {
		return nil, err
	}
	r := &Report{ID: o.ID, DryRun: true, Mode: o.Mode, OnPrem: []string{}, FallbackBefore: []string{}, Phases: []Phase{}, Added: []string{}, Restored: []string{}, Deleted: []string{}}
	var marked []string
	for _, n := range nodes {
		if id, ok := n.Metadata.Annotations[AnnotationID]; ok {
			marked = append(marked, fmt.Sprintf("node %s (drill %s)", n.Metadata.Name, id))
		}
		switch {
		case n.Metadata.Labels[o.FallbackLabel] != "" || hasKey(n.Metadata.Labels, o.FallbackLabel):
			r.FallbackBefore = append(r.FallbackBefore, n.Metadata.Name)
		case n.Metadata.Labels[o.PoolKey] == o.PoolValue && hasKey(n.Metadata.Labels, o.PoolKey):
			r.OnPrem = append(r.OnPrem, n.Metadata.Name)
		}
	}
	pods, err := listCanaries(ctx, c, "")
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		marked = append(marked, fmt.Sprintf("pod %s/%s (drill %s)", p.Metadata.Namespace, p.Metadata.Name, p.Metadata.Labels[LabelCanary]))
	}
	if len(marked) > 0 {
		return nil, fault.Locked(fmt.Errorf("drill: %w: %s; run the drill with --restore to clear them", ErrMarked, strings.Join(marked, ", ")))
	}
	if len(r.OnPrem) == 0 {
		return nil, fault.CheckFailed(fmt.Errorf("drill: no on-prem node has the pool label %s=%s without %s", o.PoolKey, o.PoolValue, o.FallbackLabel))
	}
	r.OK = true
	return r, nil
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// Run runs the drill Plan planned: baseline (the canary runs on an
// on-prem node), failover (the on-prem nodes cordoned or marked not
// GPU-ready, the canary replaced: until it runs on a fallback node, the
// RTO), return (the nodes given back, the canary replaced: until it runs
// on-prem), reclaim (until every fallback node added during the drill is
// gone). Each phase has its deadline. On any failure, missed deadline or
// ctx's end it stops, restores every Node it changed and deletes every
// canary (with a fresh context of one minute, so an interrupt does not
// stop the restore), and returns the report with the error: a missed
// deadline is fault.ErrCheckFailed, ctx's end wraps ctx.Err() as
// fault.ErrCheckFailed, an API failure is the client's. A restore that
// fails leaves the marks for Restore and is joined to the error.
func Run(ctx context.Context, c Client, o Options, plan *Report) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := *plan
	r.DryRun = false
	d := &drill{c: c, o: o, r: &r, changed: map[string]restoreState{}, before: map[string]bool{}}
	for _, n := range plan.FallbackBefore {
		d.before[n] = true
	}
	err := d.run(ctx)
	if err == nil {
		d.o.Log("drill done: restoring")
	}
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rerr := d.restore(rctx)
	if err != nil && ctx.Err() != nil {
		// The interrupt, not the request it cut short, is the cause: %v
		// keeps the client's fault kind out of the exit code.
		err = fault.CheckFailed(fmt.Errorf("drill %s: interrupted: %v", o.ID, err))
	}
	err = errors.Join(err, rerr)
	r.OK = err == nil
	if err != nil {
		r.Error = err.Error()
	}
	return &r, err
}

type drill struct {
	c       Client
	o       Options
	r       *Report
	changed map[string]restoreState // node → what to put back
	canary  string                  // the current canary pod's name
	seq     int
	before  map[string]bool // fallback nodes before the drill
}

// restoreState is what the drill changed on a Node, to put back.
type restoreState struct {
	Unschedulable bool    `json:"unschedulable"`
	GPUReady      *string `json:"gpuReady,omitempty"` // nil: the label was absent
	Mode          string  `json:"mode"`
}

func (d *drill) run(ctx context.Context) error {
	// Baseline: the canary runs on-prem.
	if err := d.phase(ctx, PhaseBaseline, "the canary runs on an on-prem node", d.o.Deadline, func() error {
		return d.newCanary(ctx)
	}, d.canaryOn(ctx, d.onPrem)); err != nil {
		return err
	}
	// Failover: the on-prem nodes taken away, the canary replaced.
	if err := d.phase(ctx, PhaseFailover, "the canary runs on a fallback node (the RTO)", d.o.Deadline, func() error {
		for _, n := range d.r.OnPrem {
			if err := d.takeAway(ctx, n); err != nil {
				return err
			}
		}
		return d.replaceCanary(ctx)
	}, d.canaryOn(ctx, d.fallback)); err != nil {
		return err
	}
	if err := d.countAdded(ctx); err != nil {
		return err
	}
	// Return: the nodes given back, the canary replaced.
	if err := d.phase(ctx, PhaseReturn, "the canary runs on an on-prem node again", d.o.Deadline, func() error {
		if err := d.giveBackAll(ctx); err != nil {
			return err
		}
		return d.replaceCanary(ctx)
	}, d.canaryOn(ctx, d.onPrem)); err != nil {
		return err
	}
	// Reclaim: the canary goes, and the fallback's added nodes with it.
	return d.phase(ctx, PhaseReclaim, "every fallback node the drill added is gone", d.o.ReclaimDeadline, func() error {
		return d.deleteCanary(ctx)
	}, func() (bool, string, error) {
		nodes, err := listNodes(ctx, d.c)
		if err != nil {
			return false, "", err
		}
		for _, n := range nodes {
			if hasKey(n.Metadata.Labels, d.o.FallbackLabel) && !d.before[n.Metadata.Name] {
				return false, "", nil
			}
		}
		return true, "", nil
	})
}

// phase runs start, then polls done until it says true, within deadline.
func (d *drill) phase(ctx context.Context, name, until string, deadline time.Duration, start func() error, done func() (bool, string, error)) error {
	d.o.Log("phase " + name + ": until " + until)
	t0 := d.o.Now()
	p := Phase{Name: name, Until: until}
	record := func(ok bool) {
		p.OK = ok
		p.Seconds = float64(d.o.Now().Sub(t0).Milliseconds()) / 1000
		d.r.Phases = append(d.r.Phases, p)
	}
	if err := start(); err != nil {
		record(false)
		return err
	}
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	tick := time.NewTicker(d.o.Poll)
	defer tick.Stop()
	for {
		ok, node, err := done()
		if err != nil {
			record(false)
			return err
		}
		if ok {
			p.Node = node
			record(true)
			return nil
		}
		select {
		case <-ctx.Done():
			record(false)
			return fmt.Errorf("phase %s: %w", name, ctx.Err())
		case <-timer.C:
			record(false)
			return fault.CheckFailed(fmt.Errorf("drill %s: phase %s: not done within its deadline %s (%s)", d.o.ID, name, deadline, until))
		case <-tick.C:
		}
	}
}

func (d *drill) onPrem(n *node) bool {
	return !hasKey(n.Metadata.Labels, d.o.FallbackLabel) && n.Metadata.Labels[d.o.PoolKey] == d.o.PoolValue
}

func (d *drill) fallback(n *node) bool { return hasKey(n.Metadata.Labels, d.o.FallbackLabel) }

// canaryOn says when the current canary runs on a node where says yes.
func (d *drill) canaryOn(ctx context.Context, where func(*node) bool) func() (bool, string, error) {
	return func() (bool, string, error) {
		var p pod
		err := d.c.Do(ctx, http.MethodGet, podPath(d.o.Namespace, d.canary), "", nil, &p)
		if err != nil {
			return false, "", fmt.Errorf("reading the canary %s/%s: %w", d.o.Namespace, d.canary, err)
		}
		if p.Status.Phase != "Running" || p.Spec.NodeName == "" {
			return false, "", nil
		}
		var n node
		if err := d.c.Do(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(p.Spec.NodeName), "", nil, &n); err != nil {
			return false, "", fmt.Errorf("reading node %s: %w", p.Spec.NodeName, err)
		}
		return where(&n), p.Spec.NodeName, nil
	}
}

func (d *drill) newCanary(ctx context.Context) error {
	d.seq++
	name := fmt.Sprintf("nodeprep-drill-%s-%d", d.o.ID, d.seq)
	sel := map[string]string{d.o.PoolKey: d.o.PoolValue, LabelGPUReady: "true"}
	spec := map[string]any{
		"restartPolicy":                 "Never",
		"terminationGracePeriodSeconds": 0,
		"nodeSelector":                  sel,
		"tolerations":                   d.o.Tolerations,
		"containers": []map[string]any{{
			"name": "canary", "image": d.o.Image,
			"command":   []string{"sleep", "infinity"},
			"resources": map[string]any{"limits": map[string]any{GPUResource: fmt.Sprint(d.o.GPUs)}},
		}},
	}
	if d.o.RuntimeClass != "" {
		spec["runtimeClassName"] = d.o.RuntimeClass
	}
	// The canary prefers the on-prem nodes, as the setups' workloads do: in
	// the return phase the fallback node the failover added is still up
	// (until consolidation), and the kube-scheduler's default scoring
	// (LeastAllocated) would otherwise put the canary on it, the emptier
	// node, and the return would never be seen. The preference names the
	// on-prem nodes by metadata.name (matchFields): a preferred
	// "FallbackLabel DoesNotExist" expression would do the same for the
	// scheduler, but Karpenter reads preferred expressions as requirements
	// first and ignores a pod that asks for karpenter.sh/nodepool
	// DoesNotExist ("configured to not run on a Karpenter provisioned
	// node", its provisioner), so the failover's canary would never get a
	// node. A field selector's In takes one value (the API server's
	// validation of matchFields), so each on-prem node has its own term;
	// weight 100 is the most a term takes (k8s.io/api core/v1
	// PreferredSchedulingTerm), and a node matches one term.
	if len(d.r.OnPrem) > 0 {
		terms := make([]map[string]any, 0, len(d.r.OnPrem))
		for _, n := range d.r.OnPrem {
			terms = append(terms, map[string]any{"weight": 100,
				"preference": map[string]any{"matchFields": []map[string]any{{
					"key": "metadata.name", "operator": "In", "values": []string{n}}}}})
		}
		spec["affinity"] = map[string]any{"nodeAffinity": map[string]any{
			"preferredDuringSchedulingIgnoredDuringExecution": terms}}
	}
	body := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": d.o.Namespace,
			"labels":      map[string]string{LabelCanary: d.o.ID},
			"annotations": map[string]string{AnnotationID: d.o.ID}},
		"spec": spec,
	}
	// Recorded before the request: a create whose answer is lost (an
	// interrupt) may still have made the pod, and deleting one that was
	// never made is a 404 the restore ignores.
	d.canary = name
	if err := d.c.Do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(d.o.Namespace)+"/pods", "application/json", body, nil); err != nil {
		return fmt.Errorf("creating the canary %s/%s: %w", d.o.Namespace, name, err)
	}
	d.o.Log("created canary " + d.o.Namespace + "/" + name)
	return nil
}

func (d *drill) deleteCanary(ctx context.Context) error {
	if d.canary == "" {
		return nil
	}
	err := d.c.Do(ctx, http.MethodDelete, podPath(d.o.Namespace, d.canary), "application/json", map[string]any{"gracePeriodSeconds": 0}, nil)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting the canary %s/%s: %w", d.o.Namespace, d.canary, err)
	}
	if err == nil {
		d.r.Deleted = append(d.r.Deleted, d.o.Namespace+"/"+d.canary)
	}
	d.canary = ""
	return nil
}

func (d *drill) replaceCanary(ctx context.Context) error {
	if err := d.deleteCanary(ctx); err != nil {
		return err
	}
	return d.newCanary(ctx)
}

// takeAway cordons node n or marks it not GPU-ready, with the drill's
// marks and what to put back, in one patch.
func (d *drill) takeAway(ctx context.Context, name string) error {
	var n node
	if err := d.c.Do(ctx, http.MethodGet, "/api/v1/nodes/"+url.PathEscape(name), "", nil, &n); err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	st := restoreState{Unschedulable: n.Spec.Unschedulable, Mode: d.o.Mode}
	if v, ok := n.Metadata.Labels[LabelGPUReady]; ok {
		st.GPUReady = &v
	}
	js, _ := json.Marshal(st)
	meta := map[string]any{"annotations": map[string]string{AnnotationID: d.o.ID, AnnotationRestore: string(js)}}
	patch := map[string]any{"metadata": meta}
	if d.o.Mode == ModeCordon {
		patch["spec"] = map[string]any{"unschedulable": true}
	} else {
		meta["labels"] = map[string]string{LabelGPUReady: "false"}
	}
	// The resourceVersion makes the patch fail if the node changed since
	// it was read: what is put back is what was there.
	meta["resourceVersion"] = n.Metadata.ResourceVersion
	// Recorded before the patch: a patch whose answer is lost may still
	// have been applied, and restoring an unchanged node is harmless.
	d.changed[name] = st
	if err := d.c.Do(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(name), "application/merge-patch+json", patch, nil); err != nil {
		return fmt.Errorf("taking node %s away (%s): %w", name, d.o.Mode, err)
	}
	d.o.Log("took node " + name + " away (" + d.o.Mode + ")")
	return nil
}

func (d *drill) giveBackAll(ctx context.Context) error {
	var errs []error
	for _, name := range sortedKeys(d.changed) {
		if err := giveBack(ctx, d.c, name, d.changed[name]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(d.changed, name)
		d.r.Restored = append(d.r.Restored, name)
		d.o.Log("gave node " + name + " back")
	}
	return errors.Join(errs...)
}

// giveBack puts back what restoreState says and removes the marks.
func giveBack(ctx context.Context, c Client, name string, st restoreState) error {
	meta := map[string]any{"annotations": map[string]any{AnnotationID: nil, AnnotationRestore: nil}}
	patch := map[string]any{"metadata": meta}
	if st.Mode == ModeCordon {
		patch["spec"] = map[string]any{"unschedulable": st.Unschedulable}
	} else if st.GPUReady != nil {
		meta["labels"] = map[string]any{LabelGPUReady: *st.GPUReady}
	} else {
		meta["labels"] = map[string]any{LabelGPUReady: nil}
	}
	if err := c.Do(ctx, http.MethodPatch, "/api/v1/nodes/"+url.PathEscape(name), "application/merge-patch+json", patch, nil); err != nil && !isNotFound(err) {
		return fmt.Errorf("restoring node %s: %w", name, err)
	}
	return nil
}

// restore gives back every node still changed and deletes the canary.
func (d *drill) restore(ctx context.Context) error {
	err := d.giveBackAll(ctx)
	return errors.Join(err, d.deleteCanary(ctx))
}

func (d *drill) countAdded(ctx context.Context) error {
	nodes, err := listNodes(ctx, d.c)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if hasKey(n.Metadata.Labels, d.o.FallbackLabel) && !d.before[n.Metadata.Name] {
			d.r.Added = append(d.r.Added, n.Metadata.Name)
			if q, ok := n.Status.Capacity[GPUResource]; ok {
				var g int64
				if _, err := fmt.Sscan(q, &g); err == nil {
					d.r.AddedGPUs += g
				}
			}
		}
	}
	return nil
}

// Restore clears what interrupted drills left: every Node with
// AnnotationID gets back what its AnnotationRestore says, and every pod
// with LabelCanary is deleted. It returns the report of what it did (the
// nodes restored, the pods deleted); an error leaves the rest marked.
func Restore(ctx context.Context, c Client) (*Report, error) {
	r := &Report{Restored: []string{}, Deleted: []string{}, OnPrem: []string{}, FallbackBefore: []string{}, Phases: []Phase{}, Added: []string{}}
	nodes, err := listNodes(ctx, c)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, n := range nodes {
		id, ok := n.Metadata.Annotations[AnnotationID]
		if !ok {
			continue
		}
		var st restoreState
		if err := json.Unmarshal([]byte(n.Metadata.Annotations[AnnotationRestore]), &st); err != nil {
			errs = append(errs, fault.Malformed(fmt.Errorf("node %s: drill %s's %s annotation: %w; restore it by hand (kubectl uncordon, the %s label) and remove the annotations", n.Metadata.Name, id, AnnotationRestore, err, LabelGPUReady)))
			continue
		}
		if err := giveBack(ctx, c, n.Metadata.Name, st); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Restored = append(r.Restored, n.Metadata.Name)
	}
	pods, err := listCanaries(ctx, c, "")
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range pods {
		err := c.Do(ctx, http.MethodDelete, podPath(p.Metadata.Namespace, p.Metadata.Name), "application/json", map[string]any{"gracePeriodSeconds": 0}, nil)
		if err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting canary %s/%s: %w", p.Metadata.Namespace, p.Metadata.Name, err))
			continue
		}
		r.Deleted = append(r.Deleted, p.Metadata.Namespace+"/"+p.Metadata.Name)
	}
	err = errors.Join(errs...)
	r.OK = err == nil
	if err != nil {
		r.Error = err.Error()
	}
	return r, err
}

type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
}

type node struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		Unschedulable bool `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Capacity map[string]string `json:"capacity"`
	} `json:"status"`
}

type pod struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

func listNodes(ctx context.Context, c Client) ([]node, error) {
	var out []node
	err := c.List(ctx, "/api/v1/nodes", nil, func(raw json.RawMessage) error {
		var n node
		if err := json.Unmarshal(raw, &n); err != nil {
			return fmt.Errorf("decoding a node: %w", err)
		}
		out = append(out, n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the nodes: %w", err)
	}
	return out, nil
}

// listCanaries lists the pods with LabelCanary (any drill's when id is "").
func listCanaries(ctx context.Context, c Client, id string) ([]pod, error) {
	sel := LabelCanary
	if id != "" {
		sel += "=" + id
	}
	var out []pod
	err := c.List(ctx, "/api/v1/pods", url.Values{"labelSelector": {sel}}, func(raw json.RawMessage) error {
		var p pod
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("decoding a pod: %w", err)
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing drill canaries: %w", err)
	}
	return out, nil
}

func podPath(ns, name string) string {
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name)
}

// isNotFound reports a 404: what is to be removed is already gone.
func isNotFound(err error) bool {
	var ae *kubenode.APIError
	return errors.As(err, &ae) && ae.Code == http.StatusNotFound
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
