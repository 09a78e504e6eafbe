package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep/cluster"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
)

// Names of the checks of a Report, in order.
const (
	CheckConfig        = "config"         // nodeprep's config file
	CheckGenerate      = "cdi generate"   // the spec the toolkit's generator writes
	CheckKubeletConfig = "kubelet-config" // the kubelet config file k3s passes
	CheckCDI           = "cdi check"      // cdi check, and what cdi patch --dry-run would change
	CheckCluster       = "cluster check"  // the manifests against the node
)

// Check statuses (the words of nodeprep's stage statuses).
const (
	StatusOK      = "ok"
	StatusWarning = "warning"
	StatusFailed  = "failed"
	StatusSkipped = "skipped"
)

// NotJudgedWithoutGPU is what the check cannot judge with no GPU: the
// self-test runs the driver.
const NotJudgedWithoutGPU = "the Vulkan and EGL adapter self-test, CUDA and the in-container self-test (they run the driver on the GPUs)"

// Result is one check's outcome.
type Result struct {
	Name    string `json:"name"`              // a stage of up's plan, or one of the Check* constants
	Status  string `json:"status"`            // one of the Status* constants
	Summary string `json:"summary,omitempty"` // the check's key facts in one line
	// Problems are its findings, errors first, each "error: …" or
	// "warning: …".
	Problems []string `json:"problems,omitempty"`
}

// Report is what Check found for one node configuration.
type Report struct {
	Node string `json:"node"` // Facts.Name
	// OK is true when the node would be ready and the manifests fit it.
	OK bool `json:"ok"`
	// Simulated is the simulated server judged against.
	Simulated string `json:"simulated"`
	// Checks are up's plan stages (inventory, cdi, selftest, join), then
	// the other checks, in order.
	Checks []Result `json:"checks"`
	// NotJudged says what the check cannot judge without a GPU.
	NotJudged []string `json:"notJudged"`
	// DurationMS is the judgement's wall time, without assembling the
	// tree, in milliseconds.
	DurationMS float64 `json:"durationMs"`
}

// Planned is up's plan of the tree (nodeprep.Plan, made from the config
// file and the facts' k3s), as Check reports and uses it.
type Planned struct {
	// Stages are up's stages, in order, as Results.
	Stages []Result
	// Join is the join planned (nil when the plan stopped before it).
	Join *k3s.Result
	// CDI is the patch planned (nil when the plan stopped before it).
	CDI *cdi.PatchResult
	// CDIOptions, DeviceNames and K3s are the options the plan ran with.
	CDIOptions  cdi.FileOptions
	DeviceNames []string
	K3s         k3s.Options
}

// Planner makes up's plan of the tree from the config file cfg and the
// inventory inv. The pipeline package makes it (the command plugs it in:
// this package sits below the pipeline); errors marked fault.ErrMalformed
// or fault.ErrUsage are the config's.
type Planner func(ctx context.Context, cfg config.Config, inv *gpu.Inventory) (*Planned, error)

// Unit is what the facts say of the k3s service: its PATH, its version
// and the containerd it ships (ContainerdOf).
func (f *Facts) Unit() k3s.Unit {
	return k3s.Unit{Path: f.K3s.UnitPath, Version: f.K3s.Version, ContainerdVersion: ContainerdOf(f.K3s.Version)}
}

// DataDir is k3s's data-dir, k3s's default when the facts name none.
func (f *Facts) DataDir() string { return f.dataDir() }

// CheckOptions are Check's inputs besides the tree and the facts.
type CheckOptions struct {
	// Plan makes up's plan (required).
	Plan Planner
	// Generated is Assemble's *GenerateError, if any: reported as a failed
	// "cdi generate" check.
	Generated *GenerateError
	// Manifests are manifest files or directories (as `cluster check`
	// reads them) to judge against the node; none: only the
	// configuration's own auto-deployed manifests are.
	Manifests []string
	// Arch is the node's GOARCH.
	Arch string
	// Metrics are the metric families nodeprep exports, with their label
	// names (nodeprep.MetricLabels), for cluster check's KEDA triggers.
	Metrics map[string][]string
}

