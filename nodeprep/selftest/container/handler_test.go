package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealHandlerPath runs the self-test's probe the way a pod of the
// device plugin's envvar strategy reaches it: NVIDIA_VISIBLE_DEVICES=<uuids>
// in the container, created through the real NVIDIA runtime program a
// runtime handler names. Through nvidia-container-runtime.cdi (k3s's
// nvidia-cdi) the probe finds lavapipe from the patched spec; through the
// plain nvidia-container-runtime in its default mode auto (k3s's nvidia) it
// fails where such a pod fails (jit-cdi from 1.18, legacy before: neither
// reads the spec). The lavapipe host's patched spec is written with this
// machine's paths into a spec directory the runtime's config names: the
// handler resolves real host paths.
func TestRealHandlerPath(t *testing.T) {
	rootfs := requireContainers(t)
	inv, err := gpu.Simulate("dgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs = inv.GPUs[:1]
	host := lavapipeHost(t, inv)
	patch(t, host)
	_, spec, err := cdi.Load(host, cdi.DefaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	real := func(p string) string {
		full, err := host.Path(p)
		if err != nil {
			t.Fatal(err)
		}
		return full
	}
	// Lavapipe needs no device node, and the tree's are plain files.
	spec.ContainerEdits.DeviceNodes = nil
	for _, m := range spec.ContainerEdits.Mounts {
		m.HostPath = real(m.HostPath)
	}
	for i := range spec.Devices {
		spec.Devices[i].ContainerEdits.DeviceNodes = nil
		for _, m := range spec.Devices[i].ContainerEdits.Mounts {
			m.HostPath = real(m.HostPath)
		}
	}
	conf := t.TempDir()
	specDir := filepath.Join(conf, "cdi")
	data, err := cdi.Encode(spec, cdi.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string][]byte{
		filepath.Join(specDir, "nvidia.json"):                          data,
		filepath.Join(conf, "nvidia-container-runtime", "config.toml"): []byte("[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"" + specDir + "\"]\n"),
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slash, err := hostfs.New("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range upstream.Toolkits {
		dir := upstream.Dir(t, tk)
		for _, program := range []string{"nvidia-container-runtime.cdi", "nvidia-container-runtime"} {
			t.Run(tk+"/"+program, func(t *testing.T) {
				o := testOptions(t, rootfs)
				o.Spec = filepath.Join(specDir, "nvidia.json")
				o.Handler = filepath.Join(dir, program)
				o.HandlerEnv = append(os.Environ(), "XDG_CONFIG_HOME="+conf)
				rep := run(t, slash, inv, o)
				if rep.Handler != o.Handler || len(rep.Containers) != 1 || !strings.HasPrefix(rep.Containers[0].Devices[0], "NVIDIA_VISIBLE_DEVICES=GPU-") {
					t.Fatalf("report %+v: not through the handler with the envvar request", rep)
				}
				if program == "nvidia-container-runtime.cdi" {
					if !rep.Passed {
						t.Errorf("through nvidia-cdi: %+v", rep.Reasons)
					}
					return
				}
				wantOnly(t, rep, ReasonRuntimeFailed, "the runtime handler's "+o.Handler+" could not create the container")
			})
		}
	}
}
