package wgpuoracle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/selftest/container"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// lvpStore is the lavapipe host tree's driver store path
// (scripts/make-lavapipe-host.sh).
const lvpStore = "/nix/store/0lvp1mesa2lavapipe3stand4in5nvidia6-mesa-lvp"

// ctrCondition is one container row: a lavapipe host tree
// (scripts/make-lavapipe-host.sh, the simulated dgx-h200's GPUs) changed
// as it says, and the test rootfs as the image.
type ctrCondition struct {
	name, what string
	unpatched  bool     // the spec as generated: no ICD mount
	wrap       []string // the tree's ICD is lavapipe through the fake ICD with these faults (fakedriver.WrapICD)
	noLoader   bool     // the image has no libvulkan.so.1
	libMissing bool     // the ICD library the spec mounts is gone from the host
	pending    string   // as condition.pending
}

var ctrCorpus = []ctrCondition{
	{name: "patched", what: "lavapipe through the patched spec"},
	{name: "unpatched", what: "the spec as generated: no ICD manifest in the container", unpatched: true},
	{name: "no-libvulkan", what: "the image has no libvulkan.so.1", noLoader: true},
	{name: "icd-library-missing", what: "the ICD library the spec mounts is not on the host", libMissing: true},
	{name: "qf0-compute-only", what: "queue family 0 computes but does not draw (graphics is family 1)", wrap: []string{"queue-family-0-compute"}},
	{name: "api-1.0-no-extensions", what: "apiVersion 1.0 without VK_KHR_storage_buffer_storage_class and VK_KHR_maintenance1", wrap: []string{"api-1.0", "hide:VK_KHR_storage_buffer_storage_class", "hide:VK_KHR_maintenance1", "hide:VK_AMD_negative_viewport_height"}},
	{name: "conformance-0", what: "driver conformance version 0.0.0.0", wrap: []string{"conformance-0"}},
	{name: "crash-on-wgpu-instance", what: "the ICD dies (SIGSEGV) in vkCreateInstance for Vulkan 1.3 or wgpu's instance extensions", wrap: []string{"crash-on-wgpu-instance"}},
}