// Inventory is the simulated inventory the facts are judged against
// (Facts.Simulate), reporting the configured driver's version.
// Errors: gpu.Simulate's.
func Inventory(f *Facts) (*gpu.Inventory, error) {
	inv, err := gpu.Simulate(f.SimulatedServer())
	if err != nil {
		return nil, err
	}
	if f.Driver.Version != "" {
		inv.DriverVersion = f.Driver.Version
	}
	return inv, nil
}

// Check judges the node of facts f on its assembled tree root (Assemble)
// as nodeprep would judge it on the node, with the simulated inventory
// inv: nodeprep's config file; up's plan (nodeprep.Plan: the inventory,
// the CDI patch planned and the patched spec checked, the join as k3s
// reads its config, drop-ins and the unit's arguments, and the containerd
// k3s renders with its runtime handlers and the NVIDIA runtime's mode);
// the kubelet config file k3s passes (k3s.KubeletConfigFindings); `cdi
// check` with what `cdi patch --dry-run` would change; and `cluster
// check` of the manifests against the node's labels and taints. The
// report's OK is false when up would not make the node ready or a
// manifest does not fit it. Errors: a manifest that cannot be read or
// decoded (fault.ErrMalformed), and other failures to judge.
func Check(ctx context.Context, root *hostfs.Root, f *Facts, inv *gpu.Inventory, opts CheckOptions) (*Report, error) {
	start := time.Now()
	r := &Report{Node: f.Name, Simulated: f.SimulatedServer(), OK: true,
		NotJudged: []string{"not judged without a GPU: " + NotJudgedWithoutGPU}}
	defer func() {
		r.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		r.inNodePaths(root.Dir())
	}()
	cfg, err := config.Parse(ConfigPath, []byte(f.Nodeprep.ConfigYAML), config.Default(opts.Arch))
	if err != nil {
		r.add(Result{Name: CheckConfig, Status: StatusFailed, Problems: []string{"error: " + err.Error()}})
		return r, nil
	}
	r.add(Result{Name: CheckConfig, Status: StatusOK, Summary: ConfigPath})
	if opts.Generated != nil {
		r.add(Result{Name: CheckGenerate, Status: StatusFailed, Problems: []string{"error: " + opts.Generated.Error()}})
	}
	if opts.Plan == nil {
		return nil, errors.New("fleet.Check: no planner")
	}
	plan, err := opts.Plan(ctx, cfg, inv)
	if err != nil {
		if errors.Is(err, fault.ErrMalformed) || errors.Is(err, fault.ErrUsage) {
			r.add(Result{Name: CheckConfig, Status: StatusFailed, Problems: []string{"error: " + err.Error()}})
			return r, nil
		}
		return nil, err
	}
	failed := ""
	for _, res := range plan.Stages {
		switch {
		case res.Status == StatusFailed && failed == "":
			failed = res.Name
		case res.Status == StatusSkipped && res.Summary == "" && failed != "":
			res.Summary = "not judged: the " + failed + " stage failed first (up stops there)"
		}
		r.add(res)
	}
	r.add(kubeletCheck(f, plan))
	r.add(cdiCheck(root, inv, plan))
	cres, err := clusterCheck(f, cfg, plan, opts)
	if err != nil {
		return nil, err
	}
	r.add(cres)
	return r, nil
}

// inNodePaths rewrites the paths of the throw-away tree at dir on this
// machine that errors name into the node's own paths (dir/run/cdi/x is
// /run/cdi/x on the node): the tree means nothing to the reader.
func (r *Report) inNodePaths(dir string) {
	if dir == "" || dir == "/" {
		return
	}
	re := regexp.MustCompile(regexp.QuoteMeta(dir) + `(/|\b)`)
	node := func(s string) string { return re.ReplaceAllString(s, "/") }
	for i := range r.Checks {
		c := &r.Checks[i]
		c.Summary = node(c.Summary)
		for j := range c.Problems {
			c.Problems[j] = node(c.Problems[j])
		}
	}
}

