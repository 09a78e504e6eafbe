// Package testkit holds what nodeprep's tests share: a writable copy of a
// host tree from testdata/hosts, golden files under testdata with an
// -update flag, and the nodeprep binary built once per test binary. Only
// tests import it.
package testkit

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// Update is the -update flag of every test binary that imports testkit:
// Golden rewrites the golden files instead of comparing.
var Update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the current output")

// RepoRoot returns the module's root directory (the one holding go.mod),
// found upward from the test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testkit: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Testdata returns the path of rel under the repository's testdata/.
func Testdata(t testing.TB, rel ...string) string {
	t.Helper()
	return filepath.Join(append([]string{RepoRoot(t), "testdata"}, rel...)...)
}

// HostCopy copies testdata/hosts/<scenario> to a temporary directory,
// links kept as links (cp -a), makes the device nodes its .devices lists
// when running as root (DevicesManifest), and returns the copy's path:
// tests may write to it.
func HostCopy(t testing.TB, scenario string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), scenario)
	src := Testdata(t, "hosts", scenario)
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v: %s", src, err, out)
	}
	if err := makeDevices(dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// HostTree is HostCopy as a hostfs.Root.
func HostTree(t testing.TB, scenario string) *hostfs.Root {
	t.Helper()
	root, err := hostfs.New(HostCopy(t, scenario))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// HostLayered is HostCopy of base with testdata/hosts/<over> laid over it
// (cp -a: over's files replace base's), for the trees that hold only one
// component's files (k3s-containerd-*, nvruntime-*).
func HostLayered(t testing.TB, base, over string) string {
	t.Helper()
	root := HostCopy(t, base)
	src := Testdata(t, "hosts", over)
	if out, err := exec.Command("cp", "-a", src+"/.", root).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v: %s", src, err, out)
	}
	return root
}

// LayeredTree is HostLayered as a hostfs.Root.
func LayeredTree(t testing.TB, base, over string) *hostfs.Root {
	t.Helper()
	root, err := hostfs.New(HostLayered(t, base, over))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Golden compares got with testdata/<rel> and, with -update, rewrites the
// file instead (creating its directory).
func Golden(t testing.TB, rel string, got []byte) {
	t.Helper()
	p := Testdata(t, rel)
	if *Update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file (run the test with -update to rewrite it)\n got:\n%s\nwant:\n%s", rel, got, want)
	}
}

var (
	buildOnce sync.Once
	binDir    string // where Binary built nodeprep; Main removes it
	binary    string
	buildErr  error
	// inMain: the test binary's TestMain runs its tests through Main, so
	// what Binary builds is removed when they end.
	inMain bool
)

// Main runs m's tests and then removes what Binary built, and returns
// m.Run's exit code: a package whose tests call Binary has
//
//	func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
//
// (a TestMain that does more calls Main in place of m.Run). A test binary
// lives longer than any one test, so t.TempDir cannot hold a build that
// all its tests share; without Main the build would outlive the run, two
// binaries left in $TMPDIR each time.
func Main(m *testing.M) int {
	inMain = true
	defer func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	}()
	return m.Run()
}

