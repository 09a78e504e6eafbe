package cdi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealProfileHookReadOnlyEtcNvidia runs the real update-application-profile
// hook of the pinned toolkit 1.20.2 (the fix ProfileHookFindings names) on a
// container root that has a GPU device node and /etc/nvidia bind-mounted
// read-only in a private mount namespace, as a ConfigMap mount leaves it:
// the hook must let the container start (exit 0, the profile not written),
// and on a writable /etc/nvidia it must write the profile. Toolkit 1.20.0,
// whose hook fails here (NVIDIA/nvidia-container-toolkit#2026), is not
// pinned: its hook differs from 1.20.2's only in not ignoring the write's
// error, which ProfileHookFindings reports by version.
func TestRealProfileHookReadOnlyEtcNvidia(t *testing.T) {
	upstream.NeedPrivateMounts(t, "binding mounts")
	hook := upstream.Tool(t, upstream.Toolkit120, "nvidia-cdi-hook")
	for _, readOnly := range []bool{true, false} {
		name := "writable"
		if readOnly {
			name = "read-only"
		}
		t.Run(name, func(t *testing.T) {
			bundle := t.TempDir()
			rootfs := filepath.Join(bundle, "rootfs")
			etc := filepath.Join(bundle, "configmap")
			for _, d := range []string{filepath.Join(rootfs, "dev"), filepath.Join(rootfs, "etc", "nvidia"), etc} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			writeHookBundle(t, bundle)
			ro := ""
			if readOnly {
				ro = "mount -o remount,bind,ro '" + filepath.Join(rootfs, "etc", "nvidia") + "'\n"
			}
			sh := "set -e\nmknod '" + filepath.Join(rootfs, "dev", "nvidia0") + "' c 195 0\n" +
				"mount --bind '" + etc + "' '" + filepath.Join(rootfs, "etc", "nvidia") + "'\n" + ro +
				"'" + hook + "' " + cdi.HookApplicationProfile + " < '" + filepath.Join(bundle, "state.json") + "'\n"
			out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", sh).CombinedOutput()
			if err != nil {
				t.Fatalf("toolkit 1.20.2's %s hook with a %s /etc/nvidia: %v\n%s", cdi.HookApplicationProfile, name, err, out)
			}
			profile, err := os.ReadFile(filepath.Join(etc, "nvidia-application-profiles-rc.d", "10-container.conf"))
			switch {
			case readOnly && err == nil:
				t.Errorf("the hook wrote through a read-only /etc/nvidia: %s", profile)
			case !readOnly && (err != nil || !strings.Contains(string(profile), "EGLVisibleDGPUDevices")):
				t.Errorf("the hook wrote no profile on a writable /etc/nvidia: %v %s\n%s", err, profile, out)
			}
		})
	}
}