// add appends res, which fails the report when it failed.
func (r *Report) add(res Result) {
	if res.Status == StatusFailed {
		r.OK = false
	}
	r.Checks = append(r.Checks, res)
}

// ContainerdOf is the containerd version the k3s of version v ships, as
// far as it matters to nodeprep (CDI's default, the config version): 2.0
// from v1.32.2 and v1.31.6 (k3s PR #11626, "Update to containerd v2.0",
// released in February 2025 and backported to 1.31), 1.7 before; "" for a version that does not
// parse (then the config's version decides).
func ContainerdOf(v string) string {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "+-"); i >= 0 {
		v = v[:i]
	}
	var major, minor, patch int
	if n, _ := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); n < 2 {
		return ""
	}
	switch {
	case major > 1 || minor >= 33 || minor == 32 && patch >= 2 || minor == 31 && patch >= 6:
		return "2.0"
	}
	return "1.7"
}

// kubeletCheck judges the kubelet config file k3s passes, against the
// node-taint list of the plan's join.
func kubeletCheck(f *Facts, plan *Planned) Result {
	res := Result{Name: CheckKubeletConfig, Status: StatusOK}
	p := KubeletConfigPath(f.K3s.Args)
	if f.K3s.KubeletConfig == nil || p == "" {
		res.Status, res.Summary = StatusSkipped, "no --kubelet-arg=config= file"
		return res
	}
	res.Summary = p
	var eff *k3s.Effective
	if plan.Join != nil {
		eff = plan.Join.Effective
	} else {
		// The plan stopped before the join: judge with nodeprep's taints,
		// which the node always registers with.
		eff = &k3s.Effective{NodeTaints: []k3s.Entry{{Value: nodepolicy.DefaultTaintString, Source: ConfigPath}}}
	}
	errs, err := k3s.KubeletConfigFindings(p, []byte(*f.K3s.KubeletConfig), eff)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range errs {
		res.Status = StatusFailed
		res.Problems = append(res.Problems, "error: "+e.Error())
	}
	return res
}

