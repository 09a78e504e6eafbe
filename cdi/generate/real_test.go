package generate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// toolkitVersions are the toolkit versions of the tools modules
// (testdata/tools/nvidia-container-toolkit-*/go.mod).
var toolkitVersions = map[string]string{
	upstream.Toolkit117: "1.17.8",
	upstream.Toolkit120: "1.20.2",
}

// units are the generator unit shapes of scripts/nvidia-cdi-generate.sh
// (the device plugin's and the DRA driver's are not NixOS units).
var units = []string{"old", "new", "new-hooks", "no-all", "index", "uuid"}

// unitArgs are the arguments scripts/nvidia-cdi-generate.sh passes for
// unit on tree dir with toolkit version v, built the same way from the
// tree's store paths. A drift from the script shows as a difference in
// TestAgainstRealGenerator.
func unitArgs(t *testing.T, dir, unit, v string) []string {
	t.Helper()
	one := func(pattern string) string {
		m, _ := filepath.Glob(filepath.Join(dir, "nix/store", pattern))
		if len(m) == 0 {
			t.Fatalf("%s has no nix/store/%s", dir, pattern)
		}
		sort.Strings(m)
		return "/" + strings.TrimPrefix(m[0], dir+"/")
	}
	ctk := one("*-nvidia-container-toolkit-"+v) + "/bin/nvidia-ctk"
	hook := one("*-nvidia-container-toolkit-"+v+"-tools") + "/bin/nvidia-cdi-hook"
	nv := one("*-nvidia-x11-*")
	ldc := one("*-glibc-*-bin") + "/bin/ldconfig"
	common := []string{"--format", "json", "--ldconfig-path", ldc, "--library-search-path", nv + "/lib"}
	newer := []string{"--discovery-mode", "auto", "--device-name-strategy", "index", "--device-name-strategy", "uuid", "--nvidia-cdi-hook-path", hook}
	switch unit {
	case "old":
		return append(common, "--nvidia-ctk-path", ctk)
	case "new":
		return append(append(common, newer...), "--disable-hook", "create-symlinks")
	case "new-hooks":
		return append(common, newer...)
	case "no-all":
		return append(append(common, newer...), "--disable-hook", "create-symlinks", "--no-all-device")
	case "index", "uuid":
		return append(common, "--discovery-mode", "auto", "--device-name-strategy", unit, "--nvidia-cdi-hook-path", hook, "--disable-hook", "create-symlinks")
	}
	t.Fatalf("unknown unit %s", unit)
	return nil
}

// moduleMounts are NixOS's default hardware.nvidia-container-toolkit.mounts
// for the tree, as scripts/nvidia-cdi-generate.sh adds them.
func moduleMounts(t *testing.T, dir string) []Mount {
	t.Helper()
	var glibc, nv string
	entries, _ := os.ReadDir(filepath.Join(dir, "nix/store"))
	for _, e := range entries {
		n := e.Name()
		switch {
		case strings.Contains(n, "-glibc-") && !strings.HasSuffix(n, "-bin") && glibc == "":
			glibc = "/nix/store/" + n
		case strings.Contains(n, "-nvidia-x11-") && nv == "":
			nv = "/nix/store/" + n
		}
	}
	var out []Mount
	same := func(p string) { out = append(out, Mount{p, p}) }
	same("/run/opengl-driver")
	same(glibc + "/lib")
	same(glibc + "/lib64")
	for _, b := range []string{"nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-debugdump", "nvidia-powerd", "nvidia-smi"} {
		out = append(out, Mount{nv + "/bin/" + b, "/usr/bin/" + b})
	}
	out = append(out, Mount{nv + "/lib", "/usr/local/nvidia/lib"}, Mount{nv + "/lib", "/usr/local/nvidia/lib64"})
	return out
}

// treeHost is the Host a test tree stands for: the device nodes of its
// .devices file, its /dev/dri/by-path links, and the first N GPUs of the
// simulated dgx-h200 (N = its /dev/nvidia<N> nodes), which the fake NVML
// the real generator runs against reports
// (nodeprep/testenv/fakedriver/csrc/nvml-dgx-h200.c).
func treeHost(t *testing.T, dir string) Host {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ".devices"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h Host
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 5 {
			t.Fatalf("%s/.devices: bad line %q", dir, sc.Text())
		}
		major, _ := strconv.ParseInt(fields[2], 10, 64)
		minor, _ := strconv.ParseInt(fields[3], 10, 64)
		mode, _ := strconv.ParseUint(fields[4], 8, 32)
		h.Nodes = append(h.Nodes, Node{Path: fields[0], Major: major, Minor: minor, Mode: fs.FileMode(mode)})
		if rest, ok := strings.CutPrefix(fields[0], "/dev/nvidia"); ok {
			if _, err := strconv.Atoi(rest); err == nil {
				n++
			}
		}
	}
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	h.DriverVersion = inv.DriverVersion
	links, _ := filepath.Glob(filepath.Join(dir, "dev/dri/by-path/pci-*"))
	sort.Strings(links)
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil {
			t.Fatal(err)
		}
		h.ByPath = append(h.ByPath, Link{Path: "/" + strings.TrimPrefix(l, dir+"/"), Target: target})
	}
	for _, g := range inv.GPUs[:n] {
		d := Device{Index: g.Index, UUID: g.UUID, PCIBusID: g.PCIBusID, Minor: g.Minor}
		for _, l := range h.ByPath {
			if strings.HasPrefix(filepath.Base(l.Path), "pci-"+g.PCIBusID+"-") {
				d.DRM = append(d.DRM, filepath.Base(l.Target))
			}
		}
		h.Devices = append(h.Devices, d)
	}
	return h
}

