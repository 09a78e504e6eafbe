package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/cdi/specset"
	"github.com/nodeprep/nodeprep/nodeprep"
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
	CheckKubeletConfig = "kubelet-config" // the kubelet config file k3s passes
	CheckCDI           = "cdi check"      // cdi check, and what cdi patch --dry-run would change
	CheckCluster       = "cluster check"  // the manifests against the node
)

// Check statuses (as nodeprep's stage statuses).
const (
	StatusOK      = nodeprep.StatusOK
	StatusWarning = nodeprep.StatusWarning
	StatusFailed  = nodeprep.StatusFailed
	StatusSkipped = nodeprep.StatusSkipped
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

// CheckOptions are Check's inputs besides the tree and the facts.
type CheckOptions struct {
	// Manifests are manifest files or directories (as `cluster check`
	// reads them) to judge against the node; none: only the
	// configuration's own auto-deployed manifests are.
	Manifests []string
	// Arch is the node's GOARCH.
	Arch string
	// Version is nodeprep's version, for the plan's report.
	Version string
	// Log takes diagnostics (nil: discarded).
	Log *slog.Logger
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
	defer func() { r.DurationMS = float64(time.Since(start).Microseconds()) / 1000 }()
	cfg, err := config.Parse(ConfigPath, []byte(f.Nodeprep.ConfigYAML), config.Default(opts.Arch))
	if err != nil {
		r.add(Result{Name: CheckConfig, Status: StatusFailed, Problems: []string{"error: " + err.Error()}})
		return r, nil
	}
	r.add(Result{Name: CheckConfig, Status: StatusOK, Summary: ConfigPath})
	up, err := upOptions(root, f, cfg, inv, opts)
	if err != nil {
		r.add(Result{Name: CheckConfig, Status: StatusFailed, Problems: []string{"error: " + err.Error()}})
		return r, nil
	}
	plan, err := nodeprep.Plan(ctx, root, up)
	if err != nil {
		return nil, err
	}
	for _, st := range plan.Stages {
		res := Result{Name: st.Name, Status: st.Status, Summary: st.Summary}
		sev := "warning: "
		if st.Status == StatusFailed {
			sev = "error: "
		}
		for _, reason := range st.Reasons {
			res.Problems = append(res.Problems, sev+reason)
		}
		switch {
		case st.Name == nodeprep.StageSelftest:
			res.Summary = "not run: no GPU"
		case st.Name == nodeprep.StageCDI && res.Summary == "" && plan.CDI != nil:
			res.Summary = fmt.Sprintf("%s patched in memory (%s) and checked", plan.CDI.Spec, count(len(plan.CDI.Changes), "change"))
		}
		r.add(res)
	}
	r.add(kubeletCheck(f, plan))
	r.add(cdiCheck(root, up, plan))
	cres, err := clusterCheck(f, cfg, plan, opts)
	if err != nil {
		return nil, err
	}
	r.add(cres)
	return r, nil
}

// add appends res, which fails the report when it failed.
func (r *Report) add(res Result) {
	if res.Status == StatusFailed {
		r.OK = false
	}
	r.Checks = append(r.Checks, res)
}

// upOptions are up's options from the config file cfg as `nodeprep up`
// resolves them with no flags (cmd/nodeprep/app), for the facts' k3s: its
// real arguments and its unit's PATH and versions, in place of what the
// config file replays (join.k3sArgs, join.k3sUnitPath: a difference is a
// warning of the join stage).
func upOptions(root *hostfs.Root, f *Facts, cfg config.Config, inv *gpu.Inventory, opts CheckOptions) (nodeprep.UpOptions, error) {
	j := cfg.Join
	labels, err := k3s.ParseLabels(j.Labels)
	if err != nil {
		return nodeprep.UpOptions{}, err
	}
	taints, err := k3s.ParseTaints(j.Taints)
	if err != nil {
		return nodeprep.UpOptions{}, err
	}
	defaultTaint := j.DefaultTaint == nil || *j.DefaultTaint
	if err := k3s.CheckUnique(labels, nodepolicy.NodeTaints(defaultTaint, taints)); err != nil {
		return nodeprep.UpOptions{}, err
	}
	gfd := j.GFDLabels == nil || *j.GFDLabels
	if err := nodepolicy.CheckUserLabels(labels, gfd); err != nil {
		return nodeprep.UpOptions{}, err
	}
	env := map[string]string{}
	if j.K3sEnvironmentFile != "" {
		if env, err = k3s.LoadEnvironment(root, j.K3sEnvironmentFile, env); err != nil {
			return nodeprep.UpOptions{}, err
		}
	}
	kopts := k3s.Options{
		ConfigPath: j.K3sConfig, DataDir: j.K3sDataDir, Env: env, DropIn: j.DropIn,
		Taints:  nodepolicy.NodeTaints(defaultTaint, taints),
		K3sArgs: f.K3s.Args, AllowOverride: j.AllowOverride, RequireUnregistered: j.RequireUnregistered,
		Reserved: func(key string) string { return nodepolicy.DerivedLabelSource(key, gfd) },
		Unit:     k3s.Unit{Path: f.K3s.UnitPath, Version: f.K3s.Version, ContainerdVersion: ContainerdOf(f.K3s.Version)},
	}
	if kopts.DataDir == "" {
		kopts.DataDir = f.dataDir()
	}
	c := cfg.CDI
	cdiOpts := cdi.FileOptions{
		Spec:     c.Spec,
		SpecDirs: c.SpecDirs,
		Discover: cdi.DiscoverOptions{DriverRoot: c.DriverRoot, GlvndDirs: c.GlvndDirs, Arch: opts.Arch, Paths: c.ContainerPaths},
	}
	if len(cdiOpts.SpecDirs) == 0 { // what k3s's containerd reads, as cdi check's default
		if view, err := k3s.Read(root, kopts); err == nil {
			co := podpath.UnitOptions(podpath.ContainerdOptions(view.DataDir, view.Effective, "", ""), view.Unit)
			if dirs, known, err := containerd.SpecDirs(root, co); err == nil && known {
				cdiOpts.SpecDirs = dirs
			}
		}
	}
	return nodeprep.UpOptions{
		Inventory:         func() (*gpu.Inventory, error) { return inv, nil },
		CDI:               cdiOpts,
		DeviceNames:       c.DeviceNames,
		Join:              kopts,
		GFDLabels:         gfd,
		MIGStrategy:       j.MIGStrategy,
		ExtraLabels:       labels,
		OnSelftestFailure: cfg.Up.OnSelftestFailure,
		Log:               opts.Log,
		Version:           opts.Version,
	}, nil
}

// ContainerdOf is the containerd version the k3s of version v ships, as
// far as it matters to nodeprep (CDI's default): 2.0 from v1.32.2 and
// v1.31.6 (k3s release notes: containerd 2.0 replaced 1.7 in the
// February 2025 releases), 1.7 before; "" for a version that does not
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
func kubeletCheck(f *Facts, plan *nodeprep.Report) Result {
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
func cdiCheck(root *hostfs.Root, up nodeprep.UpOptions, plan *nodeprep.Report) Result {
	res := Result{Name: CheckCDI, Status: StatusOK}
	inv, _ := up.Inventory()
	opts := up.CDI
	expect, err := nodepolicy.ExpectedCDIDevices(inv, up.DeviceNames)
	if err != nil {
		res.Status, res.Problems = StatusFailed, []string{"error: " + err.Error()}
		return res
	}
	opts.Expect, opts.Discover.DriverVersion = expect, inv.DriverVersion
	extra := nodepolicy.InventoryFindings(inv)
	if view, err := k3s.Read(root, up.Join); err != nil {
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
		for _, reason := range st.Reasons {
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
// join.labels).
func clusterCheck(f *Facts, cfg config.Config, plan *nodeprep.Report, opts CheckOptions) (Result, error) {
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
	if len(objs) == 0 {
		res.Status, res.Summary = StatusSkipped, "no manifests"
		return res, nil
	}
	pool, err := nodePool(cfg, plan, opts.Arch)
	if err != nil {
		res.Status, res.Problems = StatusFailed, []string{"error: " + err.Error()}
		return res, nil
	}
	rep := cluster.Check(objs, skip, cluster.CheckOptions{Pool: pool, Metrics: nodeprep.MetricLabels})
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
func nodePool(cfg config.Config, plan *nodeprep.Report, arch string) (cluster.Pool, error) {
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
