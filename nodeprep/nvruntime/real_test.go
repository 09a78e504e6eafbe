package nvruntime_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/nvruntime"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealRuntimeReadsSpec runs the real nvidia-container-runtime and
// nvidia-container-runtime.cdi of both pinned toolkits on an OCI bundle
// that asks for a GPU the way the device plugin does (NVIDIA_VISIBLE_DEVICES
// with an id, or a qualified CDI name), under runtime configs that differ in
// mode, spec-dirs and default-kind, with /bin/true as the low-level
// runtime. Whether the container got the edits of the spec in the test's
// CDI directory must be what Decide predicts (and, with
// accept-nvidia-visible-devices-envvar-when-unprivileged = false, that the
// unprivileged container's variable requests nothing): the product's
// verdict about which handler serves the patched spec is the runtime's own
// behaviour.
func TestRealRuntimeReadsSpec(t *testing.T) {
	upstream.NeedPrivateMounts(t, "the runtime")
	versions := map[string]nvruntime.Version{upstream.Toolkit117: {Major: 1, Minor: 17, Patch: 8}, upstream.Toolkit120: {Major: 1, Minor: 20, Patch: 2}}
	configs := []struct {
		name, toml string
		top        string // keys before the [nvidia-container-runtime] table
	}{
		{"mode auto", `mode = "auto"`, ""},
		{"mode cdi", `mode = "cdi"`, ""},
		{"mode legacy", `mode = "legacy"`, ""},
		{"mode cdi, spec dir not listed", "mode = \"cdi\"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"OTHER\"]", ""},
		{"mode cdi, other default kind", "mode = \"cdi\"\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"SPECS\"]\ndefault-kind = \"example.com/gpu\"", ""},
		{"mode cdi, envvar refused when unprivileged", `mode = "cdi"`, "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"},
	}
	requests := map[nvruntime.Request]string{nvruntime.RequestIDs: "GPU-1", nvruntime.RequestQualified: "nvidia.com/gpu=GPU-1"}
	for _, tk := range upstream.Toolkits {
		dir := upstream.Dir(t, tk)
		for _, program := range []string{nvruntime.Program, nvruntime.ProgramCDI} {
			for _, cfg := range configs {
				for req, value := range requests {
					t.Run(fmt.Sprintf("%s/%s/%s/%s", tk, program, cfg.name, value), func(t *testing.T) {
						t.Parallel()
						work := t.TempDir()
						specs, other := filepath.Join(work, "cdi"), filepath.Join(work, "other")
						for _, d := range []string{specs, other, filepath.Join(work, "bundle", "rootfs")} {
							if err := os.MkdirAll(d, 0o755); err != nil {
								t.Fatal(err)
							}
						}
						write(t, filepath.Join(specs, "nvidia.json"), `{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"GPU-1","containerEdits":{"env":["DEVICE=1"]}}],"containerEdits":{"env":["PATCHED=1"]}}`)
						write(t, filepath.Join(work, "bundle", "config.json"), `{"ociVersion":"1.0.2","process":{"args":["sh"],"env":["NVIDIA_VISIBLE_DEVICES=`+value+`"],"cwd":"/"},"root":{"path":"rootfs"}}`)
						body := strings.NewReplacer("SPECS", specs, "OTHER", other).Replace(cfg.toml)
						if !strings.Contains(body, "spec-dirs") {
							body += "\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = [\"" + specs + "\"]"
						}
						conf := cfg.top + "[nvidia-container-runtime]\nruntimes = [\"/bin/true\"]\nlog-level = \"debug\"\ndebug = \"" + filepath.Join(work, "log") + "\"\n" + body + "\n"
						if err := os.Mkdir(filepath.Join(work, "nvidia-container-runtime"), 0o755); err != nil {
							t.Fatal(err)
						}
						write(t, filepath.Join(work, "nvidia-container-runtime", "config.toml"), conf)
						c, err := nvruntime.Parse("config.toml", []byte(conf))
						if err != nil {
							t.Fatal(err)
						}

						// XDG_CONFIG_HOME moves the config file in both versions
						// (NVIDIA_CTK_CONFIG_FILE_PATH only from 1.18). A private
						// mount namespace keeps what legacy mode mounts off the host.
						cmd := exec.Command("unshare", "-m", "--propagation", "private", filepath.Join(dir, program), "create", "--bundle", filepath.Join(work, "bundle"), "t")
						cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+work)
						out, runErr := cmd.CombinedOutput()
						got, _ := os.ReadFile(filepath.Join(work, "bundle", "config.json"))
						applied := runErr == nil && strings.Contains(string(got), "PATCHED=1")

						// Without accept-nvidia-visible-devices-envvar-when-unprivileged
						// the variable of an unprivileged container (this bundle has
						// no capabilities) requests nothing, in every mode.
						d := c.Decide(program, versions[tk], req)
						want := d.ReadsSpecs && slices.Contains(c.SpecDirs, specs) && (d.Kind == "" || d.Kind == "nvidia.com/gpu") && c.AcceptEnvvarUnprivileged
						if applied != want {
							log, _ := os.ReadFile(filepath.Join(work, "log"))
							t.Errorf("the real runtime applied the spec: %v; Decide = %+v predicts %v\nrun: %v %s\nlog:\n%s", applied, d, want, runErr, out, log)
						}
					})
				}
			}
		}
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