// ctrTree builds c's host tree and returns its root.
func ctrTree(t *testing.T, nodeprep string, f *fixture, c ctrCondition, uuids []string) string {
	t.Helper()
	root := t.TempDir()
	testkit.LavapipeHost(t, root, uuids)
	store := filepath.Join(root, lvpStore)
	if c.wrap != nil {
		data, err := os.ReadFile(f.icd.Lib)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(store, "lib", "libvulkan_fake.so"), data, 0o755); err != nil {
			t.Fatal(err)
		}
		m := filepath.Join(store, "share", "vulkan", "icd.d", "nvidia_icd."+machine()+".json")
		manifest(t, filepath.Dir(m), filepath.Base(m), fmt.Sprintf(`{"file_format_version":"1.0.0","ICD":{"library_path":%q,"api_version":"1.3.0"}}`, lvpStore+"/lib/libvulkan_fake.so"))
	}
	if !c.unpatched {
		if out, err := exec.Command(nodeprep, "--root", root, "cdi", "patch").CombinedOutput(); err != nil {
			t.Fatalf("nodeprep cdi patch: %v\n%s", err, out)
		}
	}
	if c.wrap != nil {
		// The fake ICD loads lavapipe itself: the spec gives the container
		// that library and the fake's environment, as a driver's spec
		// mounts the libraries its ICD loads.
		lvp := lvpStore + "/lib/libvulkan_lvp.so"
		editSpec(t, root, func(edits map[string]any) {
			for _, kv := range fakedriver.WrapICD(lvp, c.wrap...) {
				edits["env"] = append(asSlice(edits["env"]), kv)
			}
			edits["mounts"] = append(asSlice(edits["mounts"]), map[string]any{
				"hostPath": lvp, "containerPath": lvp, "options": []string{"ro", "nosuid", "nodev", "bind"},
			})
		})
	}
	if c.libMissing {
		if err := os.Remove(filepath.Join(store, "lib", "libvulkan_lvp.so")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func machine() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return runtime.GOARCH
	}
	return unix.ByteSliceToString(u.Machine[:])
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// editSpec edits the top-level containerEdits of the tree's generated spec.
func editSpec(t *testing.T, root string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(root, "run", "cdi", "nvidia-container-toolkit.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	edits, _ := spec["containerEdits"].(map[string]any)
	if edits == nil {
		edits = map[string]any{}
		spec["containerEdits"] = edits
	}
	edit(edits)
	if data, err = json.Marshal(spec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// overlay mounts an overlay of lower on a new directory with a tmpfs
// upper layer, unmounted when the test ends, and returns its path.
// whiteout lists paths (relative to lower) the overlay hides.
func overlay(t *testing.T, lower string, whiteout ...string) string {
	t.Helper()
	dir := t.TempDir()
	merged, scratch := filepath.Join(dir, "merged"), filepath.Join(dir, "scratch")
	for _, d := range []string{merged, scratch} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", scratch, err)
	}
	t.Cleanup(func() { unix.Unmount(scratch, unix.MNT_DETACH) })
	upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range whiteout {
		p := filepath.Join(upper, w)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
			t.Fatalf("whiteout %s: %v", p, err)
		}
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)); err != nil {
		t.Fatalf("mounting an overlay of %s: %v", lower, err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// noLoaderImage is rootfs without the Vulkan loader: every libvulkan.so*
// under it hidden by an overlay.
func noLoaderImage(t *testing.T, rootfs string) string {
	t.Helper()
	var hide []string
	err := filepath.WalkDir(rootfs, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "libvulkan.so") {
			rel, _ := filepath.Rel(rootfs, p)
			hide = append(hide, rel)
		}
		return nil
	})
	if err != nil || len(hide) == 0 {
		t.Fatalf("no libvulkan.so* in %s (%v)", rootfs, err)
	}
	return overlay(t, rootfs, hide...)
}

// runSelftestContainer runs `nodeprep selftest --container` on the tree
// and returns the in-container verdict.
func runSelftestContainer(t *testing.T, nodeprep, root, rootfs string, env []string) npVerdict {
	t.Helper()
	args := []string{"--root", root, "selftest", "--container", "--rootfs", rootfs, "--simulate", "dgx-h200", "--allow-cpu-adapter",
		"--require-egl=false", "-o", "json", "--timeout", probeTimeout}
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeprep, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("nodeprep %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var r struct {
		Container *struct {
			Passed  bool `json:"passed"`
			Reasons []struct {
				Kind string `json:"kind"`
			} `json:"reasons"`
			Containers []struct {
				Selftest json.RawMessage `json:"selftest"`
			} `json:"containers"`
		} `json:"container"`
	}
	if jerr := json.Unmarshal(out, &r); jerr != nil || r.Container == nil {
		t.Fatalf("nodeprep %s (%v) printed no container report: %v\n%s\n%s", strings.Join(args, " "), err, jerr, out, stderr.String())
	}
	v := npVerdict{Passed: r.Container.Passed}
	if len(r.Container.Containers) == 1 && len(r.Container.Containers[0].Selftest) > 0 {
		in, perr := parseSelftest(r.Container.Containers[0].Selftest)
		if perr != nil {
			t.Fatal(perr)
		}
		v.Vulkan, v.EGL, v.Kinds = in.Vulkan, in.EGL, in.Kinds
	}
	for _, k := range r.Container.Reasons {
		if !slices.Contains(v.Kinds, k.Kind) {
			v.Kinds = append(v.Kinds, k.Kind)
		}
	}
	return v
}

// Where the wgpu program and Deno sit in its container: on the
// container's /tmp, a tmpfs, so that no mount point is made in the image.
const (
	ctrDeno  = "/tmp/wgpu-oracle/deno"
	ctrProbe = "/tmp/wgpu-oracle/probe.js"
)

// runOracleContainer runs the wgpu program in a container made from the
// tree's spec as containerd makes a pod's (container.BaseSpec, the CDI
// library's injection of every GPU's device), with Deno and the program
// bind-mounted in, on backend ("" unset), killed at oracleTimeout.
func runOracleContainer(t *testing.T, deno, probe, root, rootfs string, uuids []string, backend string) wgVerdict {
	t.Helper()
	host, err := hostfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := container.NewCache(filepath.Join(root, "run", "cdi"))
	if err != nil {
		t.Fatal(err)
	}
	devices := container.DeviceNames("nvidia.com/gpu", uuids...)
	container.RerootDeviceNodes(cache, devices, host)
	bundle := t.TempDir()
	image := overlay(t, rootfs)
	spec := container.BaseSpec(image, []string{ctrDeno, "run", "--quiet", "--no-config", "--no-lock", "--allow-env=DENO_WEBGPU_BACKEND", ctrProbe})
	if err := container.Inject(cache, spec, devices); err != nil {
		t.Fatal(err)
	}
	container.Reroot(spec, host)
	denoBin, err := filepath.EvalSymlinks(deno)
	if err != nil {
		t.Fatal(err)
	}
	ro := []string{"bind", "ro", "nosuid", "nodev"}
	spec.Mounts = append(spec.Mounts,
		rspec.Mount{Destination: ctrDeno, Type: "bind", Source: denoBin, Options: ro},
		rspec.Mount{Destination: ctrProbe, Type: "bind", Source: probe, Options: ro})
	spec.Process.Env = append(spec.Process.Env, "HOME=/tmp", "DENO_DIR=/tmp/deno", "XDG_RUNTIME_DIR=/tmp")
	if backend != "" {
		spec.Process.Env = append(spec.Process.Env, "DENO_WEBGPU_BACKEND="+backend)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	runc, err := container.FindRuntime("")
	if err != nil {
		t.Fatal(err)
	}
	rt := &container.Runtime{Path: runc, StateDir: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), oracleTimeout)
	defer cancel()
	out := rt.Run(ctx, bundle, fmt.Sprintf("wgpu-oracle-%d", os.Getpid())+"-"+filepath.Base(bundle), reportPrefix)
	if out.Err != nil {
		t.Fatalf("runc: %v", out.Err)
	}
	if out.TimedOut {
		return wgVerdict{Hung: true, Stage: "hang"}
	}
	line := ""
	if out.Report != nil {
		line = reportPrefix + string(out.Report)
	}
	return verdict(t, line, string(out.Stderr), out.ExitCode)
}

// runContainerRows runs ctrCorpus: nodeprep's in-container self-test and
// the wgpu program in a container made from the same spec.
func runContainerRows(t *testing.T, nodeprep, deno, probe string, f *fixture) []*row {
	// Each missing piece skips the rows, or fails them under CI=true.
	if os.Geteuid() != 0 {
		upstream.Unavailable(t, errors.New("the container rows need root (overlay mounts, runc)"))
	}
	if _, err := container.FindRuntime(""); err != nil {
		upstream.Unavailable(t, fmt.Errorf("%w (make deps installs runc)", err))
	}
	rootfs := os.Getenv("NODEPREP_TEST_ROOTFS")
	if _, err := os.Stat(filepath.Join(rootfs, ".nodeprep-rootfs")); rootfs == "" || err != nil {
		upstream.Unavailable(t, fmt.Errorf("no test rootfs at NODEPREP_TEST_ROOTFS=%q (make rootfs; make unit sets it)", rootfs))
	}
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	rows := make([]*row, len(ctrCorpus))
	for i, c := range ctrCorpus {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			root := ctrTree(t, nodeprep, f, c, uuids)
			image := rootfs
			if c.noLoader {
				image = noLoaderImage(t, rootfs)
			}
			env := append(cleanEnv(), "VK_DRIVER_FILES="+f.lvpICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+f.mesaEGL)
			r := &row{cond: condition{name: c.name, what: c.what, pending: c.pending}, where: "container"}
			r.np = runSelftestContainer(t, nodeprep, root, image, env)
			r.vk = runOracleContainer(t, deno, probe, root, image, uuids, "vulkan")
			r.gl = runOracleContainer(t, deno, probe, root, image, uuids, "gl")
			r.def = runOracleContainer(t, deno, probe, root, image, uuids, "")
			classify(r, false)
			logRow(t, r)
			rows[i] = r
		})
	}
	return rows
}
