package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// rootHint names the flag that helps when a command run with --simulate on
// the real root (--root /) finds a host file missing: a machine without a
// GPU is rarely a GPU node, and the way to try nodeprep there is a copy of
// a host tree (README, "Bringing a node up"). "" when err is something
// else, or --simulate or --root was given.
func rootHint(flags *pflag.FlagSet, rootDir string, err error) string {
	if flags == nil || rootDir != "/" || !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if f := flags.Lookup("simulate"); f == nil || f.Value.String() == "" {
		return ""
	}
	return "with --simulate on a machine that is not a GPU node, pass --root with a copy of a host tree: node=$(mktemp -d); cp -a testdata/hosts/nixos-h200/. \"$node\", then --root \"$node\""
}

// withRootHint is err with rootHint's advice appended; err itself when
// there is none. The fault kind (the exit code) is kept.
func (g *globals) withRootHint(err error) error {
	if err == nil || g.cmd == nil {
		return err
	}
	if h := rootHint(g.cmd.Flags(), g.rootDir, err); h != "" {
		return fmt.Errorf("%w (%s)", err, h)
	}
	return err
}

// nvmlHint appends to an NVML load failure (no library, no kernel driver)
// the flag that helps: on a machine with an NVIDIA PCI device (vendor
// 0x10de under sys, the kernel's /sys), --nvml-lib; on one without,
// --simulate, since no library will make NVML see a GPU that is not there.
// Other errors are returned as they are.
func nvmlHint(err error, sys fs.FS) error {
	if !errors.Is(err, gpu.ErrLibraryNotFound) && !errors.Is(err, gpu.ErrDriverNotLoaded) {
		return err
	}
	if !hasNVIDIADevice(sys) {
		return fmt.Errorf("%w (this machine has no NVIDIA GPU, no PCI device of vendor 0x10de: --simulate dgx-h200 runs nodeprep on a simulated DGX H200)", err)
	}
	if errors.Is(err, gpu.ErrLibraryNotFound) {
		return fmt.Errorf("%w (name the library with --nvml-lib or nvml.library in the config file)", err)
	}
	return err
}

// hasNVIDIADevice reports whether sys (the kernel's sysfs) lists a PCI
// device of NVIDIA's vendor id, 0x10de (bus/pci/devices/*/vendor). An
// unreadable sysfs counts as having one: the hint then stays the one for
// a GPU node.
func hasNVIDIADevice(sys fs.FS) bool {
	devs, err := fs.ReadDir(sys, "bus/pci/devices")
	if err != nil {
		return true
	}
	for _, d := range devs {
		v, err := fs.ReadFile(sys, "bus/pci/devices/"+d.Name()+"/vendor")
		if err == nil && strings.TrimSpace(string(v)) == "0x10de" {
			return true
		}
	}
	return false
}

// hostSysfs is the running kernel's sysfs (NVML reads the real machine,
// whatever --root says).
func hostSysfs() fs.FS { return os.DirFS("/sys") }
