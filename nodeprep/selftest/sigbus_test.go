package selftest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestSIGBUSOnFullShaderCache: a driver that writes its shader cache
// through a shared mapping (as Mesa's disk cache does) is killed by
// SIGBUS when the cache's file system is full; the reason names the
// library and the cause (issue 22: "crashed: killed by signal SIGBUS"
// said neither). The file system is a real 64 KiB tmpfs, filled; it
// needs root, and is skipped with the reason elsewhere.
func TestSIGBUSOnFullShaderCache(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root")
	}
	cache := t.TempDir()
	if err := syscall.Mount("tmpfs", cache, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(cache, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", cache, err)
		}
	})
	f, err := os.Create(filepath.Join(cache, ".filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	fakeICD, _ := testkit.FakeDrivers(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), simulatedInventory(),
		WithCommand(exe),
		WithEnv(driverEnv("VK_DRIVER_FILES="+fakeICD.Manifest, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL, "FAKE_FAULT=sigbus")),
		WithShaderCacheDir(cache),
		WithTimeout(time.Minute), WithAllowCPUAdapter(true))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Reasons) != 1 || r.Reasons[0].Kind != ReasonCrashed {
		t.Fatalf("reasons %+v, want one crash", r.Reasons)
	}
	for _, want := range []string{"crashed: SIGBUS in " + fakeICD.Lib, "the shader cache's file system is full", cache} {
		if !strings.Contains(r.Reasons[0].Message, want) {
			t.Errorf("reason %q does not say %q", r.Reasons[0].Message, want)
		}
	}
}
