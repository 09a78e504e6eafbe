package podpath

import (
	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/containerd"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// ContainerdOptions are the containerd check's inputs for k3s's effective
// data-dir and container-runtime-endpoint (from k3s.Result or k3s.View)
// and the CDI spec nodeprep patches. UnitOptions adds the k3s service's
// PATH and versions.
func ContainerdOptions(dataDir string, eff *k3s.Effective, spec, driverRoot string) containerd.Options {
	o := containerd.Options{DataDir: dataDir, SpecPaths: []string{spec}, DriverRoot: driverRoot}
	if eff != nil && eff.ContainerRuntimeEndpoint != nil {
		o.Endpoint = eff.ContainerRuntimeEndpoint.Value
	}
	return o
}

// UnitOptions sets in o what is known of the k3s service (k3s.Unit): its
// PATH, where k3s finds the NVIDIA runtimes before it has rendered its
// containerd config, and its versions.
func UnitOptions(o containerd.Options, u k3s.Unit) containerd.Options {
	o.UnitPath, o.K3sVersion, o.ContainerdVersion = u.Path, u.Version, u.ContainerdVersion
	return o
}

// ContainerdFindings runs the containerd check for a join result. `join`
// reports every finding as a warning; `up` fails on an error finding, as
// `cdi check` does (one fact, one verdict): the CDI setting is judged for
// the containerd k3s ships (its binary's version) and the file k3s
// renders (its template, when config.toml is not written yet). A file that cannot be read or parsed is a
// finding of code containerd.CodeBadConfig. A config k3s has not written
// yet (before its first start; on every host without k3s) is no finding:
// there is nothing to check, so it comes back as a note, for the debug log.
// The pod-path findings (Judge: does a GPU pod of the runtime handlers
// get the patched spec?) come with them.
func ContainerdFindings(host *hostfs.Root, res *k3s.Result, spec, driverRoot string) (findings cdi.Findings, notes []string) {
	rep, err := containerd.Check(host, UnitOptions(ContainerdOptions(res.DataDir, res.Effective, spec, driverRoot), res.Unit))
	if err != nil {
		return cdi.Findings{{Severity: cdi.SeverityError, Code: containerd.CodeBadConfig, Message: err.Error()}}, nil
	}
	for _, f := range append(rep.Findings, podPathFindings(host, rep, spec)...) {
		if f.Code == containerd.CodeNotWritten {
			notes = append(notes, f.Message)
			continue
		}
		findings = append(findings, f)
	}
	return findings, notes
}
