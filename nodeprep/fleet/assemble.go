package fleet

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/k3s"
)

// Host paths of the files Assemble writes as the NixOS configuration
// writes them.
const (
	ConfigPath        = "/etc/nodeprep/config.yaml"                 // nodeprep's config
	RuntimeConfigPath = "/etc/nvidia-container-runtime/config.toml" // the NVIDIA runtime's config
	DriverRoot        = "/run/opengl-driver"                        // NixOS's link to the graphics drivers
	containerdTmpl    = "agent/etc/containerd/config.toml.tmpl"     // under k3s's data-dir
)

// GenerateError is Assemble's error when the spec generator refuses the
// configuration (the toolkit's generator unit would fail on the node):
// the tree is assembled without a spec, and Check reports the reason.
type GenerateError struct{ Err error }

func (e *GenerateError) Error() string {
	return "the toolkit's generator would write no CDI spec: " + e.Err.Error()
}

// Unwrap returns the generator's error.
func (e *GenerateError) Unwrap() error { return e.Err }

// SpecGenerator returns the CDI spec (JSON) that `nvidia-ctk cdi generate`
// run with args would write on the host tree root for the GPUs of inv:
// the package that synthesises it (cdi/generate) is plugged in here.
type SpecGenerator func(root *hostfs.Root, inv *gpu.Inventory, args []string) ([]byte, error)

// AssembleOptions are Assemble's inputs besides the facts.
type AssembleOptions struct {
	// Stores are the directories the facts' absolute paths outside the
	// tree (the driver package, the k3s unit's PATH, the store paths the
	// configuration texts name) are read from, the first that has a path
	// winning: "/" (the default) where the configuration was built (the
	// check's sandbox has its inputs in /nix/store), host trees in tests.
	Stores []string
	// Generate writes the CDI spec the toolkit's generator would write;
	// nil writes none (the check then says the spec is missing).
	Generate SpecGenerator
	// Inventory is the simulated inventory the spec is generated for.
	Inventory *gpu.Inventory
	// MaxFiles bounds the files copied or linked from Store (default
	// 100000): a driver package has a few hundred.
	MaxFiles int
}

