package testkit

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseDevice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want Device
		ok   bool
	}{
		{"/dev/nvidia0 c 195 0 0666", Device{"/dev/nvidia0", 'c', 195, 0, 0o666}, true},
		{"/dev/sda b 8 0 660", Device{"/dev/sda", 'b', 8, 0, 0o660}, true},
		{"/dev/nvidia0 c 195 0", Device{}, false},
		{"dev/nvidia0 c 195 0 0666", Device{}, false},
		{"/dev/../x c 1 3 0666", Device{}, false},
		{"/dev/x p 1 3 0666", Device{}, false},
		{"/dev/x c -1 3 0666", Device{}, false},
		{"/dev/x c 1 3 0999", Device{}, false},
		{"/dev/x c 1 3 01777", Device{}, false},
	}
	for _, tc := range tests {
		got, err := parseDevice(tc.line)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseDevice(%q) = %+v, %v; want %+v, ok %v", tc.line, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseDevice(f *testing.F) {
	f.Add("/dev/nvidia0 c 195 0 0666")
	f.Add("/dev/dri/renderD128 c 226 128 0666")
	f.Fuzz(func(t *testing.T, line string) {
		d, err := parseDevice(line)
		if err != nil {
			return
		}
		if !filepath.IsAbs(d.Path) || d.Mode > 0o777 || (d.Type != 'c' && d.Type != 'b') {
			t.Fatalf("parseDevice(%q) accepted %+v", line, d)
		}
	})
}

// TestHostCopyDevices: as root, the copy of nixos-h200 has real character
// devices with the numbers its .devices lists.
func TestHostCopyDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root; the placeholders stay as another user")
	}
	root := HostCopy(t, "nixos-h200")
	for path, want := range map[string][2]uint32{"/dev/nvidia3": {195, 3}, "/dev/nvidiactl": {195, 255}, "/dev/null": {1, 3}, "/dev/dri/renderD135": {226, 135}} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, path), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != want[0] || unix.Minor(st.Rdev) != want[1] || st.Mode&0o777 != 0o666 {
			t.Errorf("%s: mode %o rdev %d:%d, want a char device %d:%d mode 0666", path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), want[0], want[1])
		}
	}
}
