package gpu

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// TestNVMLFaults reads the inventory through the NVML child from a fake
// NVML built here from C (nodeprep/testenv/fakedriver): one GPU, and only the
// handful of functions in csrc/nvml.c, so every other query is a symbol
// the library lacks. FAKE_FAULT and FAKE_NVML_AT make its nvmlInit_v2 or
// its nvmlDeviceGetName hang, abort or segfault.
func TestNVMLFaults(t *testing.T) {
	t.Parallel()
	lib := fakeNVML(t, fakedriver.NVML)
	tests := []struct {
		name, fault, at string
		sentinel        error
		fragments       []string
	}{
		{"init hangs", "hang", "init", ErrHung, []string{"did not finish within 1s", lib}},
		{"query hangs", "hang", "query", ErrHung, []string{"did not finish within 1s"}},
		{"init aborts", "abort", "init", ErrCrashed, []string{"crashed: SIGABRT in " + lib, "assertion"}},
		{"query segfaults", "segv", "query", ErrCrashed, []string{"crashed: SIGSEGV in " + lib}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testChild(t, "FAKE_FAULT="+tc.fault, "FAKE_NVML_AT="+tc.at)
			inv, err := FromNVMLChild(context.Background(), c, lib, time.Second)
			if inv != nil || !errors.Is(err, tc.sentinel) || !errors.Is(err, fault.ErrUnavailable) {
				t.Fatalf("FromNVMLChild = %v, %v; want %v marked unavailable", inv, err, tc.sentinel)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not contain %q", err, f)
				}
			}
		})
	}

	t.Run("missing symbols", func(t *testing.T) {
		t.Parallel()
		inv, err := FromNVMLChild(context.Background(), testChild(t), lib, 10*time.Second)
		if err != nil {
			t.Fatalf("an NVML without brand, PCI, memory... queries: %v, want an inventory without those fields", err)
		}
		if len(inv.GPUs) != 1 || inv.DriverVersion != "999.1.2" || inv.CUDADriverVersion != "" {
			t.Fatalf("inventory %+v, want one GPU, driver 999.1.2, no CUDA version", inv)
		}
		g := inv.GPUs[0]
		if g.UUID != "GPU-12345678-1234-1234-1234-123456789abc" || g.Name != "NVIDIA Fake" || g.Brand != "" || g.PCIBusID != "" || g.MemoryMiB != 0 || g.ECC != nil || g.TemperatureC != nil || !g.Health.Healthy {
			t.Fatalf("GPU %+v: want UUID and name, the missing queries absent, healthy", g)
		}
	})

	// issue 22: an inventory over child.MaxReport was "NVML crashed: …
	// unexpected EOF"; the child did not crash.
	t.Run("report too large", func(t *testing.T) {
		t.Parallel()
		inv, err := FromNVMLChild(context.Background(), testChild(t, "FAKE_NVML_COUNT=30000"), lib, time.Minute)
		if inv != nil || !errors.Is(err, ErrReportTooLarge) || errors.Is(err, ErrCrashed) || !strings.Contains(err.Error(), "report too large") {
			t.Fatalf("FromNVMLChild(30000 GPUs) = %v, %v; want ErrReportTooLarge, not a crash", inv, err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := FromNVMLChild(ctx, testChild(t, "FAKE_FAULT=hang", "FAKE_NVML_AT=init"), lib, time.Minute)
		if !errors.Is(err, ErrCancelled) || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("FromNVMLChild after cancel = %v, want ErrCancelled", err)
		}
	})

	t.Run("library not found", func(t *testing.T) {
		t.Parallel()
		_, err := FromNVMLChild(context.Background(), testChild(t), "/nonexistent/libnvidia-ml.so.1", 10*time.Second)
		var le *LibraryError
		if !errors.As(err, &le) || !errors.Is(err, ErrLibraryNotFound) || !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) || !strings.Contains(le.Detail, "No such file") {
			t.Fatalf("FromNVMLChild(missing) = %v, want a *LibraryError with dlerror's detail", err)
		}
	})
}

// BenchmarkNVMLChild is the cost of reading NVML in a child: one
// fork+exec of this test binary, the fake NVML's inventory, the report.
func BenchmarkNVMLChild(b *testing.B) {
	lib := fakeNVML(b, fakedriver.NVML)
	c := testChild(b)
	for b.Loop() {
		if _, err := FromNVMLChild(context.Background(), c, lib, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