// Assemble writes into dir (an empty directory) the host tree of the node
// the facts describe, as the configuration would write it:
// /etc/nodeprep/config.yaml; k3s's config file at its configPath and its
// drop-ins; the kubelet config file --kubelet-arg=config= names; the
// containerd template at <dataDir>/agent/etc/containerd/config.toml.tmpl;
// /etc/nvidia-container-runtime/config.toml; /run/opengl-driver linked to
// the driver package as NixOS links it (the package's share/ and lib/,
// and every store path the configuration names, are linked or copied from
// opts.Store at their own paths; /var/run is a link to /run); the NVIDIA
// runtimes on the k3s unit's PATH; and the CDI spec opts.Generate writes,
// at cdi.DefaultSpecPath, with an empty file standing in for each device
// node it names (the driver makes them on the node). When the generator
// fails, the tree without a spec is returned with a *GenerateError. It returns the tree's root. Errors: a file that
// cannot be written or copied, or more than opts.MaxFiles files to copy.
func Assemble(dir string, f *Facts, opts AssembleOptions) (*hostfs.Root, error) {
	if len(opts.Stores) == 0 {
		opts.Stores = []string{"/"}
	}
	if opts.MaxFiles == 0 {
		opts.MaxFiles = 100000
	}
	root, err := hostfs.New(dir)
	if err != nil {
		return nil, err
	}
	a := &assembler{root: root, stores: opts.Stores, max: opts.MaxFiles, seen: map[string]bool{}}
	if err := a.symlink("/var/run", "/run"); err != nil {
		return nil, err
	}
	files := map[string]string{ConfigPath: f.Nodeprep.ConfigYAML}
	cfgPath := k3s.DefaultConfigPath
	if f.K3s.ConfigPath != nil {
		cfgPath = *f.K3s.ConfigPath
	}
	if f.K3s.ConfigYAML != nil {
		files[cfgPath] = *f.K3s.ConfigYAML
	}
	for n, text := range f.K3s.DropIns {
		files[path.Join(k3s.DropInDir(cfgPath), n)] = text
	}
	if f.K3s.KubeletConfig != nil {
		if p := KubeletConfigPath(f.K3s.Args); p != "" {
			files[p] = *f.K3s.KubeletConfig
		}
	}
	if f.K3s.ContainerdConfigTemplate != nil {
		files[path.Join(f.dataDir(), containerdTmpl)] = *f.K3s.ContainerdConfigTemplate
	}
	if f.Toolkit.RuntimeConfigTOML != nil {
		files[RuntimeConfigPath] = *f.Toolkit.RuntimeConfigTOML
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		if err := a.write(p, []byte(files[p]), 0o644); err != nil {
			return nil, err
		}
		// What the configuration names in the store is on the node too.
		for _, sp := range storePaths(files[p]) {
			if err := a.materialize(sp); err != nil {
				return nil, err
			}
		}
	}
	if f.Driver.Package != "" {
		if err := a.symlink(DriverRoot, f.Driver.Package); err != nil {
			return nil, err
		}
		for _, sub := range []string{"share/vulkan", "share/glvnd", "share/egl", "lib"} {
			if err := a.materialize(path.Join(f.Driver.Package, sub)); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range f.K3s.UnitPath {
		for _, b := range []string{"nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime-experimental"} {
			if err := a.materialize(path.Join(d, b)); err != nil {
				return nil, err
			}
		}
	}
	// What the generator reads (--ldconfig-path, --nvidia-cdi-hook-path,
	// --library-search-path) and the module's extra mounts are on the node.
	named := strings.Join(f.Toolkit.GeneratorArgs, " ")
	for _, m := range f.Toolkit.Mounts {
		named += " " + m.HostPath
	}
	for _, sp := range storePaths(named) {
		if err := a.materialize(sp); err != nil {
			return nil, err
		}
	}
	if f.Toolkit.Enable && opts.Generate != nil {
		spec, err := opts.Generate(root, opts.Inventory, f.Toolkit.GeneratorArgs)
		if err != nil {
			// The generator unit would fail at boot: no spec, which Check
			// reports (cdi stage) with this reason.
			return root, &GenerateError{Err: err}
		}
		if err := a.write(cdi.DefaultSpecPath, spec, 0o644); err != nil {
			return nil, err
		}
		for _, sp := range storePaths(string(spec)) {
			if err := a.materialize(sp); err != nil {
				return nil, err
			}
		}
		if err := a.deviceStandIns(); err != nil {
			return nil, err
		}
	}
	return root, nil
}

// deviceStandIns writes an empty file for every device node the spec
// names (and every mount of a path under /dev): the driver creates them
// when it loads, on the node, and making real ones needs root. A spec
// that does not parse is left for the check to report.
func (a *assembler) deviceStandIns() error {
	_, spec, err := cdi.Load(a.root, cdi.DefaultSpecPath)
	if err != nil {
		return nil
	}
	edits := []specs.ContainerEdits{spec.ContainerEdits}
	for _, d := range spec.Devices {
		edits = append(edits, d.ContainerEdits)
	}
	var paths []string
	for _, e := range edits {
		for _, n := range e.DeviceNodes {
			if n == nil {
				continue
			}
			p := n.HostPath
			if p == "" {
				p = n.Path
			}
			paths = append(paths, p)
		}
		for _, m := range e.Mounts {
			if m != nil && strings.HasPrefix(m.HostPath, "/dev/") {
				paths = append(paths, m.HostPath)
			}
		}
	}
	for _, p := range paths {
		if !path.IsAbs(p) || a.root.Exists(p) {
			continue
		}
		if err := a.write(path.Clean(p), nil, 0o666); err != nil {
			return err
		}
	}
	return nil
}

// dataDir is k3s's data-dir, k3s's default when the facts name none.
func (f *Facts) dataDir() string {
	if f.K3s.DataDir != "" {
		return f.K3s.DataDir
	}
	return k3s.DefaultDataDir
}

// KubeletConfigPath is the file the last --kubelet-arg config=FILE of args
// names (k3s passes kubelet-arg entries to the kubelet in order, and the
// kubelet keeps the last --config), or "".
func KubeletConfigPath(args []string) string {
	p := ""
	for i, a := range args {
		v, ok := "", false
		switch {
		case strings.HasPrefix(a, "--kubelet-arg="):
			v, ok = strings.TrimPrefix(a, "--kubelet-arg="), true
		case a == "--kubelet-arg" && i+1 < len(args):
			v, ok = args[i+1], true
		}
		if ok && strings.HasPrefix(v, "config=") {
			p = strings.TrimPrefix(v, "config=")
		}
	}
	if !path.IsAbs(p) {
		return ""
	}
	return path.Clean(p)
}

// storePath matches a Nix store path and what follows it in a path.
var storePath = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`/nix/store/[0-9a-z]{32}-[0-9A-Za-z+._?=-]+(/[0-9A-Za-z+._?=@:-]+)*`)
})

