package cluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// RuntimeClassAPIVersion and KindRuntimeClass are the RuntimeClass's
// type (k8s.io/api node/v1), which Read decodes and render emits.
const (
	RuntimeClassAPIVersion = "node.k8s.io/v1"
	KindRuntimeClass       = "RuntimeClass"
)

// RoleRuntimeClass is a Row for a RuntimeClass document: its handler
// against the handlers the pool's nodes have.
const RoleRuntimeClass = "runtime-class"

// PatchedRuntimeClassObject is the RuntimeClass render emits
// (runtimeclass.yaml): name and handler PatchedRuntimeClass, the handler
// k3s registers for nvidia-container-runtime.cdi. k3s's own
// manifests/runtimes.yaml does not create it (k3s.RuntimeClasses), and
// without it the RuntimeClass admission plugin refuses every pod that
// names it ("pod rejected: RuntimeClass "nvidia-cdi" not found",
// k8s.io/kubernetes plugin/pkg/admission/runtimeclass): the Job's, the
// ScaledJob's and the device plugin's, so no node advertises
// nvidia.com/gpu.
//
// It has no scheduling: the class is cluster-scoped and shared by every
// GPU pool, while a scheduling.nodeSelector is one pool's label (a second
// pool's render would replace it) and scheduling.tolerations would be
// added to every pod that names the class, letting it past the GPU taint
// without saying so in its own spec. The workloads render emits select the
// pool and tolerate its taints themselves; k3s's own classes carry no
// scheduling either.
func PatchedRuntimeClassObject() nodev1.RuntimeClass {
	return nodev1.RuntimeClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: RuntimeClassAPIVersion, Kind: KindRuntimeClass},
		ObjectMeta: metav1.ObjectMeta{Name: PatchedRuntimeClass},
		Handler:    PatchedRuntimeClass,
	}
}

// classInfo is one RuntimeClass known to Check: its handler and where it
// was found.
type classInfo struct {
	handler, source string
}

// runtimeClasses collects the RuntimeClasses objs hold, by name. Unless
// cluster is true (the objects are the cluster's own, ReadLive), the
// classes every k3s server deploys (k3s.RuntimeClasses) count as present
// too: a check of files cannot see the cluster, and nodeprep's nodes run
// k3s.
func runtimeClasses(objs []Object, cluster bool) map[string]classInfo {
	m := map[string]classInfo{}
	for i := range objs {
		if rc := objs[i].RuntimeClass; rc != nil {
			if _, dup := m[rc.Name]; !dup {
				m[rc.Name] = classInfo{handler: rc.Handler, source: objs[i].Source}
			}
		}
	}
	if !cluster {
		for _, rc := range k3s.RuntimeClasses {
			if _, ok := m[rc.Name]; !ok {
				m[rc.Name] = classInfo{handler: rc.Handler, source: "k3s manifests/runtimes.yaml"}
			}
		}
	}
	return m
}

// nodeHandlers are the runtime handlers the pool's nodes have: those the
// kubelet reports in status.runtimeHandlers of the cluster's pool Nodes
// (the CRI runtime's own list; "" is the default handler), else the
// handlers k3s can register (k3s.RuntimeHandlers). from says which.
func nodeHandlers(nodes []corev1.Node, pool Pool) (handlers []string, from string) {
	for _, n := range nodes {
		if v, ok := n.Labels[pool.Label.Key]; !ok || v != pool.Label.Value {
			continue
		}
		for _, h := range n.Status.RuntimeHandlers {
			if h.Name != "" && !slices.Contains(handlers, h.Name) {
				handlers = append(handlers, h.Name)
			}
		}
	}
	if len(handlers) > 0 {
		slices.Sort(handlers)
		return handlers, "the pool Nodes' status.runtimeHandlers"
	}
	return k3s.RuntimeHandlers, "the handlers k3s registers"
}

// referencedClasses are the runtimeClassName values of every workload and
// device plugin values document in objs.
func referencedClasses(objs []Object) map[string]bool {
	m := map[string]bool{}
	for i := range objs {
		o := &objs[i]
		switch {
		case o.Values != nil && o.Values.RuntimeClassName != nil:
			m[*o.Values.RuntimeClassName] = true
		case o.PodSpec != nil && o.PodSpec.RuntimeClassName != nil:
			m[*o.PodSpec.RuntimeClassName] = true
		}
	}
	return m
}

// judgesClass reports whether Check judges the RuntimeClass rc: one a
// workload names, PatchedRuntimeClass, or one for an NVIDIA runtime
// handler; other classes (k3s's crun and wasm ones) are Skipped.
func (c *checker) judgesClass(rc *nodev1.RuntimeClass) bool {
	return c.referenced[rc.Name] || rc.Name == PatchedRuntimeClass || strings.HasPrefix(rc.Handler, "nvidia")
}

