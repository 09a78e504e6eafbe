// Package bounded reads the inputs nodeprep parses without letting their
// size, their kind of file or their nesting cost unbounded time or memory.
// It is the one room for such bounds, and every reader of a spec, a config,
// a manifest, a kubeconfig, a status file or an API response goes through
// it:
//
//   - a file is opened without blocking and only when it is a regular file
//     (Open, ReadFile): a FIFO, socket, device or directory in its place
//     is refused with ErrNotRegular, never waited on or read forever;
//   - a file or stream is read only up to its kind's limit (ReadFile,
//     ReadAll, the Max* table): a larger one is refused with ErrTooLarge,
//     a file before anything of it is read;
//   - a TOML document is refused when it nests deeper, or holds a dotted
//     key of more parts, than its decoder can bear (CheckTOML).
//
// The bound on what a YAML document expands to through its aliases (a
// "billion laughs" document, or one big string aliased many times) is
// nodeprep/bounded/yamlbound, apart because it links a YAML parser.
//
// The package imports the standard library only: the lean child
// (cmd/nodeprep-probe) links it to read loader manifests.
package bounded

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// The size limits, in bytes: one per kind of input nodeprep reads. A
// larger input is refused with ErrTooLarge (how each reader reports that,
// an exit code or a finding, is the reader's; docs/exit-codes.md lists
// them).
const (
	// MaxCDISpec is the largest CDI spec file: 64 MiB. A 10,000-device
	// spec nvidia-ctk could write is about 50 MB; patching a spec needs
	// about 4 times its size in memory.
	MaxCDISpec = 64 << 20
	// MaxConfig is the largest nodeprep config file
	// (/etc/nodeprep/config.yaml or --config): 1 MiB; the documented
	// config is under 4 KiB.
	MaxConfig = 1 << 20
	// MaxK3sConfig is the largest k3s config file, drop-in or systemd
	// EnvironmentFile: 1 MiB, far more than any real one (a few hundred
	// bytes).
	MaxK3sConfig = 1 << 20
	// MaxContainerdConfig is the largest containerd config.toml (or its
	// template) k3s renders: 4 MiB; k3s writes about 4 KiB (a 2 GB
	// sparse config.toml took 8.5 GiB and 21 s to parse).
	MaxContainerdConfig = 4 << 20
	// MaxNVRuntimeConfig is the largest NVIDIA container runtime config
	// (config.toml): 1 MiB; the toolkit writes about 2 KiB, and a TOML
	// array costs about 25 times its text once decoded (a 40 MB one took
	// 977 MiB and 13 s).
	MaxNVRuntimeConfig = 1 << 20
	// MaxKubeconfig is the largest kubeconfig: 1 MiB; k3s's
	// kubelet.kubeconfig is under 1 KiB (the files it names have
	// MaxPEM's limit).
	MaxKubeconfig = 1 << 20
	// MaxManifest is the largest Vulkan ICD or layer, EGL vendor or EGL
	// external platform manifest: 1 MiB; NVIDIA's are under 1 KiB.
	MaxManifest = 1 << 20
	// MaxStatus is the largest status file (/run/nodeprep/status.json):
	// 16 MiB; a report of 8 GPUs is about 40 KiB, and the inventory in
	// it came from a child report of at most 8 MiB (child.MaxReport).
	MaxStatus = 16 << 20
	// MaxPEM is the largest certificate, key or CA bundle file a
	// kubeconfig names: 1 MiB; k3s's are a few KiB, and a system CA
	// bundle (ca-certificates) about 220 KiB.
	MaxPEM = 1 << 20
	// MaxAPIResponse is the largest Kubernetes API server response body
	// nodeprep reads: 4 MiB; a list is read in pages that fit it.
	MaxAPIResponse = 4 << 20
	// MaxAPIError is how much of an API server's error (non-2xx) body
	// nodeprep reads: 64 KiB; a Status object is a few hundred bytes.
	MaxAPIError = 64 << 10
	// MaxAPIList is the most the pages of one list from the API server
	// may add up to: 128 MiB; 5,000 Nodes (the largest cluster
	// Kubernetes is tested at) of about 10 KiB each are 50 MB.
	MaxAPIList = 128 << 20
	// MaxClusterManifests is the largest manifest file, or stdin stream,
	// `cluster check` reads: 64 MiB.
	MaxClusterManifests = 64 << 20
	// MaxClusterDocument is the largest one YAML document of a manifest
	// stream: 16 MiB; a manifest larger than that is not something a
	// person wrote.
	MaxClusterDocument = 16 << 20
)

// ErrNotRegular is returned (wrapped) by Open and ReadFile for a
// directory, FIFO, device or socket.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned (wrapped) by ReadFile for a file, and by ReadAll
// for a stream, larger than its limit.
var ErrTooLarge = errors.New("file too large")

// Open opens the regular file at path (on this machine) for reading
// without blocking and returns it with its Stat. A FIFO, device, socket
// or directory gives an error wrapping ErrNotRegular, so a reader that
// needs a file handle (debug/buildinfo on a binary) cannot hang on a FIFO;
// other errors are the open's (fs.ErrNotExist for a missing file). The
// caller closes the file. The file may still be of any size.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENXIO) { // a socket cannot be opened at all
		if st, serr := os.Stat(path); serr == nil && !st.Mode().IsRegular() {
			return nil, nil, fmt.Errorf("%s is %s: %w", path, DescribeMode(st.Mode()), ErrNotRegular)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s: %w", path, DescribeMode(st.Mode()), ErrNotRegular)
	}
	return f, st, nil
}

// ReadFile reads the regular file at path (on this machine), of at most
// limit bytes (one of the Max* limits). Errors: Open's (ErrNotRegular for
// anything but a regular file, opened without blocking), and ErrTooLarge
// for a file over limit, refused before anything is read when its size
// says so, and when it grows past limit while it is read; so a huge or
// sparse file cannot take its size in memory.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, tooLarge(path, st.Size(), limit)
	}
	// One buffer of the file's size (and a little to see the end):
	// io.ReadAll's doubling would hold up to twice a big spec.
	buf := make([]byte, 0, st.Size()+512)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
		if int64(len(buf)) > limit {
			return nil, tooLarge(path, int64(len(buf)), limit)
		}
		if len(buf) == cap(buf) { // the file grew while we read it
			buf = append(buf, 0)[:len(buf)]
		}
	}
}

// ReadAll reads r to its end, of at most limit bytes (one of the Max*
// limits): a stream (an HTTP response body, stdin) whose size is not
// known before it is read. It reads at most limit+1 bytes; a longer
// stream gives an error wrapping ErrTooLarge, and r's own errors come
// back as they are.
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("more than the %s nodeprep reads: %w", sizeText(limit), ErrTooLarge)
	}
	return data, nil
}

// tooLarge is the ErrTooLarge error for a file of size bytes over limit.
func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s has %d bytes, more than the %s this file may have: %w", path, size, sizeText(limit), ErrTooLarge)
}

// sizeText writes a limit in MiB or KiB when it is a whole number of them.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// DescribeMode names a file's type for messages ("a named pipe (FIFO)",
// "a directory"), for the refusals of what is not a regular file.
func DescribeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "not a regular file (mode " + m.String() + ")"
}
