package testkit

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DevicesManifest is the file in a host tree under testdata/hosts that
// lists the tree's device nodes, which git cannot store: one line per
// node, "path type major minor mode" ("/dev/nvidia0 c 195 0 0666"; type c
// or b, mode in octal), '#' starting a comment. The tree holds an empty
// regular file at each path (scripts/gen-testhosts.sh writes both).
const DevicesManifest = ".devices"

// Device is one line of a DevicesManifest.
type Device struct {
	Path         string // absolute in the tree ("/dev/nvidia0")
	Type         byte   // 'c' (character) or 'b' (block)
	Major, Minor uint32
	Mode         os.FileMode // permission bits
}

// ReadDevices parses root's DevicesManifest; a tree without one has no
// devices (nil, nil). A malformed line is an error naming the file and
// the line.
func ReadDevices(root string) ([]Device, error) {
	p := filepath.Join(root, DevicesManifest)
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading device manifest: %w", err)
	}
	defer f.Close()
	var out []Device
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		d, err := parseDevice(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", p, n, err)
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return out, nil
}

func parseDevice(line string) (Device, error) {
	f := strings.Fields(line)
	if len(f) != 5 {
		return Device{}, fmt.Errorf("want \"path type major minor mode\", got %q", line)
	}
	if !filepath.IsAbs(f[0]) || filepath.Clean(f[0]) != f[0] || f[0] == "/" {
		return Device{}, fmt.Errorf("device path %q is not a clean absolute path", f[0])
	}
	if f[1] != "c" && f[1] != "b" {
		return Device{}, fmt.Errorf("device type %q is neither c nor b", f[1])
	}
	maj, err1 := strconv.ParseUint(f[2], 10, 32)
	minor, err2 := strconv.ParseUint(f[3], 10, 32)
	mode, err3 := strconv.ParseUint(f[4], 8, 32)
	if err1 != nil || err2 != nil || err3 != nil || mode > 0o777 {
		return Device{}, fmt.Errorf("bad major, minor or mode in %q", line)
	}
	return Device{Path: f[0], Type: f[1][0], Major: uint32(maj), Minor: uint32(minor), Mode: os.FileMode(mode)}, nil
}

// makeDevices replaces the placeholder files of root's DevicesManifest
// with the real device nodes (mknod), when the test runs as root; as
// another user the placeholders stay. Errors name the node.
func makeDevices(root string) error {
	devs, err := ReadDevices(root)
	if err != nil || len(devs) == 0 || os.Geteuid() != 0 {
		return err
	}
	for _, d := range devs {
		p := filepath.Join(root, d.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
		kind := uint32(unix.S_IFCHR)
		if d.Type == 'b' {
			kind = unix.S_IFBLK
		}
		if err := unix.Mknod(p, kind|uint32(d.Mode), int(unix.Mkdev(d.Major, d.Minor))); err != nil {
			return fmt.Errorf("making device node %s: %w", p, err)
		}
		// mknod applies the umask.
		if err := os.Chmod(p, d.Mode); err != nil {
			return fmt.Errorf("making device node %s: %w", p, err)
		}
	}
	return nil
}
