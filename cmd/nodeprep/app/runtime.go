package app

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
	"github.com/nodeprep/nodeprep/nodeprep/podpath"
)

// runtimeFindings judges the containerd config k3s uses, and the path a GPU
// pod takes through its runtime handlers (podpath.Judge), against the
// spec `cdi check` checks, with k3s located from the config file's join
// section (join.k3sArgs: the NixOS module writes the k3s arguments there)
// and the environment (as `join` would without flags). Nothing is
// reported when k3s's data-dir does not exist (no k3s on this host). A
// k3s configuration k3s would refuse is an error, as `up` refuses it
// (exit 65): k3s does not start with it, so its containerd serves no pod;
// so is a data-dir that cannot be looked at (a symlink loop, no
// permission), which is not "no k3s".
func runtimeFindings(g *globals, spec, driverRoot string) cdi.Findings {
	js, err := (&joinFlags{}).resolve(g, pflag.NewFlagSet("k3s", pflag.ContinueOnError))
	if err != nil {
		return cdi.Findings{{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: "containerd config not checked: " + err.Error()}}
	}
	view, err := k3s.Read(g.host, js.opts)
	if err != nil {
		return cdi.Findings{{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: "containerd config not checked: " + err.Error()}}
	}
	present, err := k3sPresent(g, view.DataDir)
	if err != nil {
		return cdi.Findings{{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: "containerd config not checked: " + err.Error()}}
	}
	// With the k3s unit's PATH known (join.k3sUnitPath), a k3s that has
	// never started is judged too: the handlers it will register are
	// predicted from where it looks.
	if !present && view.Effective.ContainerRuntimeEndpoint == nil && view.Unit.Path == nil {
		return nil
	}
	findings, err := podpath.RuntimeFindings(g.host, podpath.UnitOptions(podpath.ContainerdOptions(view.DataDir, view.Effective, spec, driverRoot), view.Unit))
	if err != nil {
		return cdi.Findings{{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: err.Error()}}
	}
	return findings
}

// runtimeJudge is runtimeFindings for the spec and driver root of opts,
// called when health or a re-patch judges the runtime: they judge it from
// the same facts, by the same code, as cdi check.
func runtimeJudge(g *globals, opts cdi.FileOptions) func() cdi.Findings {
	return func() cdi.Findings { return runtimeFindings(g, opts.Spec, opts.Discover.DriverRoot) }
}

// k3sPresent reports whether k3s's data-dir exists: false only when it
// does not (fs.ErrNotExist); any other error looking at it (a symlink
// loop, no permission) is returned, naming it.
func k3sPresent(g *globals, dataDir string) (bool, error) {
	_, err := g.host.Stat(dataDir)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("k3s's data-dir %s: %w", dataDir, err)
}

// runtimeSpecDirs are the CDI spec directories of the containerd k3s runs
// (its config's cdi_spec_dirs, containerd.SpecDirs), for a CDI view that
// sees what the runtime sees when neither --spec-dir nor cdi.specDirs says
// otherwise. It is nil (the CDI view's defaults) when there is no k3s on
// this host, k3s uses an external runtime, or its configuration cannot be
// read: runtimeFindings reports those.
func runtimeSpecDirs(g *globals) []string {
	js, err := (&joinFlags{}).resolve(g, pflag.NewFlagSet("k3s", pflag.ContinueOnError))
	if err != nil {
		return nil
	}
	view, err := k3s.Read(g.host, js.opts)
	if err != nil || !g.host.Exists(view.DataDir) {
		return nil
	}
	opts := podpath.UnitOptions(podpath.ContainerdOptions(view.DataDir, view.Effective, "", ""), view.Unit)
	dirs, known, err := containerd.SpecDirs(g.host, opts)
	if err != nil || !known {
		return nil
	}
	return dirs
}

// podHandler returns the program of the runtime handler GPU pods use
// (podpath.PatchedClass, nvidia-cdi) in the containerd config k3s
// renders, for `selftest --container` to create its probe through, as a
// pod's container is created: "" when the host root is not "/" (the
// handler reads real host paths), k3s has no config or no such handler, or
// its BinaryName does not exist. The containerd check reports those.
func podHandler(g *globals) string {
	if g.host.Dir() != "/" {
		return ""
	}
	js, err := (&joinFlags{}).resolve(g, pflag.NewFlagSet("k3s", pflag.ContinueOnError))
	if err != nil {
		return ""
	}
	view, err := k3s.Read(g.host, js.opts)
	if err != nil || !g.host.Exists(view.DataDir) {
		return ""
	}
	c, _, err := containerd.Load(g.host, podpath.UnitOptions(podpath.ContainerdOptions(view.DataDir, view.Effective, "", ""), view.Unit))
	if err != nil || c == nil {
		return ""
	}
	for _, rt := range c.Runtimes {
		if rt.Name == podpath.PatchedClass && rt.BinaryName != "" && g.host.Exists(rt.BinaryName) {
			return rt.BinaryName
		}
	}
	return ""
}