// storePaths are the Nix store paths text names, in order, once each.
func storePaths(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range storePath().FindAllString(text, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// assembler writes the tree.
type assembler struct {
	root   *hostfs.Root
	stores []string
	max    int
	n      int // files copied or linked so far
	seen   map[string]bool
}

// hostDir is the directory of hostPath in the tree, created, with links
// in the tree resolved inside it.
func (a *assembler) hostDir(hostPath string) (string, error) {
	return a.mkdir(path.Dir(hostPath))
}

// mkdir creates the directory hostDir in the tree, links in the tree
// resolved inside it (hostfs.Root.Path), and returns its path on disk.
func (a *assembler) mkdir(hostDir string) (string, error) {
	dir, err := a.root.Path(hostDir)
	if err == nil {
		err = os.MkdirAll(dir, hostfs.DirMode)
	}
	if err != nil {
		return "", fmt.Errorf("assembling the host tree: %w", err)
	}
	return dir, nil
}

// write writes data at hostPath in the tree.
func (a *assembler) write(hostPath string, data []byte, mode fs.FileMode) error {
	dir, err := a.hostDir(hostPath)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, path.Base(hostPath)), data, mode); err != nil {
		return fmt.Errorf("assembling the host tree: writing %s: %w", hostPath, err)
	}
	return nil
}

// symlink makes hostPath in the tree a link to target.
func (a *assembler) symlink(hostPath, target string) error {
	dir, err := a.hostDir(hostPath)
	if err != nil {
		return err
	}
	if err := os.Symlink(target, filepath.Join(dir, path.Base(hostPath))); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("assembling the host tree: linking %s: %w", hostPath, err)
	}
	return nil
}

// materialize puts hostPath of the store into the tree at the same path:
// a directory with its entries, a link as the same link (and what it
// points to), a file hard-linked or copied. A path missing from the store
// is left out (the judgement reports what is missing).
func (a *assembler) materialize(hostPath string) error {
	hostPath = path.Clean(hostPath)
	if a.seen[hostPath] {
		return nil
	}
	a.seen[hostPath] = true
	src, st, err := a.find(hostPath)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		// A parent in the store may be a link itself: follow it.
		if parent := path.Dir(hostPath); parent != hostPath && parent != "/" {
			if _, pst, perr := a.find(parent); perr == nil && pst.Mode()&fs.ModeSymlink != 0 {
				return a.materialize(parent)
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("assembling the host tree: %w", err)
	}
	if a.n++; a.n > a.max {
		return fmt.Errorf("assembling the host tree: more than %d files to copy from %s", a.max, strings.Join(a.stores, ", "))
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("assembling the host tree: %w", err)
		}
		if err := a.symlink(hostPath, target); err != nil {
			return err
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(hostPath), target)
		}
		return a.materialize(target)
	case st.IsDir():
		if _, err := a.mkdir(hostPath); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("assembling the host tree: %w", err)
		}
		for _, e := range entries {
			if err := a.materialize(path.Join(hostPath, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case st.Mode().IsRegular():
		dir, err := a.hostDir(hostPath)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, path.Base(hostPath))
		if os.Link(src, dst) == nil {
			return nil
		}
		return copyFile(src, dst, st.Mode().Perm())
	}
	return nil // a device, FIFO or socket: not part of a package
}

// find is hostPath in the first store that has it, and its Lstat.
func (a *assembler) find(hostPath string) (string, fs.FileInfo, error) {
	var first error
	for _, s := range a.stores {
		src := filepath.Join(s, filepath.FromSlash(hostPath))
		st, err := os.Lstat(src)
		if err == nil {
			return src, st, nil
		}
		if first == nil {
			first = err
		}
	}
	return "", nil, first
}

// copyFile copies src to dst with mode (the store and the tree may be on
// different file systems, where a hard link fails).
func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("assembling the host tree: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("assembling the host tree: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("assembling the host tree: copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("assembling the host tree: copying %s: %w", src, err)
	}
	return nil
}
