package nodeprep

import (
	"log/slog"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/nodepolicy"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
)

// ConfigPlan is what UpOptionsFromConfig takes besides the config file:
// what a node configuration says of the node that the config file does
// not (a fleet check's facts).
type ConfigPlan struct {
	// Inventory is the inventory to plan with (a simulated server).
	Inventory *gpu.Inventory
	// Arch is the node's GOARCH.
	Arch string
	// K3sArgs are the k3s service's real arguments, in place of the
	// config's join.k3sArgs (which replays them on the node).
	K3sArgs []string
	// Unit is the k3s service's PATH and versions, in place of the
	// config's join.k3sUnitPath.
	Unit k3s.Unit
	// DataDir is k3s's data-dir when the config names none.
	DataDir string
	// Version is nodeprep's version; Log takes diagnostics.
	Version string
	Log     *slog.Logger
}

// UpOptionsFromConfig is up's options from the config file cfg as `nodeprep
// up` resolves them with no flag and no k3s environment file read from the
// process (cmd/nodeprep/app does the same over its flags), with the k3s
// arguments and unit of in, for Plan on a tree assembled from a node
// configuration. The CDI spec directories default, as `cdi check`'s do, to
// the cdi_spec_dirs of the containerd k3s renders. Errors (the config's
// labels or taints invalid or given twice, a label nodeprep derives, an
// unreadable k3s environment file) are marked fault.ErrMalformed.
func UpOptionsFromConfig(host *hostfs.Root, cfg config.Config, in ConfigPlan) (UpOptions, error) {
	j := cfg.Join
	env := map[string]string{}
	if j.K3sEnvironmentFile != "" {
		var err error
		if env, err = k3s.LoadEnvironment(host, j.K3sEnvironmentFile, env); err != nil {
			return UpOptions{}, err
		}
	}
	js, err := ResolveJoin(j, env)
	if err != nil {
		return UpOptions{}, err
	}
	kopts := js.K3s
	kopts.K3sArgs = in.K3sArgs
	kopts.Unit = in.Unit
	if kopts.DataDir == "" {
		kopts.DataDir = in.DataDir
	}
	c := cfg.CDI
	cdiOpts := cdi.FileOptions{
		Spec:     c.Spec,
		SpecDirs: c.SpecDirs,
		Discover: cdi.DiscoverOptions{DriverRoot: c.DriverRoot, GlvndDirs: c.GlvndDirs, Arch: in.Arch, Paths: c.ContainerPaths},
	}
	if len(cdiOpts.SpecDirs) == 0 {
		if view, err := k3s.Read(host, kopts); err == nil {
			co := podpath.UnitOptions(podpath.ContainerdOptions(view.DataDir, view.Effective, "", ""), view.Unit)
			if dirs, known, err := containerd.SpecDirs(host, co); err == nil && known {
				cdiOpts.SpecDirs = dirs
			}
		}
	}
	inv := in.Inventory
	return UpOptions{
		Inventory:         func() (*gpu.Inventory, error) { return inv, nil },
		CDI:               cdiOpts,
		DeviceNames:       c.DeviceNames,
		Join:              kopts,
		GFDLabels:         js.GFD,
		MIGStrategy:       js.MIGStrategy,
		ExtraLabels:       js.Labels,
		OnSelftestFailure: cfg.Up.OnSelftestFailure,
		Log:               in.Log,
		Version:           in.Version,
	}, nil
}

// JoinSettings are what a config file's join section resolves to: the k3s
// options of the drop-in (its taints with the default one, the labels
// nodeprep derives reserved), whether GFD's labels are on, GFD's MIG
// strategy and the user's own labels.
type JoinSettings struct {
	K3s         k3s.Options
	GFD         bool
	MIGStrategy string
	Labels      []k3s.Label
}

// ResolveJoin resolves the join section j (with any command-line flags
// already applied over it) and k3s's environment env (K3S_CONFIG_FILE,
// K3S_DATA_DIR: k3s.LoadEnvironment) into the settings `join`, `up`,
// `health` and a fleet check plan with. Errors, marked fault.ErrMalformed:
// a label or taint that does not parse, a label or a taint's key and
// effect given twice (k3s.CheckUnique), a user label whose key nodeprep
// derives (nodepolicy.CheckUserLabels).
func ResolveJoin(j config.JoinConfig, env map[string]string) (JoinSettings, error) {
	labels, err := k3s.ParseLabels(j.Labels)
	if err != nil {
		return JoinSettings{}, err
	}
	taints, err := k3s.ParseTaints(j.Taints)
	if err != nil {
		return JoinSettings{}, err
	}
	defaultTaint := j.DefaultTaint == nil || *j.DefaultTaint
	nodeTaints := nodepolicy.NodeTaints(defaultTaint, taints)
	if err := k3s.CheckUnique(labels, nodeTaints); err != nil {
		return JoinSettings{}, err
	}
	gfd := j.GFDLabels == nil || *j.GFDLabels
	if err := nodepolicy.CheckUserLabels(labels, gfd); err != nil {
		return JoinSettings{}, err
	}
	return JoinSettings{
		K3s: k3s.Options{
			ConfigPath: j.K3sConfig, DataDir: j.K3sDataDir, Env: env, DropIn: j.DropIn,
			Taints:        nodeTaints,
			K3sArgs:       j.K3sArgs,
			AllowOverride: j.AllowOverride, RequireUnregistered: j.RequireUnregistered,
			Unit: k3s.Unit{Path: j.K3sUnitPath},
			// k3s's own files and arguments may not set a label nodeprep
			// derives, as --label may not.
			Reserved: func(key string) string { return nodepolicy.DerivedLabelSource(key, gfd) },
		},
		GFD:         gfd,
		MIGStrategy: j.MIGStrategy,
		Labels:      labels,
	}, nil
}
