package fleet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/config"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestAssemble: the tree holds the files as the configuration writes
// them, /run/opengl-driver resolving into the driver package, the store
// paths the configuration names, the spec with stand-ins for its device
// nodes, and nothing outside dir (a path through /var/run, a link to
// /run, stays in the tree).
func TestAssemble(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	cfgPath, cfgText := "/var/run/k3s-fleet-test/config.yaml", "node-label: [a=b]\n"
	f.K3s.ConfigPath, f.K3s.ConfigYAML = &cfgPath, &cfgText
	f.K3s.DropIns = map[string]string{"10-site.yaml": "node-taint+: [x:NoSchedule]\n"}
	tmpl := "version = 2\n"
	f.K3s.ContainerdConfigTemplate = &tmpl
	spec, err := os.ReadFile(testkit.Testdata(t, "hosts", "nixos-h200", "run", "cdi", "nvidia-container-toolkit.json"))
	if err != nil {
		t.Fatal(err)
	}
	const ldconfig = "/nix/store/3c4d5f6g7h8j9k0l1m2n3p4q5r6s7a8b-glibc-2.39-52-bin/bin/ldconfig"
	f.Toolkit.GeneratorArgs = append(f.Toolkit.GeneratorArgs, "--ldconfig-path", ldconfig)
	var gotArgs []string
	ldconfigThere := false
	dir := t.TempDir()
	root, err := Assemble(context.Background(), dir, f, AssembleOptions{
		Stores: []string{testkit.Testdata(t, "hosts", "nixos-h200"), testkit.Testdata(t, "hosts", "nvruntime-nixos-117")},
		Generate: func(root *hostfs.Root, _ *gpu.Inventory, args []string) ([]byte, error) {
			gotArgs = args
			ldconfigThere = root.Exists(ldconfig) // what the generator reads is there before it runs
			return spec, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !ldconfigThere {
		t.Errorf("%s, named by the generator's arguments, was not in the tree when it ran", ldconfig)
	}
	if len(gotArgs) != len(f.Toolkit.GeneratorArgs) {
		t.Errorf("generator got %q, want the facts' %q", gotArgs, f.Toolkit.GeneratorArgs)
	}
	for p, want := range map[string]string{
		ConfigPath:                        f.Nodeprep.ConfigYAML,
		"/run/k3s-fleet-test/config.yaml": cfgText,
		"/var/run/k3s-fleet-test/config.yaml.d/10-site.yaml":             f.K3s.DropIns["10-site.yaml"],
		"/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl":     tmpl,
		"/nix/store/0a1b2c3d4e5f6g7h8j9k0l1m2n3p4q5r-k3s-kubelet-config": *f.K3s.KubeletConfig,
	} {
		got, err := root.ReadFile(p, 1<<20)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{
		"/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json",
		"/run/opengl-driver/lib/libEGL_nvidia.so.0",                                                                    // a link in the package, kept
		"/nix/store/8r7q6p5n4m3l2k1j0h9g8f7d6c5b4a3z-libglvnd-1.7.0/lib/libEGL.so.1",                                   // named by the config
		"/nix/store/6e7f8g9h0j1k2l3m4n5p6q7r8s9a0b1c-nvidia-container-toolkit-1.17.8/bin/nvidia-container-runtime.cdi", // on the unit's PATH
		"/nix/store/6f7g8h9j0k1l2m3n4p5q6r7s8a9b0c1d-nvidia-container-toolkit-1.20.2-tools/bin/nvidia-cdi-hook",        // named by the spec
		cdi.DefaultSpecPath, "/dev/nvidia7", "/dev/nvidiactl", "/dev/dri/renderD135",
	} {
		if !root.Exists(p) {
			t.Errorf("%s is not in the tree", p)
		}
	}
	if _, err := os.Lstat("/run/k3s-fleet-test"); err == nil {
		t.Errorf("Assemble wrote /run/k3s-fleet-test outside its tree")
	}
	if target, err := os.Readlink(filepath.Join(dir, "run", "opengl-driver")); err != nil || target != f.Driver.Package {
		t.Errorf("/run/opengl-driver links to %q (%v), want %s", target, err, f.Driver.Package)
	}
}

// TestAssembleBounded: a store with more files than MaxFiles is refused.
func TestAssembleBounded(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Assemble(context.Background(), t.TempDir(), f, AssembleOptions{Stores: []string{testkit.Testdata(t, "hosts", "nixos-h200")}, MaxFiles: 10})
	if err == nil {
		t.Fatal("no error for more than 10 files")
	}
}

// TestAssembleGeneratorRefuses: a generator that refuses the configuration
// leaves the tree without a spec and says why (*GenerateError), and Check
// reports it as a failed check of its own: the node would have no spec.
func TestAssembleGeneratorRefuses(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("a GPU in MIG mode is not modelled")
	root, err := Assemble(context.Background(), t.TempDir(), f, AssembleOptions{
		Stores:   []string{testkit.Testdata(t, "hosts", "nixos-h200")},
		Generate: func(*hostfs.Root, *gpu.Inventory, []string) ([]byte, error) { return nil, refusal },
	})
	var ge *GenerateError
	if !errors.As(err, &ge) || !errors.Is(err, refusal) || root == nil {
		t.Fatalf("Assemble: %v, %v; want the tree and a GenerateError wrapping the refusal", root, err)
	}
	if root.Exists(cdi.DefaultSpecPath) {
		t.Errorf("a spec was written")
	}
	inv, err := Inventory(f)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Check(context.Background(), root, f, inv, CheckOptions{Arch: "amd64", Generated: ge,
		Plan: func(context.Context, config.Config, *gpu.Inventory) (*Planned, error) { return &Planned{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Checks) < 2 || rep.Checks[1].Name != CheckGenerate || rep.Checks[1].Status != StatusFailed {
		t.Errorf("report %+v, want a failed %q check", rep, CheckGenerate)
	}
}

// hostileStore is a store whose package links out of the store: a link
// to a file outside, a directory of the package that is a link outside
// (absolute and relative), and a file of the configuration's own; the
// file outside holds secret. It returns the store, the outside file and
// the package's store path.
func hostileStore(t *testing.T) (store, outside, pkg string) {
	t.Helper()
	base := t.TempDir()
	outsideDir := filepath.Join(base, "outside")
	outside = filepath.Join(outsideDir, "secret")
	store = filepath.Join(base, "store")
	pkg = "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-hostile"
	dir := filepath.Join(store, pkg)
	for _, d := range []string{outsideDir, filepath.Join(dir, "lib"), filepath.Join(dir, "share")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"secretlink":   outside,
		"outlink":      outsideDir,
		"lib/rel":      strings.Repeat("../", 16) + strings.TrimPrefix(outside, "/"),
		"share/vulkan": outsideDir,
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return store, outside, pkg
}

// TestAssembleStaysInStore: links in the store that point out of it
// (absolute, relative, or a directory of a path the configuration names)
// are put in the tree as the links they are, and what they point to is
// not read: no file of the tree is the file outside, whatever the store
// roots (here the store, then /, where the outside file is).
func TestAssembleStaysInStore(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	store, outside, pkg := hostileStore(t)
	f.Driver.Package = pkg
	f.Nodeprep.ConfigYAML += "# " + pkg + "/secretlink " + pkg + "/outlink/secret " + pkg + "/lib/rel\n"
	dir := t.TempDir()
	if _, err := Assemble(context.Background(), dir, f, AssembleOptions{Stores: []string{store, "/"}}); err != nil {
		t.Fatal(err)
	}
	secret, err := os.Stat(outside)
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if st, err := os.Lstat(p); err == nil && os.SameFile(st, secret) {
			t.Errorf("%s is the file outside the store", p)
		}
		if data, err := os.ReadFile(p); err == nil && string(data) == "secret" && d.Type()&os.ModeSymlink == 0 {
			t.Errorf("%s holds the file outside the store", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(dir, pkg, "outlink")); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s/outlink in the tree: %v, %v; want the link", pkg, st, err)
	}
}

// TestAssembleNeverWritesThrough: a file the facts write at a path the
// store has too (the kubelet config, a store path the configuration
// names) replaces it in the tree, and the store's file is left as it was.
func TestAssembleNeverWritesThrough(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	p := KubeletConfigPath(f.K3s.Args)
	if err := os.MkdirAll(filepath.Join(store, filepath.Dir(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, p), []byte("store\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, err := Assemble(context.Background(), dir, f, AssembleOptions{Stores: []string{store, testkit.Testdata(t, "hosts", "nixos-h200")}})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(store, p)); string(data) != "store\n" {
		t.Errorf("the store's %s now holds %q", p, data)
	}
	if data, _ := root.ReadFile(p, 1<<20); string(data) != *f.K3s.KubeletConfig {
		t.Errorf("the tree's %s holds %q, want the facts' text", p, data)
	}
}

// TestAssembleBoundsFiles: a file of the store past MaxFileBytes (a
// sparse one, here) is refused as malformed without being copied, and a
// done context stops Assemble with its error, whatever is left to take.
func TestAssembleBoundsFiles(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	store, _, pkg := hostileStore(t)
	f.Driver.Package = pkg
	big := filepath.Join(store, pkg, "lib", "libbig.so")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 10<<20); err != nil {
		t.Fatal(err)
	}
	_, err = Assemble(context.Background(), t.TempDir(), f, AssembleOptions{Stores: []string{store}, MaxFileBytes: 1 << 20})
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), pkg+"/lib/libbig.so") {
		t.Errorf("Assemble: %v, want malformed naming the big file", err)
	}
	_, err = Assemble(context.Background(), t.TempDir(), f, AssembleOptions{Stores: []string{store}, MaxBytes: 1 << 20})
	if !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("Assemble past MaxBytes: %v, want malformed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Assemble(ctx, t.TempDir(), f, AssembleOptions{Stores: []string{store}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Assemble with a done context: %v, want context.Canceled", err)
	}
}

// TestAssembleDriverNotInStore: a driver package no store has (the facts
// read on a machine that has not built it) is said to be missing, as
// unavailable, not judged as a package without libraries.
func TestAssembleDriverNotInStore(t *testing.T) {
	t.Parallel()
	f, err := ParseFacts("good.json", goodFacts(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Assemble(context.Background(), t.TempDir(), f, AssembleOptions{Stores: []string{t.TempDir()}})
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), f.Driver.Package) {
		t.Errorf("Assemble: %v, want unavailable naming %s", err, f.Driver.Package)
	}
}

// TestReportInNodePaths: the throw-away tree's path on this machine is
// the node's root in what the report says.
func TestReportInNodePaths(t *testing.T) {
	t.Parallel()
	r := &Report{Checks: []Result{{Summary: "under /tmp/t1", Problems: []string{"open /tmp/t1/run/cdi/x.json: no such file", "/tmp/t10/a"}}}}
	r.inNodePaths("/tmp/t1")
	want := Result{Summary: "under /", Problems: []string{"open /run/cdi/x.json: no such file", "/tmp/t10/a"}}
	if got := r.Checks[0]; got.Summary != want.Summary || !slices.Equal(got.Problems, want.Problems) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