// classRow judges a RuntimeClass document: its handler must be one the
// pool's nodes have (nodeHandlers), and a class GPU pods use must name
// the handler that gives them the patched spec.
func (c *checker) classRow(base Row, rc *nodev1.RuntimeClass) Row {
	row := base
	row.Role = RoleRuntimeClass
	cell := Cell{Column: ColumnOnPrem, Verdict: VerdictOK}
	switch {
	case !slices.Contains(c.handlers, rc.Handler):
		cell = Cell{Column: ColumnOnPrem, Verdict: VerdictFail,
			Reason: fmt.Sprintf("handler %s is none of %s (%s): the pool nodes' containerd has no runtime of that name, so every pod of RuntimeClass %s fails at sandbox creation", Printable(rc.Handler), strings.Join(c.handlers, ", "), c.handlersFrom, Printable(rc.Name)),
			Fix:    fmt.Sprintf("set handler: %s (k3s registers it when it finds nvidia-container-runtime.cdi)", PatchedRuntimeClass)}
	case rc.Name == PatchedRuntimeClass && rc.Handler != PatchedRuntimeClass:
		reason, fix := runtimeClassBypass(&rc.Handler, false)
		cell = Cell{Column: ColumnOnPrem, Verdict: VerdictFail,
			Reason: fmt.Sprintf("RuntimeClass %s names handler %s: %s", PatchedRuntimeClass, Printable(rc.Handler), reason),
			Fix:    strings.Replace(fix, "set runtimeClassName:", "set handler:", 1)}
	}
	row.Cells = []Cell{cell}
	return row
}

// withClass adds to rows' cells where pods would run (every column but
// ColumnMetrics) the refusal of a pod whose runtimeClassName names a
// RuntimeClass that does not exist: the API server's RuntimeClass
// admission refuses it wherever it would schedule.
func (c *checker) withClass(rows []Row, rc *string) []Row {
	name := deref(rc, "")
	if name == "" {
		return rows
	}
	if _, ok := c.classes[name]; ok {
		return rows
	}
	where := "in the manifests or among k3s's own (manifests/runtimes.yaml)"
	if c.cluster {
		where = "in the cluster"
	}
	reason := fmt.Sprintf("runtimeClassName %s names no RuntimeClass %s: the API server refuses every pod of it (pod rejected: RuntimeClass %q not found)", Printable(name), where, name)
	fix := fmt.Sprintf("apply a RuntimeClass %s (kubectl apply -f runtimeclass.yaml from nodeprep cluster render: node.k8s.io/v1, handler %s)", Printable(name), PatchedRuntimeClass)
	if name != PatchedRuntimeClass {
		fix = fmt.Sprintf("set runtimeClassName: %s and apply its RuntimeClass (runtimeclass.yaml from nodeprep cluster render), or create RuntimeClass %s", PatchedRuntimeClass, Printable(name))
	}
	for i := range rows {
		for j := range rows[i].Cells {
			cell := &rows[i].Cells[j]
			if rows[i].Role == RoleTrigger || !c.podColumn(cell.Column) {
				continue
			}
			if cell.Verdict == VerdictFail {
				cell.Reason += "; " + reason
				cell.Fix += "; " + fix
				continue
			}
			*cell = Cell{Column: cell.Column, Verdict: VerdictFail, Reason: reason, Fix: fix}
		}
	}
	return rows
}

// podColumn reports whether col is one a GPU pod runs on: the on-prem
// pool or a GPU NodePool.
func (c *checker) podColumn(col string) bool {
	if col == ColumnOnPrem {
		return true
	}
	for _, np := range c.nodePools {
		if "nodepool/"+np.Name == col {
			return c.pool.isGPUNodePool(np)
		}
	}
	return false
}

// handlerOf is the runtime handler a runtimeClassName rc leads to: the
// handler of its RuntimeClass when Check knows the class, else the name
// itself (k3s's classes are named after their handlers).
func (c *checker) handlerOf(rc *string) *string {
	if rc == nil {
		return nil
	}
	if ci, ok := c.classes[*rc]; ok {
		h := ci.handler
		return &h
	}
	return rc
}

// readOnlyEtcNvidia names the first container of ps that mounts a
// read-only volume at /etc/nvidia or /etc (readOnly, or a ConfigMap,
// Secret, projected or downward API volume, which the kubelet always
// mounts read-only), with the volume; "" when none does.
func readOnlyEtcNvidia(ps *corev1.PodSpec) string {
	vols := map[string]corev1.VolumeSource{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v.VolumeSource
	}
	for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
		for _, ct := range cs {
			for _, m := range ct.VolumeMounts {
				mp := strings.TrimRight(m.MountPath, "/")
				if mp != "/etc/nvidia" && mp != "/etc" {
					continue
				}
				src := vols[m.Name]
				if m.ReadOnly || src.ConfigMap != nil || src.Secret != nil || src.Projected != nil || src.DownwardAPI != nil {
					return fmt.Sprintf("container %s mounts volume %s read-only at %s", Printable(ct.Name), Printable(m.Name), Printable(m.MountPath))
				}
			}
		}
	}
	return ""
}

// withProfileHook fails the on-prem cell of a pod that mounts a read-only
// /etc/nvidia when the pool's nodes run toolkit 1.20.0's
// update-application-profile hook (Pool.ProfileHook): the hook fails the
// container at creation.
func (c *checker) withProfileHook(cells []Cell, ps *corev1.PodSpec) []Cell {
	if c.pool.ProfileHook == "" || ps == nil {
		return cells
	}
	what := readOnlyEtcNvidia(ps)
	if what == "" {
		return cells
	}
	reason := what + ": " + c.pool.ProfileHook
	fix := "mount it elsewhere (the device plugin's config at /config, as its chart does), or upgrade the nodes' nvidia-container-toolkit to 1.20.1 or later"
	return failOnPrem(cells, reason, fix)
}