// cdiCheck is `cdi check` on the tree (specset.CheckPatched with the
// inventory's device names and the runtime's findings) and what `cdi
// patch --dry-run` would change: an error the patch does not fix fails
// it; those the patch fixes are up's to fix at boot (a warning). Errors
// already among the plan's reasons are not said twice.
func cdiCheck(root *hostfs.Root, inv *gpu.Inventory, plan *Planned) Result {
	res := Result{Name: CheckCDI, Status: StatusOK}
	opts := plan.CDIOptions
	expect, err := nodepolicy.ExpectedCDIDevices(inv, plan.DeviceNames)
	if err != nil {
		res.Status, res.Problems = StatusFailed, []string{"error: " + err.Error()}
		return res
	}
	opts.Expect, opts.Discover.DriverVersion = expect, inv.DriverVersion
	extra := nodepolicy.InventoryFindings(inv)
	if view, err := k3s.Read(root, plan.K3s); err != nil {
		extra = append(extra, cdi.Finding{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: "containerd config not checked: " + err.Error()})
	} else if fs, err := podpath.RuntimeFindings(root, podpath.UnitOptions(podpath.ContainerdOptions(view.DataDir, view.Effective, opts.Spec, opts.Discover.DriverRoot), view.Unit)); err != nil {
		extra = append(extra, cdi.Finding{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: err.Error()})
	} else {
		extra = append(extra, fs...)
	}
	checked, _, err := specset.CheckPatched(root, opts)
	if err != nil {
		res.Status, res.Problems = StatusFailed, []string{"error: " + err.Error()}
		return res
	}
	said := map[string]bool{}
	for _, st := range plan.Stages {
		for _, p := range st.Problems {
			_, reason, _ := strings.Cut(p, ": ")
			said[reason] = true
		}
	}
	fixed := 0
	for _, f := range append(checked.Findings, extra...) {
		line := f.Code + ": " + f.Message
		switch {
		case f.FixedByPatch:
			fixed++
		case said[line] || said[f.Message] || f.Code == containerd.CodeNotWritten:
		case f.Severity == cdi.SeverityError:
			res.Status = StatusFailed
			res.Problems = append(res.Problems, "error: "+line)
		default:
			if res.Status == StatusOK {
				res.Status = StatusWarning
			}
			res.Problems = append(res.Problems, "warning: "+line)
		}
	}
	slices.SortStableFunc(res.Problems, func(a, b string) int {
		return boolInt(!strings.HasPrefix(a, "error:")) - boolInt(!strings.HasPrefix(b, "error:"))
	})
	changes := 0
	if plan.CDI != nil {
		changes = len(plan.CDI.Changes)
	}
	res.Summary = fmt.Sprintf("%s: cdi patch --dry-run: %s; %s it fixes at boot", opts.Spec, count(changes, "change"), count(fixed, "finding"))
	return res
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// clusterCheck is `cluster check` of the configuration's auto-deployed
// manifests and opts.Manifests against the node as the plan's join
// registers it: every label and taint of k3s's merged node-label and
// node-taint lists (nodeprep's drop-in among them), the pool label as
// `cluster check` picks it (cluster.poolLabel, else the first of
// join.labels), and the node's spec: with toolkit 1.20.0's
// update-application-profile hook in it (cdi.CodeProfileHookReadOnly), a
// GPU pod or device plugin that mounts a read-only /etc/nvidia fails.
func clusterCheck(f *Facts, cfg config.Config, plan *Planned, opts CheckOptions) (Result, error) {
	res := Result{Name: CheckCluster, Status: StatusOK}
	rd := cluster.Reader{IsConfig: func(doc []byte) bool {
		_, err := config.Parse("", doc, config.Default(opts.Arch))
		return err == nil
	}}
	var objs []cluster.Object
	var skip []cluster.Skipped
	names := make([]string, 0, len(f.K3s.AutoDeployManifests))
	for n := range f.K3s.AutoDeployManifests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o, s, err := rd.Read("k3s.autoDeployManifests."+n, strings.NewReader(f.K3s.AutoDeployManifests[n]))
		if err != nil {
			return res, err
		}
		objs, skip = append(objs, o...), append(skip, s...)
	}
	for _, m := range opts.Manifests {
		abs, err := filepath.Abs(m)
		if err != nil {
			return res, fault.Usage(fmt.Errorf("manifests %q: %w", m, err))
		}
		rd.Dir = filepath.Dir(filepath.Clean(m))
		o, s, err := rd.ReadFS(os.DirFS(filepath.Dir(abs)), filepath.Base(abs))
		if err != nil {
			return res, err
		}
		objs, skip = append(objs, o...), append(skip, s...)
	}
	if len(objs) == 0 && len(opts.Manifests)+len(names) == 0 {
		res.Status, res.Summary = StatusSkipped, "no manifests"
		return res, nil
	}
	if len(objs) == 0 {
		// Manifests were given and nothing in them is judged: a wrong
		// directory, or workloads of kinds cluster check does not read,
		// would otherwise pass as "no manifests".
		res.Status, res.Summary = StatusWarning, "nothing to judge in the manifests given"
		if len(skip) == 0 {
			res.Problems = append(res.Problems, fmt.Sprintf("warning: %s: no manifest documents (.yaml, .yml or .json)", strings.Join(opts.Manifests, ", ")))
		}
		for i, sk := range skip {
			if i == 5 {
				res.Problems = append(res.Problems, fmt.Sprintf("warning: and %d more", len(skip)-i))
				break
			}
			res.Problems = append(res.Problems, fmt.Sprintf("warning: %s: %s %s %s is not a workload cluster check judges",
				cluster.Printable(sk.Source), cluster.Printable(sk.APIVersion), cluster.Printable(sk.Kind), cluster.Printable(sk.Name)))
		}
		return res, nil
	}
	pool, err := nodePool(cfg, plan, opts.Arch)
	if err != nil {
		res.Status, res.Problems = StatusFailed, []string{"error: " + err.Error()}
		return res, nil
	}
	if plan.CDI != nil {
		for _, f := range plan.CDI.Findings {
			if f.Code == cdi.CodeProfileHookReadOnly {
				pool.ProfileHook = "the node's CDI spec carries toolkit 1.20.0's update-application-profile hook, which fails a container with a read-only /etc/nvidia (NVIDIA/nvidia-container-toolkit#2026)"
				break
			}
		}
	}
	rep := cluster.Check(objs, skip, cluster.CheckOptions{Pool: pool, Metrics: opts.Metrics})
	judged := 0
	for _, row := range rep.Rows {
		for _, c := range row.Cells {
			judged++
			if c.Verdict == cluster.VerdictFail {
				res.Status = StatusFailed
				res.Problems = append(res.Problems, fmt.Sprintf("error: %s on %s (%s): %s; fix: %s",
					cluster.Printable(row.Object), cluster.Printable(c.Column), cluster.Printable(row.Source), cluster.Printable(c.Reason), cluster.Printable(c.Fix)))
			}
		}
	}
	res.Summary = fmt.Sprintf("%s judged against the node (%s, %s)", count(len(rep.Rows), "object"), count(len(pool.Labels), "label"), count(len(pool.Taints), "taint"))
	if len(rep.Rows) == 0 {
		res.Status, res.Summary = StatusSkipped, "no GPU workload, device plugin, KEDA or Karpenter object in the manifests"
	}
	return res, nil
}