// Binary builds cmd/nodeprep once per test binary into a temporary
// directory and returns its path (the self-test re-executes its own
// binary, which a test binary is not), with cmd/nodeprep-cluster beside
// it, as installed, so that `nodeprep cluster` runs. Skipped with -short.
// It fails the test when the package's TestMain does not run the tests
// through Main, which removes the build when they end.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds nodeprep; skipped with -short")
	}
	if !inMain {
		t.Fatal("testkit.Binary: this package's TestMain must run its tests through testkit.Main, which removes the build afterwards")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeprep-test-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		binary = filepath.Join(dir, "nodeprep")
		for name, pkg := range map[string]string{"nodeprep": "cmd/nodeprep", "nodeprep-cluster": "cmd/nodeprep-cluster"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/nodeprep/nodeprep/"+pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("building %s: %s", name, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// HostFiles makes a host root in a temporary directory holding files
// (host path → content, mode 0600, parents created) and returns its path.
func HostFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	WriteFiles(t, dir, files, nil)
	return dir
}

// WriteFiles writes files (host path → content, mode 0600) and links (host
// path → target, as given) under dir, a host root, creating their parent
// directories.
func WriteFiles(t testing.TB, dir string, files, links map[string]string) {
	t.Helper()
	for p, data := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for p, target := range links {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
}

// KubeletKubeconfig is the kubeconfig k3s writes for its kubelet (k3s
// pkg/daemons/control/deps KubeConfig): one cluster with the server's URL
// and its CA, one context, and one user with the client certificate and
// key, each file by the path given.
func KubeletKubeconfig(server, ca, cert, key string) string {
	return fmt.Sprintf(`apiVersion: v1
clusters:
- cluster:
    server: %s
    certificate-authority: %s
  name: local
contexts:
- context:
    cluster: local
    namespace: default
    user: user
  name: Default
current-context: Default
kind: Config
preferences: {}
users:
- name: user
  user:
    client-certificate: %s
    client-key: %s
`, server, ca, cert, key)
}

// Snapshot records every path under dir, a host root, with its mode and
// bytes (a link's target), keyed by host path ("/" for dir itself), except
// the host paths under skip. Two snapshots compared with Changes show what
// a run wrote.
func Snapshot(t testing.TB, dir string, skip ...string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := st.Mode().String()
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case st.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(data)
		}
		snap[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// Changes lists how after differs from before, two Snapshots: "created
// P", "changed P" and "removed P", sorted; none when they are equal.
func Changes(before, after map[string]string) []string {
	var out []string
	for p, v := range after {
		if b, ok := before[p]; !ok {
			out = append(out, "created "+p)
		} else if b != v {
			out = append(out, "changed "+p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			out = append(out, "removed "+p)
		}
	}
	sort.Strings(out)
	return out
}

// ContainerRootfs returns the in-container self-test's root file system
// ($NODEPREP_TEST_ROOTFS, which `make unit` sets after `make rootfs`), and
// skips the test where a container cannot run: no such rootfs, no runc,
// not root. CI (`make test`) provides all three.
func ContainerRootfs(t testing.TB) string {
	t.Helper()
	rootfs := os.Getenv("NODEPREP_TEST_ROOTFS")
	if rootfs == "" {
		t.Skip("NODEPREP_TEST_ROOTFS is not set (make unit sets it after make rootfs)")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (make deps installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the container self-test needs root")
	}
	return rootfs
}

// Mesa returns the manifests of Mesa's lavapipe ICD and Mesa's EGL vendor
// library (fakedriver.Mesa), the real stand-ins for the NVIDIA driver. The
// test is skipped when they are not installed (`make deps` and .ci/run
// install them) and fails when the environment named them
// (VK_DRIVER_FILES / __EGL_VENDOR_LIBRARY_FILENAMES: `make unit`, a Nix
// sandbox) and one is missing.
func Mesa(t testing.TB) (icd, egl string) {
	t.Helper()
	icd, egl, explicit := fakedriver.Mesa(os.Getenv)
	if why := fakedriver.MesaMissing(os.Getenv); why != "" {
		if explicit {
			t.Fatalf("VK_DRIVER_FILES / __EGL_VENDOR_LIBRARY_FILENAMES name Mesa's drivers, but: %s", why)
		}
		t.Skip(why)
	}
	return icd, egl
}

// LavapipeHost builds a host tree in root whose "driver" is Mesa's
// lavapipe, with a generated CDI spec naming one device per UUID of uuids
// (scripts/make-lavapipe-host.sh; layout holds the script's flags:
// --buildenv, --companion). A failed build fails the test.
func LavapipeHost(t testing.TB, root string, uuids []string, layout ...string) {
	t.Helper()
	args := slices.Concat(layout, []string{root}, uuids)
	if out, err := exec.Command(filepath.Join(RepoRoot(t), "scripts", "make-lavapipe-host.sh"), args...).CombinedOutput(); err != nil {
		t.Fatalf("building the lavapipe host tree: %v\n%s", err, out)
	}
}

// UpContainerReport is what the tests of `nodeprep up --container` read of
// its -o json report, by the report's JSON names: the verdict and, per
// container, the Vulkan adapters the probe inside found.
type UpContainerReport struct {
	Ready     bool `json:"ready"`
	Container struct {
		Passed     bool `json:"passed"`
		Containers []struct {
			Selftest struct {
				Vulkan struct {
					Adapters []struct {
						Vendor   uint32 `json:"vendor"`
						Dispatch struct {
							Verified bool `json:"verified"`
						} `json:"dispatch"`
					} `json:"adapters"`
				} `json:"vulkan"`
			} `json:"selftest"`
		} `json:"containers"`
	} `json:"container"`
}

// ProcessesWith lists the processes whose environment holds kv
// ("KEY=value"): a test marks the children it starts with a random kv and
// asks which of them are left.
func ProcessesWith(kv string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append(env, 0), []byte(kv+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// FakeDriver is a fake driver library built for a test and the manifest
// that names it (fakedriver.Build).
type FakeDriver struct {
	Lib      string // the library's path
	Manifest string // the ICD manifest or EGL vendor manifest's path
}

// FakeDrivers builds the fake Vulkan ICD and the fake EGL vendor library
// (nodeprep/testenv/fakedriver: they hang, crash, flood or fork as FAKE_FAULT
// says) into a temporary directory; a build failure fails the test.
func FakeDrivers(t testing.TB) (icd, egl FakeDriver) {
	t.Helper()
	dir := t.TempDir()
	var err error
	if icd.Lib, icd.Manifest, err = fakedriver.Build(dir, fakedriver.ICD); err != nil {
		t.Fatal(err)
	}
	if egl.Lib, egl.Manifest, err = fakedriver.Build(dir, fakedriver.EGL); err != nil {
		t.Fatal(err)
	}
	return icd, egl
}

// Within runs f and fails the test when f has not returned after d: a
// read or open that blocks (a FIFO in place of a file) is the failure the
// caller looks for, and would otherwise hang the test binary.
func Within(t testing.TB, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("still blocked after %s", d)
	}
}

// Endless is an io.Reader of "x" bytes that never ends: a stream that a
// bounded reader must stop reading.
type Endless struct{}

// Read fills p with 'x' and never returns an error.
func (Endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// FakeCUDA builds the fake libcuda.so.1 (fakedriver.CUDA) in a temporary
// directory and makes its device nodes (fakedriver.CUDADevNodes: every
// GPU of the simulated dgx-h200, nvidia-uvm included) in another; env is
// what a probe child needs to see them (fakedriver.CUDAEnv).
func FakeCUDA(t testing.TB) (lib, devDir string, env []string) {
	t.Helper()
	lib, _, err := fakedriver.Build(t.TempDir(), fakedriver.CUDA)
	if err != nil {
		t.Fatal(err)
	}
	devDir = t.TempDir()
	if err := fakedriver.CUDADevNodes(devDir, true, 0, 1, 2, 3, 4, 5, 6, 7); err != nil {
		t.Fatal(err)
	}
	return lib, devDir, fakedriver.CUDAEnv(devDir)
}
