package container

import (
	"path/filepath"

	"github.com/nodeprep/nodeprep/cdi/specset"

	"errors"
	"fmt"
	"io/fs"
	"os"

	"slices"
	"strings"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	cdilib "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

// BinaryPath is where the nodeprep binary is bind-mounted (read-only) in the
// container.
const BinaryPath = "/.nodeprep/nodeprep"

// ContainerPATH is the container's only variable that is not the spec's:
// the usual FHS search path, nothing from the host.
const ContainerPATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BaseSpec returns the OCI runtime spec of a probe container before the CDI
// edits: args as the process, ContainerPATH as its environment, rootfs as
// a read-only root, its own PID, IPC, UTS, mount and network namespaces (the
// network namespace has only a down loopback: no network), /proc, a tmpfs
// /dev with /dev/shm, a read-only /sys, a tmpfs /tmp, no capabilities, no
// new privileges, and a device cgroup that denies every device the edits do
// not allow (runc's own defaults, /dev/null and friends, are added by the
// runtime). The masked and read-only /proc paths are runc's `runc spec`
// defaults.
func BaseSpec(rootfs string, args []string) *rspec.Spec {
	noCaps := &rspec.LinuxCapabilities{Bounding: []string{}, Effective: []string{}, Permitted: []string{}}
	return &rspec.Spec{
		Version:  rspec.Version,
		Root:     &rspec.Root{Path: rootfs, Readonly: true},
		Hostname: "nodeprep-selftest",
		Process: &rspec.Process{
			Args:            args,
			Env:             []string{ContainerPATH},
			Cwd:             "/",
			Capabilities:    noCaps,
			NoNewPrivileges: true,
			Rlimits:         []rspec.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096}},
		},
		Mounts: []rspec.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=65536k"}},
		},
		Linux: &rspec.Linux{
			Namespaces: []rspec.LinuxNamespace{
				{Type: rspec.PIDNamespace}, {Type: rspec.IPCNamespace}, {Type: rspec.UTSNamespace},
				{Type: rspec.MountNamespace}, {Type: rspec.NetworkNamespace},
			},
			Resources: &rspec.LinuxResources{
				Devices: []rspec.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
				"/sys/firmware",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
}

// BinaryMount is the read-only bind mount of the nodeprep binary (a path on
// this machine) at BinaryPath.
func BinaryMount(binary string) rspec.Mount {
	return rspec.Mount{Destination: BinaryPath, Type: "bind", Source: binary, Options: []string{"bind", "ro", "nosuid", "nodev"}}
}

// NewCache loads the CDI specs in specDir (a directory on this machine)
// the way a runtime does, without watching it (specset.NewCache over one
// directory, host root "/").
func NewCache(specDir string) (*cdilib.Cache, error) {
	root, err := hostfs.New("/")
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(specDir)
	if err != nil {
		return nil, fmt.Errorf("loading CDI specs from %q: %w", specDir, err)
	}
	cache, _, err := specset.NewCache(root, []string{abs})
	return cache, err
}

// Inject applies the CDI devices to spec with the CDI library
// (Cache.InjectDevices, what containerd and CRI-O call). The error is the
// library's, with every spec file the library could not load appended
// (a device in an invalid spec is "unresolvable" without them).
func Inject(cache *cdilib.Cache, spec *rspec.Spec, devices []string) error {
	_, err := cache.InjectDevices(spec, devices...)
	if err == nil {
		return nil
	}
	var loadErrs []string
	for file, errs := range cache.GetErrors() {
		loadErrs = append(loadErrs, fmt.Sprintf("%s: %v", file, errors.Join(errs...)))
	}
	slices.Sort(loadErrs)
	if len(loadErrs) > 0 {
		return fmt.Errorf("%w (spec files the CDI library could not load: %s)", err, strings.Join(loadErrs, "; "))
	}
	return err
}

// RerootDeviceNodes prepares the device nodes of the devices (and of their
// specs' top-level edits) in cache for a host tree: each host path is
// resolved under host, and a node that is not a character or block device
// there (host trees carry empty files for /dev/nvidia*) is dropped, with a
// note, so that the CDI library neither stats the real /dev nor fails on a
// regular file. It edits the cache's loaded specs, which the caller owns (a
// cache made for one injection). On a host whose root is "/" it does
// nothing: the library stats the real nodes and fails as a runtime would.
func RerootDeviceNodes(cache *cdilib.Cache, devices []string, host *hostfs.Root) (notes []string) {
	if host.Dir() == "/" {
		return nil
	}
	seen := map[*cdispecs.ContainerEdits]bool{}
	edit := func(e *cdispecs.ContainerEdits) {
		if e == nil || seen[e] {
			return
		}
		seen[e] = true
		kept := e.DeviceNodes[:0]
		for _, n := range e.DeviceNodes {
			hp := n.HostPath
			if hp == "" {
				hp = n.Path
			}
			p, err := host.Path(hp)
			if err == nil {
				var st fs.FileInfo
				if st, err = os.Stat(p); err == nil && st.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
					n.HostPath = p
					kept = append(kept, n)
					continue
				}
			}
			why := "not a device node here"
			if err != nil {
				why = err.Error()
			}
			notes = append(notes, fmt.Sprintf("device node %s (host %s) not created: %s (a host tree)", n.Path, hp, why))
		}
		e.DeviceNodes = kept
	}
	for _, name := range devices {
		d := cache.GetDevice(name)
		if d == nil {
			continue // InjectDevices names it
		}
		edit(&d.ContainerEdits)
		if s := d.GetSpec(); s != nil {
			edit(&s.ContainerEdits)
		}
	}
	return notes
}

