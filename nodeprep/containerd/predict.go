package containerd

import (
	"path"
	"strconv"
	"strings"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// CodeNoHandler is the finding that k3s, before it has rendered its
// containerd config, would register no NVIDIA runtime handler: it found
// no NVIDIA container runtime where it looks (PredictRuntimes).
const CodeNoHandler = "containerd-no-nvidia-handler"

// toolkitDir is where the GPU Operator installs the NVIDIA runtimes; k3s
// looks there after its PATH (pkg/agent/containerd/nvidia.go).
const toolkitDir = "/usr/local/nvidia/toolkit"

// predictedHandler is one runtime handler k3s registers when it finds the
// binary it is named for.
type predictedHandler struct {
	name, binary string
	cdiOnly      bool // registered only by a k3s that knows nvidia-container-runtime.cdi
}

// predictedHandlers are the handlers k3s adds to the config it renders from
// its base template (pkg/agent/containerd/nvidia.go,
// findNvidiaContainerRuntimes): nvidia and nvidia-experimental, and since
// k3s PR #11065 nvidia-cdi for nvidia-container-runtime.cdi. Sorted by
// name, as Config.Runtimes is.
var predictedHandlers = []predictedHandler{
	{name: "nvidia", binary: "nvidia-container-runtime"},
	{name: "nvidia-cdi", binary: "nvidia-container-runtime.cdi", cdiOnly: true},
	{name: "nvidia-experimental", binary: "nvidia-container-runtime-experimental"},
}

// SearchesPath reports whether the k3s of version v (as k3s --version or
// the package prints it: "v1.33.4+k3s1", "1.33.4+k3s1"; "" for a current
// k3s) looks for the NVIDIA runtimes on its PATH and registers
// nvidia-cdi. k3s issue #10761 ("Custom path for runtimes autodetect",
// fixed with PR #11065 and backported) made it search PATH
// (exec.LookPath) and then /usr/local/nvidia/toolkit from v1.31.2,
// v1.30.6, v1.29.10 and v1.28.15; releases before look in
// /usr/local/nvidia/toolkit and /usr/bin only. A version that does not
// parse counts as current.
func SearchesPath(v string) bool {
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "+-"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) < 2 {
		return true
	}
	num := func(i int) (int, bool) {
		if i >= len(parts) {
			return 0, true
		}
		n, err := strconv.Atoi(parts[i])
		return n, err == nil
	}
	major, ok1 := num(0)
	minor, ok2 := num(1)
	patch, ok3 := num(2)
	if !ok1 || !ok2 || !ok3 {
		return true
	}
	if major != 1 {
		return major > 1
	}
	first := map[int]int{31: 2, 30: 6, 29: 10, 28: 15}
	switch {
	case minor >= 32:
		return true
	case minor < 28:
		return false
	}
	return patch >= first[minor]
}

// Prediction is where k3s would find the NVIDIA runtimes before it has
// rendered its containerd config, and the handlers it would register.
type Prediction struct {
	// Runtimes are the handlers k3s would register, sorted by name, with
	// the absolute BinaryName it would write.
	Runtimes []Runtime `json:"runtimes" yaml:"runtimes"`
	// Looked are the directories k3s looks in, in order.
	Looked []string `json:"looked" yaml:"looked"`
}

// PredictRuntimes predicts, under root, the NVIDIA runtime handlers k3s
// registers in the config it renders from its base template, as k3s
// finds them (pkg/agent/containerd/nvidia.go): for each handler's binary,
// the first of the k3s unit's PATH directories unitPath holding an
// executable file of that name (exec.LookPath), else
// /usr/local/nvidia/toolkit holding a file of that name that is not a
// directory. A k3s before the PATH search (SearchesPath false for
// k3sVersion) looks in /usr/local/nvidia/toolkit, then /usr/bin, and
// knows no nvidia-cdi.
func PredictRuntimes(root *hostfs.Root, unitPath []string, k3sVersion string) Prediction {
	var p Prediction
	newK3s := SearchesPath(k3sVersion)
	if newK3s {
		for _, d := range unitPath {
			if path.IsAbs(d) { // k3s's exec.LookPath skips relative entries (ErrDot)
				p.Looked = append(p.Looked, path.Clean(d))
			}
		}
		p.Looked = append(p.Looked, toolkitDir)
	} else {
		p.Looked = []string{toolkitDir, "/usr/bin"}
	}
	for _, h := range predictedHandlers {
		if h.cdiOnly && !newK3s {
			continue
		}
		for i, d := range p.Looked {
			bin := path.Join(d, h.binary)
			st, err := root.Stat(bin)
			if err != nil || st.IsDir() {
				continue
			}
			// exec.LookPath wants an executable; the fixed directories
			// only a file that is not a directory.
			onPath := newK3s && i < len(p.Looked)-1
			if onPath && st.Mode().Perm()&0o111 == 0 {
				continue
			}
			p.Runtimes = append(p.Runtimes, Runtime{Name: h.name, BinaryName: bin})
			break
		}
	}
	return p
}

// noHandler is the CodeNoHandler finding for a prediction that found no
// runtime: where k3s looked, and the fix.
func noHandler(p Prediction, dataDir string) cdi.Finding {
	return errorf(CodeNoHandler, "%s is not written yet and k3s would register no NVIDIA runtime handler when it renders it: it looks for nvidia-container-runtime and nvidia-container-runtime.cdi in %s (k3s pkg/agent/containerd/nvidia.go) and none is there, so GPU pods fail with \"no runtime for nvidia-cdi is configured\"; fix: put the NVIDIA Container Toolkit's runtime binaries on the k3s service's PATH (on NixOS the nodeprep module does it for k3s; by hand: systemd.services.k3s.path = [ pkgs.nvidia-container-toolkit.tools ])",
		ConfigPath(dataDir), strings.Join(p.Looked, ", "))
}

// predicted is the config k3s would render from its base template with
// the handlers of p and no template of the user's: its CDI settings are
// k3s's defaults, which nodeprep does not know, so only its handlers and
// spec directories are judged. Its version is the one k3s's base template
// writes for the containerd it ships: 3 for containerd 2.x (k3s PR #11626,
// "Update to containerd v2.0": config version 3 by default, from k3s
// v1.32.2 and v1.31.6), 2 for containerd 1.x; a containerd version that
// is unknown ("") is taken to be a current k3s's, 2.x.
func predicted(dataDir string, p Prediction, containerdVersion string) *Config {
	version := int64(3)
	if strings.HasPrefix(strings.TrimPrefix(containerdVersion, "v"), "1.") {
		version = 2
	}
	return &Config{Path: ConfigPath(dataDir) + " (predicted)", Version: version, Predicted: true, Runtimes: p.Runtimes}
}

// addPredicted adds to c, read from a template built on k3s's base
// template, the handlers of p the template does not define itself.
func addPredicted(c *Config, p Prediction) {
	for _, rt := range p.Runtimes {
		found := false
		for _, have := range c.Runtimes {
			found = found || have.Name == rt.Name
		}
		if !found {
			c.Runtimes = append(c.Runtimes, rt)
		}
	}
	sortRuntimes(c.Runtimes)
}
