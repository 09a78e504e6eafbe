package selftest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestSharedProbeChild: the Vulkan and EGL probes run in turn in one
// child, and every probe that does not end clean there is run again
// alone, so its verdict is its own driver's. The probe command is a shell
// that logs the APIs of each child it starts, then runs the real probe
// child (this test binary, see TestMain).
func TestSharedProbeChild(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	fakeICD, fakeEGL := testkit.FakeDrivers(t)
	poisoned, _ := wrappedLavapipe(t, "poison-egl")
	tests := []struct {
		name     string
		env      []string
		timeout  time.Duration
		children []string // the APIs of each child started, in order
		kinds    []ReasonKind
	}{
		// Both drivers work: one child.
		{"healthy", driverEnv("VK_DRIVER_FILES="+lavapipeICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL), time.Minute,
			[]string{"vulkan egl"}, nil},
		// The Vulkan driver breaks EGL in its own process only: EGL is
		// run again alone, and passes there.
		{"the Vulkan driver breaks EGL in its process", poisoned, time.Minute,
			[]string{"vulkan egl", "egl"}, nil},
		// The Vulkan driver crashes: each probe again in a child of its
		// own, the crash told to Vulkan alone.
		{"the Vulkan driver crashes", driverEnv("VK_DRIVER_FILES="+fakeICD.Manifest, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL, "FAKE_FAULT=segv"), time.Minute,
			[]string{"vulkan egl", "egl", "vulkan"}, []ReasonKind{ReasonCrashed}},
		// The EGL driver hangs after the Vulkan probe reported: its
		// timeout is its own, and it is not run again (a second wait).
		{"the EGL driver hangs", driverEnv("VK_DRIVER_FILES="+lavapipeICD, "__EGL_VENDOR_LIBRARY_FILENAMES="+fakeEGL.Manifest, "FAKE_FAULT=hang"), 2 * time.Second,
			[]string{"vulkan egl"}, []ReasonKind{ReasonTimeout}},
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := filepath.Join(t.TempDir(), "children")
			// Each child's line: the "api" values of its requests.
			script := `for r in "$@"; do case $r in *'"api":"vulkan"'*) a="$a vulkan";; *'"api":"egl"'*) a="$a egl";; esac; done; echo $a >>"$PROBE_LOG"; exec "$0" "$@"`
			r, err := Run(context.Background(), simulatedInventory(),
				WithCommand("/bin/sh", "-c", script, exe),
				WithEnv(append(slices.Clip(tc.env), "PROBE_LOG="+log)),
				WithTimeout(tc.timeout), WithAllowCPUAdapter(true))
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSpace(string(data)), "\n")
			slices.Sort(got[1:]) // the children run again start at the same time
			want := slices.Clone(tc.children)
			slices.Sort(want[1:])
			if !slices.Equal(got, want) {
				t.Errorf("children started %q, want %q", got, want)
			}
			if kinds := reasonKinds(r); !slices.Equal(kinds, tc.kinds) {
				t.Errorf("reasons %+v, want kinds %v", r.Reasons, tc.kinds)
			}
		})
	}
}