// MissingSource is a bind mount whose host path does not exist.
type MissingSource struct {
	// HostPath is the spec's hostPath; Source where it was looked for on
	// this machine; Destination the container path.
	HostPath, Source, Destination string
	Err                           error // the stat error of the source
}

// Reroot re-roots the host side of the injected edits under host: every
// bind mount's source and every hook's path. It returns the bind mounts
// whose source does not exist, and notes for hooks dropped because they
// cannot run here (a host tree only: their re-rooted path is not an
// executable file). skip names container paths that are not the spec's (the
// binary's mount). On a host whose root is "/" paths are unchanged and only
// the sources are checked.
func Reroot(spec *rspec.Spec, host *hostfs.Root, skip ...string) (missing []MissingSource, notes []string) {
	rerooted := host.Dir() != "/"
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if !isBind(m) || slices.Contains(skip, m.Destination) {
			continue
		}
		src := m.Source
		if rerooted {
			p, err := host.Path(m.Source)
			if err != nil {
				missing = append(missing, MissingSource{HostPath: m.Source, Source: m.Source, Destination: m.Destination, Err: err})
				continue
			}
			src = p
		}
		if _, err := os.Stat(src); err != nil {
			missing = append(missing, MissingSource{HostPath: m.Source, Source: src, Destination: m.Destination, Err: err})
			continue
		}
		m.Source = src
	}
	if spec.Hooks == nil || !rerooted {
		return missing, notes
	}
	//lint:ignore SA1019 Prestart is deprecated but still run by runtimes, and CDI specs may use it
	prestart := &spec.Hooks.Prestart
	for _, hooks := range []*[]rspec.Hook{
		prestart, &spec.Hooks.CreateRuntime, &spec.Hooks.CreateContainer,
		&spec.Hooks.StartContainer, &spec.Hooks.Poststart, &spec.Hooks.Poststop,
	} {
		kept := (*hooks)[:0]
		for _, h := range *hooks {
			p, err := host.Path(h.Path)
			if err == nil {
				var st fs.FileInfo
				if st, err = os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 && st.Size() > 0 {
					h.Path = p
					kept = append(kept, h)
					continue
				}
			}
			notes = append(notes, fmt.Sprintf("hook %s not run: not an executable here (a host tree)", strings.Join(append([]string{h.Path}, argsAfter0(h.Args)...), " ")))
		}
		*hooks = kept
	}
	return missing, notes
}

func argsAfter0(args []string) []string {
	if len(args) > 1 {
		return args[1:]
	}
	return nil
}

// isBind reports whether m is a bind mount (type "bind", or a "bind" or
// "rbind" option, as nvidia-ctk writes them without a type).
func isBind(m *rspec.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// DeviceNames returns the CDI device names of the GPUs' UUID-named devices
// of kind ("nvidia.com/gpu=GPU-…"), the names the Kubernetes device plugin
// asks for.
func DeviceNames(kind string, uuids ...string) []string {
	out := make([]string, 0, len(uuids))
	for _, u := range uuids {
		out = append(out, kind+"="+u)
	}
	return out
}
