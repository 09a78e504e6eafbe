package generate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestCommittedSpecs runs without root or the real generator: the specs
// the NixOS trees carry are the real nvidia-ctk's output
// (scripts/gen-testhosts.sh; TestRealTestHosts in
// nodeprep/testenv/upstream keeps them so), and the model must give each
// of them from the tree, its unit's arguments and the simulated dgx-h200.
// One difference must be allowed: the real run's libnvidia-ml is the fake
// NVML, which has no SONAME, while the tree's stub has libnvidia-ml.so.1,
// so where create-symlinks is on (1.20 without --disable-hook) the model
// adds the libnvidia-ml.so.1 link the real generator writes on a real
// driver; the test removes it. TestAgainstRealGenerator has no such
// exception.
func TestCommittedSpecs(t *testing.T) {
	for _, tc := range []struct{ tree, unit, version string }{
		{"nixos-h200", "new", "1.20.2"},
		{"nixos-h200-hooks", "new-hooks", "1.20.2"},
		{"nixos-h200-ctk117", "old", "1.17.8"},
		{"nixos-gh200", "new", "1.20.2"},
		{"no-all-device", "no-all", "1.20.2"},
		{"stale-etc-cdi", "index", "1.20.2"},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			dir := testkit.Testdata(t, "hosts", tc.tree)
			root, err := hostfs.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Spec(root, treeHost(t, dir), tc.version, unitArgs(t, dir, tc.unit, tc.version))
			if err != nil {
				t.Fatal(err)
			}
			AddModuleMounts(got, root, moduleMounts(t, dir))
			dropNVMLSoname(got)
			data, err := os.ReadFile(filepath.Join(dir, "run/cdi/nvidia-container-toolkit.json"))
			if err != nil {
				t.Fatal(err)
			}
			var want specs.Spec
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&want, got) {
				w, _ := json.MarshalIndent(&want, "", " ")
				g, _ := json.MarshalIndent(got, "", " ")
				if bytes.Equal(w, g) {
					return
				}
				t.Errorf("the model differs from testdata/hosts/%s's spec:\n%s", tc.tree, lineDiff(string(w), string(g)))
			}
		})
	}
}

// dropNVMLSoname removes the libnvidia-ml SONAME link (see
// TestCommittedSpecs) from the create-symlinks hooks.
func dropNVMLSoname(s *specs.Spec) {
	for _, h := range s.ContainerEdits.Hooks {
		for i := 0; i+1 < len(h.Args); i++ {
			if h.Args[i] == "--link" && strings.HasSuffix(h.Args[i+1], "/libnvidia-ml.so.1") && strings.HasPrefix(h.Args[i+1], "libnvidia-ml.so.") {
				h.Args = append(h.Args[:i], h.Args[i+2:]...)
				i--
			}
		}
	}
}

// TestSimulatedMatchesTrees: the host Simulated gives for dgx-h200 is the
// one the NixOS trees stand for (their .devices, by-path links and fake
// NVML), so the fleet check's simulated inventory is the one the
// differential test proved the model on.
func TestSimulatedMatchesTrees(t *testing.T) {
	for tree, n := range map[string]int{"nixos-h200": 8, "nixos-gh200": 1} {
		want := treeHost(t, testkit.Testdata(t, "hosts", tree))
		got, err := Simulated("dgx-h200", n)
		if err != nil {
			t.Fatal(err)
		}
		sortHost(&want)
		sortHost(&got)
		if !reflect.DeepEqual(want, got) {
			t.Errorf("Simulated(dgx-h200, %d) = %+v\nwant (testdata/hosts/%s) %+v", n, got, tree, want)
		}
	}
	if _, err := Simulated("dgx-h200", 9); !errors.Is(err, fault.ErrUsage) {
		t.Errorf("Simulated(dgx-h200, 9) = %v, want a usage error", err)
	}
	if _, err := Simulated("dgx-z9", 0); err == nil {
		t.Error("Simulated(dgx-z9) gave no error")
	}
}

func sortHost(h *Host) {
	slices.SortFunc(h.Nodes, func(a, b Node) int { return strings.Compare(a.Path, b.Path) })
	slices.SortFunc(h.ByPath, func(a, b Link) int { return strings.Compare(a.Path, b.Path) })
}

