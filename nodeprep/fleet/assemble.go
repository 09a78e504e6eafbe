package fleet

import (
	"context"
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
	"syscall"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
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
	// MaxFiles bounds the files copied or linked from Stores (default
	// 100000): a driver package has a few hundred.
	MaxFiles int
	// MaxFileBytes bounds one file taken from Stores (default
	// DefaultMaxFileBytes) and MaxBytes all of them (default
	// DefaultMaxBytes): a file past them is refused, not copied.
	MaxFileBytes, MaxBytes int64
}

// DefaultMaxFileBytes and DefaultMaxBytes bound what Assemble takes from
// the store: 1 GiB a file, 4 GiB in all. The largest file of an NVIDIA
// driver package (a GSP firmware image, libnvidia-rtcore) is about
// 100 MiB, the whole package about 1.5 GiB.
const (
	DefaultMaxFileBytes = 1 << 30
	DefaultMaxBytes     = 4 << 30
)

// Assemble writes into dir (an empty directory) the host tree of the node
// the facts describe, as the configuration would write it:
// /etc/nodeprep/config.yaml; k3s's config file at its configPath and its
// drop-ins; the kubelet config file --kubelet-arg=config= names; the
// containerd template at <dataDir>/agent/etc/containerd/config.toml.tmpl;
// /etc/nvidia-container-runtime/config.toml; /run/opengl-driver linked to
// the driver package as NixOS links it (the package's share/ and lib/,
// and every store path the configuration names, are linked or copied from
// opts.Stores at their own paths; /var/run is a link to /run); the NVIDIA
// runtimes on the k3s unit's PATH; and the CDI spec opts.Generate writes,
// at cdi.DefaultSpecPath, with an empty file standing in for each device
// node it names (the driver makes them on the node). When the generator
// fails, the tree without a spec is returned with a *GenerateError. It
// returns the tree's root.
//
// Only paths under StoreDir are taken from the stores: a link in the store
// is put in the tree as the same link, and what it points to is taken only
// when that is in the store too (a link out of the store dangles in the
// tree); a path whose parent in a store is a link is taken as that link.
// Every file is written by a rename into the tree, never through a link
// or into a file hard-linked from the store.
//
// Errors: a file that cannot be written or copied; a file the facts place
// where the tree has a directory, more than opts.MaxFiles files, a file
// over opts.MaxFileBytes or over opts.MaxBytes in all to take from the
// stores (fault.ErrMalformed); ctx's error once it is done (SIGTERM).
func Assemble(ctx context.Context, dir string, f *Facts, opts AssembleOptions) (*hostfs.Root, error) {
	if len(opts.Stores) == 0 {
		opts.Stores = []string{"/"}
	}
	if opts.MaxFiles == 0 {
		opts.MaxFiles = 100000
	}
	if opts.MaxFileBytes == 0 {
		opts.MaxFileBytes = DefaultMaxFileBytes
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	root, err := hostfs.New(dir)
	if err != nil {
		return nil, err
	}
	a := &assembler{ctx: ctx, root: root, stores: opts.Stores, max: opts.MaxFiles, maxFile: opts.MaxFileBytes, maxBytes: opts.MaxBytes, seen: map[string]bool{}}
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
			return nil, fault.Malformed(fmt.Errorf("the facts place a file at %s, where the host tree cannot hold one: %w", p, err))
		}
	}
	for _, p := range names {
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
		if _, _, linked, err := a.find(f.Driver.Package); linked == "" && errors.Is(err, fs.ErrNotExist) {
			return nil, fault.Unavailable(fmt.Errorf("driver.package %s is in no store here (%s): build or fetch it first (nix-store --realise %s); a flake check has it as an input", f.Driver.Package, strings.Join(a.stores, ", "), f.Driver.Package))
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
		if err := a.ctx.Err(); err != nil {
			return err
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
	ctx               context.Context
	root              *hostfs.Root
	stores            []string
	max               int
	n                 int // files copied or linked so far
	maxFile, maxBytes int64
	bytes             int64 // bytes of the files taken so far
	seen              map[string]bool
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

// write writes data at hostPath in the tree, by a rename: never through a
// link at hostPath (which may point out of the tree) nor into a file
// hard-linked from the store. What is written is not taken from the store
// after (a.seen).
func (a *assembler) write(hostPath string, data []byte, mode fs.FileMode) error {
	dir, err := a.hostDir(hostPath)
	if err != nil {
		return err
	}
	a.seen[path.Clean(hostPath)] = true
	if err := writeRename(filepath.Join(dir, path.Base(hostPath)), data, mode); err != nil {
		return fmt.Errorf("assembling the host tree: writing %s: %w", hostPath, pathErr(err))
	}
	return nil
}

// writeRename writes data to a new file beside dst and renames it over
// dst. The tree is thrown away after the check: no fsync.
func writeRename(dst string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".assemble-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// pathErr is err without the path on this machine it names (the tree's
// temporary directory means nothing to the reader).
func pathErr(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
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
// points to, when that is in the store), a file hard-linked or copied. A
// path outside StoreDir, or missing from the store, is left out (the
// judgement reports what is missing); a path whose parent in the store is
// a link is taken as that link.
func (a *assembler) materialize(hostPath string) error {
	hostPath = path.Clean(hostPath)
	if !IsStorePath(hostPath) || a.seen[hostPath] {
		return nil
	}
	a.seen[hostPath] = true
	if err := a.ctx.Err(); err != nil {
		return err
	}
	src, st, linked, err := a.find(hostPath)
	if linked != "" {
		return a.materialize(linked)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("assembling the host tree: %w", err)
	}
	if a.n++; a.n > a.max {
		return fault.Malformed(fmt.Errorf("assembling the host tree: more than %d files to copy from %s", a.max, strings.Join(a.stores, ", ")))
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
		if st.Size() > a.maxFile {
			return fault.Malformed(fmt.Errorf("assembling the host tree: %s is %d bytes, more than the %d a file taken from the store may have", hostPath, st.Size(), a.maxFile))
		}
		if a.bytes += st.Size(); a.bytes > a.maxBytes {
			return fault.Malformed(fmt.Errorf("assembling the host tree: more than %d bytes to take from the store (at %s)", a.maxBytes, hostPath))
		}
		dir, err := a.hostDir(hostPath)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, path.Base(hostPath))
		if os.Link(src, dst) == nil {
			return nil
		}
		return copyFile(a.ctx, src, dst, st.Mode().Perm(), st.Size())
	}
	return nil // a device, FIFO or socket: not part of a package
}

// find is hostPath (a store path) in the first store that has it, and its
// Lstat. It walks each store one name at a time, so that a parent that is
// a link is never followed (the system would follow it out of the
// store): it returns that parent as linked instead, for the tree to take
// as the link it is.
func (a *assembler) find(hostPath string) (src string, st fs.FileInfo, linked string, err error) {
	names := strings.Split(strings.TrimPrefix(hostPath, StoreDir+"/"), "/")
	var first error
	for _, s := range a.stores {
		cur := filepath.Join(s, filepath.FromSlash(StoreDir))
		for i, n := range names {
			cur = filepath.Join(cur, n)
			st, err := os.Lstat(cur)
			if err != nil {
				if first == nil {
					first = err
				}
				break
			}
			if i == len(names)-1 {
				return cur, st, "", nil
			}
			if st.Mode()&fs.ModeSymlink != 0 {
				return "", nil, path.Join(StoreDir, path.Join(names[:i+1]...)), nil
			}
			if !st.IsDir() {
				if first == nil {
					first = fs.ErrNotExist
				}
				break
			}
		}
	}
	return "", nil, "", first
}

// copyFile copies src (size bytes when it was found) to dst with mode (the
// store and the tree may be on different file systems, where a hard link
// fails). It reads no more than size bytes, opens no FIFO or link put in
// src's place since, and stops when ctx is done.
func copyFile(ctx context.Context, src, dst string, mode fs.FileMode, size int64) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("assembling the host tree: %w", err)
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("assembling the host tree: %s is no longer a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("assembling the host tree: %w", err)
	}
	if _, err := io.Copy(out, &ctxReader{ctx: ctx, r: io.LimitReader(in, size)}); err != nil {
		out.Close()
		return fmt.Errorf("assembling the host tree: copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("assembling the host tree: copying %s: %w", src, err)
	}
	return nil
}

// ctxReader reads from r until ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