// nixosTrees are the host trees under testdata/hosts that are NixOS driver
// trees (a .devices file and an nvidia-x11 store path), by name.
func nixosTrees(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(testkit.Testdata(t, "hosts", "*", ".devices"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		tree := filepath.Dir(d)
		if m, _ := filepath.Glob(filepath.Join(tree, "nix/store/*-nvidia-x11-*")); len(m) > 0 {
			out = append(out, filepath.Base(tree))
		}
	}
	return out
}

// fingerprint hashes what the generator reads of a tree: every path with
// its link text or file content, leaving out the specs the tree carries
// (run/cdi, etc) and its README. Trees with one fingerprint give the real
// generator the same input, so it runs once for them.
func fingerprint(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, dir)
		if rel == "/run/cdi" || rel == "/etc" || rel == "/README.md" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fmt.Fprintf(h, "%s %v\n", rel, d.Type())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintln(h, l)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

// prepared copies tree into a temporary directory with the store paths of
// both toolkits (empty programs; scripts/nvidia-cdi-generate.sh installs
// the real ones in its own copy), so either toolkit's generator runs on it.
func prepared(t *testing.T, tree string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), tree)
	if out, err := exec.Command("cp", "-a", testkit.Testdata(t, "hosts", tree), dir).CombinedOutput(); err != nil {
		t.Fatalf("copying %s: %v\n%s", tree, err, out)
	}
	ctk := glob1(t, dir, "*-nvidia-container-toolkit-[0-9]*[0-9]")
	tools := glob1(t, dir, "*-nvidia-container-toolkit-*-tools")
	hashOf := func(p string) string { return strings.SplitN(filepath.Base(p), "-", 2)[0] }
	for _, v := range toolkitVersions {
		for _, f := range []string{
			"nix/store/" + hashOf(ctk) + "-nvidia-container-toolkit-" + v + "/bin/nvidia-ctk",
			"nix/store/" + hashOf(tools) + "-nvidia-container-toolkit-" + v + "-tools/bin/nvidia-cdi-hook",
		} {
			p := filepath.Join(dir, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(p); err != nil {
				if err := os.WriteFile(p, nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// The real run's libnvidia-ml.so.<version> is the fake NVML, built
	// without a SONAME (scripts/nvidia-cdi-generate.sh); the model reads
	// the same library, built the same way.
	nvml := glob1(t, dir, "*-nvidia-x11-*") + "/lib/libnvidia-ml.so." + treeHost(t, dir).DriverVersion
	out, err := exec.Command("cc", "-shared", "-fPIC", "-O1", fmt.Sprintf("-DNP_COUNT=%d", len(treeHost(t, dir).Devices)), "-o", nvml,
		filepath.Join(testkit.RepoRoot(t), "nodeprep/testenv/fakedriver/csrc/nvml-dgx-h200.c")).CombinedOutput()
	if err != nil {
		upstream.Unavailable(t, fmt.Errorf("building the fake NVML: %v\n%s", err, out))
	}
	return dir
}

func glob1(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "nix/store", pattern))
	if len(m) == 0 {
		t.Fatalf("%s: no nix/store/%s", dir, pattern)
	}
	return m[0]
}

// realRun is the real generator's answer for one tree, toolkit and unit.
type realRun struct {
	spec []byte
	err  error
}

var (
	realMu    sync.Mutex
	realCache = map[string]realRun{}
)

// real runs scripts/nvidia-cdi-generate.sh (the real nvidia-ctk, chrooted,
// as root) once per tree fingerprint, toolkit and unit in this test
// process; NODEPREP_GENERATE_CACHE=DIR keeps the outputs in DIR across
// runs (outside the repository; never committed).
func real(t *testing.T, dir, fp, tk, unit string) realRun {
	t.Helper()
	key := fp + "." + tk + "." + unit
	realMu.Lock()
	defer realMu.Unlock()
	if r, ok := realCache[key]; ok {
		return r
	}
	cache := os.Getenv("NODEPREP_GENERATE_CACHE")
	if cache != "" {
		if b, err := os.ReadFile(filepath.Join(cache, key+".json")); err == nil {
			r := realRun{spec: b}
			if e, err := os.ReadFile(filepath.Join(cache, key+".err")); err == nil {
				r = realRun{err: errors.New(string(e))}
			}
			realCache[key] = r
			return r
		}
	}
	cmd := exec.Command(filepath.Join(testkit.RepoRoot(t), "scripts", "nvidia-cdi-generate.sh"), tk, dir, unit)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var r realRun
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("scripts/nvidia-cdi-generate.sh %s %s: %v\n%s", tk, unit, err, stderr.Bytes())
		}
		r.err = fmt.Errorf("nvidia-ctk failed: %s", bytes.TrimSpace(stderr.Bytes()))
	} else {
		r.spec = out
	}
	if cache != "" {
		_ = os.WriteFile(filepath.Join(cache, key+".json"), r.spec, 0o644)
		if r.err != nil {
			_ = os.WriteFile(filepath.Join(cache, key+".err"), []byte(r.err.Error()), 0o644)
		}
	}
	realCache[key] = r
	return r
}

