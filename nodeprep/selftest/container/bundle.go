package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// bundle is one container's OCI bundle directory: config.json and the
// root, an overlay of the image under a tmpfs upper layer, so that the
// mount points the runtime creates never touch the image.
type bundle struct {
	dir     string
	rootfs  string // the overlay's mount point: the container's root
	scratch string // the tmpfs holding the overlay's upper and work dirs
	mounted []string
}

// newBundle makes a bundle directory under parent with the image as the
// lower layer of its root. On error nothing is left behind.
func newBundle(parent, image string) (b *bundle, err error) {
	dir, err := os.MkdirTemp(parent, "bundle-")
	if err != nil {
		return nil, fmt.Errorf("creating the bundle directory: %w", err)
	}
	b = &bundle{dir: dir, rootfs: filepath.Join(dir, "rootfs"), scratch: filepath.Join(dir, "scratch")}
	defer func() {
		if err != nil {
			b.remove()
			b = nil
		}
	}()
	for _, d := range []string{b.rootfs, b.scratch} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return b, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	// The upper layer cannot live on an overlay (/tmp often is one in CI
	// containers): a tmpfs of its own is always accepted.
	if err := unix.Mount("tmpfs", b.scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=64m"); err != nil {
		return b, fmt.Errorf("mounting a tmpfs on %s: %w", b.scratch, err)
	}
	b.mounted = append(b.mounted, b.scratch)
	upper, work := filepath.Join(b.scratch, "upper"), filepath.Join(b.scratch, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return b, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", escapeOverlay(image), upper, work)
	if err := unix.Mount("overlay", b.rootfs, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return b, fmt.Errorf("mounting an overlay of %s on %s: %w", image, b.rootfs, err)
	}
	b.mounted = append(b.mounted, b.rootfs)
	return b, nil
}

// escapeOverlay escapes the characters overlayfs's option parser splits on.
func escapeOverlay(p string) string {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case ',', ':', '\\':
			out = append(out, '\\')
		}
		out = append(out, p[i])
	}
	return string(out)
}

// writeConfig writes spec as the bundle's config.json.
func (b *bundle) writeConfig(spec *rspec.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the OCI runtime spec: %w", err)
	}
	p := filepath.Join(b.dir, "config.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}

// remove unmounts the overlay and the tmpfs (lazily, so a straggler cannot
// keep them) and removes the directory; errors are joined.
func (b *bundle) remove() error {
	var errs []error
	for i := len(b.mounted) - 1; i >= 0; i-- {
		if err := unix.Unmount(b.mounted[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", b.mounted[i], err))
		}
	}
	b.mounted = nil
	if len(errs) > 0 {
		// Never remove files through a mount that is still there.
		return fmt.Errorf("keeping the bundle %s: %w", b.dir, errors.Join(errs...))
	}
	if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing the bundle %s: %w", b.dir, err))
	}
	return errors.Join(errs...)
}