// nodePool is the node as `cluster check` models a pool node: the labels
// and taints the plan's join registers it with (k3s's merged lists), or
// the config's when the plan stopped before the join.
func nodePool(cfg config.Config, plan *Planned, arch string) (cluster.Pool, error) {
	labels, err := k3s.ParseLabels(cfg.Join.Labels)
	if err != nil {
		return cluster.Pool{}, err
	}
	taints, err := k3s.ParseTaints(cfg.Join.Taints)
	if err != nil {
		return cluster.Pool{}, err
	}
	p := cluster.Pool{Labels: labels, Taints: nodepolicy.NodeTaints(cfg.Join.DefaultTaint == nil || *cfg.Join.DefaultTaint, taints),
		Arch: arch, DeviceNames: cfg.CDI.DeviceNames, DriverRoot: cfg.CDI.DriverRoot}
	if plan.Join != nil && plan.Join.Effective != nil {
		p.Labels, p.Taints = nil, nil
		for _, e := range plan.Join.Effective.NodeLabels {
			if l, err := k3s.ParseLabel(e.Value); err == nil {
				p.Labels = append(p.Labels, l)
			}
		}
		for _, e := range plan.Join.Effective.NodeTaints {
			if t, err := k3s.ParseTaint(e.Value); err == nil {
				p.Taints = append(p.Taints, t)
			}
		}
	}
	switch {
	case cfg.Cluster.PoolLabel != "":
		l, err := k3s.ParseLabel(cfg.Cluster.PoolLabel)
		if err != nil {
			return cluster.Pool{}, fmt.Errorf("cluster.poolLabel: %w", err)
		}
		p.Label = l
	case len(labels) > 0:
		p.Label = labels[0]
	default:
		return cluster.Pool{}, cluster.ErrNoPoolLabel
	}
	return p, nil
}

// count is "1 noun" or "n nouns".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