// TestSpecRefusesWhatItDoesNotModel: a GPU in MIG mode, a host without
// GPUs or a driver version, and a driver the search path does not hold
// give no spec, each with its kind of error, marked malformed.
func TestSpecRefusesWhatItDoesNotModel(t *testing.T) {
	dir := testkit.Testdata(t, "hosts", "nixos-h200")
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	args := unitArgs(t, dir, "new", "1.20.2")
	host := treeHost(t, dir)
	mig := host
	mig.Devices = slices.Clone(host.Devices)
	mig.Devices[3].MIG = true
	none := host
	none.Devices = nil
	noVersion := host
	noVersion.DriverVersion = ""
	otherDriver := host
	otherDriver.DriverVersion = "570.86.15"
	for name, tc := range map[string]struct {
		host    Host
		version string
		args    []string
		want    error
	}{
		"mig":            {mig, "1.20.2", args, ErrNotModelled},
		"no gpus":        {none, "1.20.2", args, ErrNotModelled},
		"no driver":      {noVersion, "1.20.2", args, ErrNotModelled},
		"toolkit 1.18":   {host, "1.18.0", args, ErrNotModelled},
		"other driver":   {otherDriver, "1.20.2", args, ErrRejected},
		"1.17 new flags": {host, "1.17.8", unitArgs(t, dir, "new", "1.20.2"), ErrRejected},
	} {
		s, err := Spec(root, tc.host, tc.version, tc.args)
		if !errors.Is(err, tc.want) || !errors.Is(err, fault.ErrMalformed) || s != nil {
			t.Errorf("%s: Spec = %v, %v; want no spec and an error wrapping %v", name, s, err, tc.want)
		}
	}
}

// TestSpecShapes checks, on nixos-h200 with the simulated host, what the
// flags change, independently of the real generator: the strategies'
// names (a repeated strategy adds to the list), --no-all-device, the
// kind, --disable-hook all and --enable-hook.
func TestSpecShapes(t *testing.T) {
	dir := testkit.Testdata(t, "hosts", "nixos-h200")
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	host, err := Simulated("dgx-h200", 2)
	if err != nil {
		t.Fatal(err)
	}
	base := unitArgs(t, dir, "index", "1.20.2")
	names := func(s *specs.Spec) []string {
		var out []string
		for _, d := range s.Devices {
			out = append(out, d.Name)
		}
		return out
	}
	s, err := Spec(root, host, "1.20.2", append(slices.Clone(base), "--device-name-strategy", "type-index", "--no-all-device", "--vendor", "example.com", "--class", "dev"))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !slices.Equal(got, []string{"0", "1", "gpu0", "gpu1"}) || s.Kind != "example.com/dev" {
		t.Errorf("type-index without all: devices %q, kind %s", got, s.Kind)
	}
	s, err = Spec(root, host, "1.20.2", append(slices.Clone(base), "--disable-hook", "all"))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !slices.Equal(got, []string{"0", "1", "all"}) || len(s.ContainerEdits.Hooks) != 0 || len(s.Devices[0].ContainerEdits.Hooks) != 0 {
		t.Errorf("--disable-hook all: devices %q, hooks %d", got, len(s.ContainerEdits.Hooks))
	}
	s, err = Spec(root, host, "1.20.2", append(slices.Clone(base), "--disable-hook", "all", "--enable-hook", "update-ldcache"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.ContainerEdits.Hooks) != 1 || !slices.Contains(s.ContainerEdits.Hooks[0].Args, "update-ldcache") {
		t.Errorf("--enable-hook update-ldcache after all disabled: hooks %+v", s.ContainerEdits.Hooks)
	}
}

// TestSpecRefusesFHSConfigs: a host with nvidia-persistenced's socket, or
// with the driver's EGL vendor file under /usr/share (an FHS install, not
// NixOS), is not modelled.
func TestSpecRefusesFHSConfigs(t *testing.T) {
	dir := testkit.Testdata(t, "hosts", "nixos-h200")
	tmp := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", tmp).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	persistenced := filepath.Join(tmp, "run/nvidia-persistenced/socket")
	if err := os.MkdirAll(filepath.Dir(persistenced), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(persistenced, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	host, err := hostfs.New(tmp)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Spec(host, treeHost(t, tmp), "1.20.2", unitArgs(t, tmp, "new", "1.20.2"))
	if !errors.Is(err, ErrNotModelled) || !strings.Contains(err.Error(), "/run/nvidia-persistenced/socket") {
		t.Fatalf("Spec = %v, want ErrNotModelled naming the socket", err)
	}
	if err := os.Remove(persistenced); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tmp, "usr/share/glvnd/egl_vendor.d/10_nvidia.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(`{"ICD":{"library_path":"libEGL_nvidia.so.0"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := hostfs.New(tmp)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Spec(root, treeHost(t, tmp), "1.20.2", unitArgs(t, tmp, "new", "1.20.2"))
	if !errors.Is(err, ErrNotModelled) || !strings.Contains(err.Error(), "/usr/share/glvnd/egl_vendor.d/10_nvidia.json") {
		t.Fatalf("Spec = %v, want ErrNotModelled naming the file", err)
	}
}
