package gpu

import (
	"errors"
	"testing"
)

func TestNormalizeBusID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"00000000:07:00.0", "0000:07:00.0"}, // NVML's busId
		{"00000000:B7:00.0", "0000:b7:00.0"},
		{"0000:07:00.0", "0000:07:00.0"}, // sysfs
		{"0000:07:1F.7", "0000:07:1f.7"},
		{"07:00.0", "0000:07:00.0"}, // legacy, no domain
		{"00010000:01:00.0", "10000:01:00.0"},
		{"0:0:0.0", "0000:00:00.0"},
		{"", ""},
		{"0000:07:00", ""},
		{"0000:07:20.0", ""},  // device > 0x1f
		{"0000:07:00.8", ""},  // function > 7
		{"0000:107:00.0", ""}, // bus > 2 digits
		{"000000000:07:00.0", ""},
		{"0000:07:00.0.1", ""},
		{"0000:0g:00.0", ""},
		{"a:b:c:d.0", ""},
		{"+0:07:00.0", ""},
		{"0000:07:00.", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := NormalizeBusID(tt.in)
			if tt.want == "" {
				if !errors.Is(err, ErrBusID) {
					t.Errorf("NormalizeBusID(%q) = %q, %v; want ErrBusID", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// FuzzNormalizeBusID checks that a normalised id is a fixed point and that
// failures are always ErrBusID.
func FuzzNormalizeBusID(f *testing.F) {
	for _, s := range []string{"00000000:07:00.0", "0000:b7:1f.7", "07:00.0", "", "::.", "0:0:0.0", "ffffffff:ff:1f.7"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeBusID(s)
		if err != nil {
			if !errors.Is(err, ErrBusID) {
				t.Fatalf("NormalizeBusID(%q): error %v is not ErrBusID", s, err)
			}
			return
		}
		again, err := NormalizeBusID(got)
		if err != nil || again != got {
			t.Fatalf("NormalizeBusID(%q) = %q, but that normalises to %q, %v", s, got, again, err)
		}
		if len(got) < len("0000:00:00.0") {
			t.Fatalf("NormalizeBusID(%q) = %q: too short", s, got)
		}
	})
}