// fullMatrix are the trees every unit shape runs on with both toolkits
// (x86_64 with eight GPUs, aarch64 with one); each other NixOS tree runs
// the toolkit whose store paths it carries with its unit: the older unit
// for 1.17, the newer for 1.20. The other trees differ from nixos-h200 in
// the driver files the generator finds (a library missing, a dangling
// link, a second driver version), which every unit shape reads the same
// way; the unit shapes differ in flags, which the two trees cover. Each
// real run costs seconds (a tree copy, a compile, a chroot), so the matrix
// is kept to these; NODEPREP_GENERATE_MATRIX=full runs every unit shape
// with both toolkits on every tree (about 130 real runs).
var fullMatrix = map[string]bool{"nixos-h200": true, "nixos-gh200": true}

// TestAgainstRealGenerator is the model's differential test: for every
// NixOS host tree under testdata/hosts and each generator unit shape of
// scripts/nvidia-cdi-generate.sh with each toolkit, the spec Spec predicts
// (plus the module's mounts, AddModuleMounts) must equal the one the real
// nvidia-ctk writes on that tree, field for field; where the real one
// fails (1.17 has no --disable-hook or --no-all-device), Spec must fail
// with ErrRejected. Nothing is normalised: the real spec's order (devices
// by name, mounts by host path, hooks in discovery order) is the model's.
// Trees that give the generator the same input share one real run.
func TestAgainstRealGenerator(t *testing.T) {
	if os.Geteuid() != 0 {
		upstream.Unavailable(t, errors.New("the real generator runs chrooted with mknod'd device nodes, which needs root"))
	}
	for _, tk := range upstream.Toolkits {
		upstream.Dir(t, tk)
	}
	for _, tree := range nixosTrees(t) {
		t.Run(tree, func(t *testing.T) {
			dir := prepared(t, tree)
			fp := fingerprint(t, dir)
			root, err := hostfs.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			host := treeHost(t, dir)
			own := upstream.Toolkit120
			if m, _ := filepath.Glob(testkit.Testdata(t, "hosts", tree, "nix/store/*-nvidia-container-toolkit-1.17.*")); len(m) > 0 {
				own = upstream.Toolkit117
			}
			for _, tk := range upstream.Toolkits {
				v := toolkitVersions[tk]
				for _, unit := range units {
					if os.Getenv("NODEPREP_GENERATE_MATRIX") != "full" && !fullMatrix[tree] && !(tk == own && (tk == upstream.Toolkit120 && unit == "new" || tk == upstream.Toolkit117 && unit == "old")) {
						continue
					}
					t.Run(v+"/"+unit, func(t *testing.T) {
						r := real(t, dir, fp, tk, unit)
						got, err := Spec(root, host, v, unitArgs(t, dir, unit, v))
						if r.err != nil {
							if !errors.Is(err, ErrRejected) {
								t.Fatalf("the real generator failed (%v); the model gave %v, want ErrRejected", r.err, err)
							}
							return
						}
						if err != nil {
							t.Fatalf("the real generator wrote a spec; the model failed: %v", err)
						}
						AddModuleMounts(got, root, moduleMounts(t, dir))
						var want specs.Spec
						if err := json.Unmarshal(r.spec, &want); err != nil {
							t.Fatalf("the real spec: %v", err)
						}
						wantJSON, _ := json.MarshalIndent(&want, "", " ")
						gotJSON, _ := json.MarshalIndent(got, "", " ")
						if !bytes.Equal(wantJSON, gotJSON) {
							t.Errorf("the model differs from the real nvidia-ctk %s (%s unit):\n%s", v, unit, lineDiff(string(wantJSON), string(gotJSON)))
						}
					})
				}
			}
		})
	}
}

// lineDiff shows the first lines where want and got part, with context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	from := max(0, i-6)
	var b strings.Builder
	fmt.Fprintf(&b, "first difference at line %d (real %d lines, model %d)\n", i+1, len(w), len(g))
	for j := from; j < i+10; j++ {
		wl, gl := "", ""
		if j < len(w) {
			wl = w[j]
		}
		if j < len(g) {
			gl = g[j]
		}
		mark := " "
		if wl != gl {
			mark = "!"
		}
		fmt.Fprintf(&b, "%s real: %s\n%s model: %s\n", mark, wl, mark, gl)
	}
	return b.String()
}
