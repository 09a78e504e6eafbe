// Command draspecs writes, into a CDI spec directory, the specs NVIDIA's DRA
// driver for GPUs (k8s-dra-driver-gpu, its kubelet plugin) writes on a node,
// made with the same libraries and the same calls, so that nodeprep's host
// trees hold what the driver writes rather than an imitation of it. It is a
// test tool of nodeprep (scripts/gen-testhosts.sh runs it, chrooted, through
// scripts/nvidia-cdi-generate.sh), built from this tools module with the
// pinned NVIDIA container toolkit's CDI generator (pkg/nvcdi) and the CDI
// library; none of the DRA driver's code is in it.
//
// What the kubelet plugin does (cmd/gpu-kubelet-plugin/cdi.go and
// sharing.go in NVIDIA/k8s-dra-driver-gpu), and so what this writes:
//   - at start, the base spec k8s.gpu.nvidia.com-device_base.yaml, kind
//     k8s.gpu.nvidia.com/device: nvcdi in mode nvml for vendor
//     k8s.gpu.nvidia.com and class device, its common edits plus
//     NVIDIA_VISIBLE_DEVICES=void, one device per GPU from
//     GetDeviceSpecsByID(<uuid>) renamed to the GPU's canonical name
//     gpu-<minor>, cdiVersion lowered to the minimum the spec needs, written
//     with the CDI cache's WriteSpec (YAML);
//   - at start, with -vfio, the VFIO spec k8s.gpu.nvidia.com-device_vfio.yaml
//     of the same kind: device gpu-vfio-<index> with /dev/vfio/<IOMMU group>,
//     common edits /dev/vfio/vfio and NVIDIA_VISIBLE_DEVICES=void;
//   - at claim time, with -claim, the claim spec
//     k8s.gpu.nvidia.com-claim_<claim UID>.yaml, kind
//     k8s.gpu.nvidia.com/claim: device <claim UID>-gpu-<minor> for the
//     claim's first GPU with the edits an MPS sharing config gives it
//     (CUDA_MPS_PIPE_DIRECTORY and the control daemon's shm and pipe
//     directories, read-write).
//
// The one flag the driver does not have is -library-search-path: on NixOS
// the driver's libraries are found in the nvidia-x11 store path, which the
// host's ld.so.cache does not list (nvidia-ctk's --library-search-path, as
// NixOS's generator unit passes it).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	nvdevice "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/spec"
	"github.com/sirupsen/logrus"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	vendor      = "k8s.gpu.nvidia.com" // "k8s." + the driver name gpu.nvidia.com
	deviceClass = "device"
	claimClass  = "claim"
)

func main() {
	cdiRoot := flag.String("cdi-root", "/var/run/cdi", "the CDI spec directory the specs are written to")
	driverRoot := flag.String("driver-root", "/", "the driver's root")
	hookPath := flag.String("nvidia-cdi-hook-path", "", "the nvidia-cdi-hook the specs' hooks run")
	libPaths := flag.String("library-search-path", "", "colon-separated folders the driver's libraries are looked up in")
	claim := flag.String("claim", "", "a claim UID: also write that claim's spec (MPS sharing of the first GPU)")
	mpsRoot := flag.String("mps-root", "/var/lib/kubelet/plugins/gpu.nvidia.com/mps", "the folder of the MPS control daemons' shm and pipe folders")
	vfio := flag.String("vfio", "", "index:IOMMU-group of a GPU bound to vfio-pci: also write the VFIO spec")
	flag.Parse()
	if err := run(*cdiRoot, *driverRoot, *hookPath, *libPaths, *claim, *mpsRoot, *vfio); err != nil {
		fmt.Fprintln(os.Stderr, "draspecs:", err)
		os.Exit(1)
	}
}

func run(cdiRoot, driverRoot, hookPath, libPaths, claim, mpsRoot, vfio string) error {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	// The kubelet plugin opens the libnvidia-ml.so.1 it finds under the
	// driver root (nvlib.go); here, in the library search path.
	var nvmlOpts []nvml.LibraryOption
	for _, d := range strings.Split(libPaths, ":") {
		if p := filepath.Join(driverRoot, d, "libnvidia-ml.so.1"); d != "" && exists(p) {
			nvmlOpts = append(nvmlOpts, nvml.WithLibraryPath(p))
			break
		}
	}
	nvmllib := nvml.New(nvmlOpts...)
	if r := nvmllib.Init(); r != nvml.SUCCESS {
		return fmt.Errorf("initializing NVML: %v", r)
	}
	defer nvmllib.Shutdown()
	opts := []nvcdi.Option{
		nvcdi.WithDeviceLib(nvdevice.New(nvmllib)),
		nvcdi.WithDriverRoot(driverRoot),
		nvcdi.WithDevRoot(driverRoot),
		nvcdi.WithLogger(log),
		nvcdi.WithNvmlLib(nvmllib),
		nvcdi.WithMode("nvml"),
		nvcdi.WithVendor(vendor),
		nvcdi.WithClass(deviceClass),
		nvcdi.WithNVIDIACDIHookPath(hookPath),
	}
	if libPaths != "" {
		opts = append(opts, nvcdi.WithLibrarySearchPaths(strings.Split(libPaths, ":")))
	}
	lib, err := nvcdi.New(opts...)
	if err != nil {
		return fmt.Errorf("creating the CDI library for devices: %w", err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiRoot), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("creating the CDI cache: %w", err)
	}

	common, err := lib.GetCommonEdits()
	if err != nil {
		return fmt.Errorf("getting the common edits: %w", err)
	}
	common.Env = append(common.Env, "NVIDIA_VISIBLE_DEVICES=void")
	n, r := nvmllib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return fmt.Errorf("counting GPUs: %v", r)
	}
	var devices []cdispec.Device
	firstMinor := -1
	for i := 0; i < n; i++ {
		d, r := nvmllib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: %v", i, r)
		}
		uuid, r := d.GetUUID()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %d's UUID: %v", i, r)
		}
		minor, r := d.GetMinorNumber()
		if r != nvml.SUCCESS {
			return fmt.Errorf("GPU %d's minor number: %v", i, r)
		}
		ds, err := lib.GetDeviceSpecsByID(uuid)
		if err != nil {
			return fmt.Errorf("device spec of %s: %w", uuid, err)
		}
		ds[0].Name = fmt.Sprintf("gpu-%d", minor)
		devices = append(devices, ds[0])
		if firstMinor < 0 {
			firstMinor = minor
		}
	}
	if err := write(cache, deviceClass, "base", devices, *common.ContainerEdits); err != nil {
		return err
	}

	if vfio != "" {
		index, group, ok := strings.Cut(vfio, ":")
		if _, err := strconv.Atoi(index); !ok || err != nil {
			return fmt.Errorf("-vfio %q: want index:IOMMU-group", vfio)
		}
		dev := cdispec.Device{Name: "gpu-vfio-" + index, ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: filepath.Join("/dev/vfio", group)}},
		}}
		edits := cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/vfio/vfio"}},
			Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		}
		if err := write(cache, deviceClass, "vfio", []cdispec.Device{dev}, edits); err != nil {
			return err
		}
	}

	if claim != "" {
		daemon := filepath.Join(mpsRoot, claim)
		rw := []string{"rw", "nosuid", "nodev", "bind"}
		dev := cdispec.Device{Name: fmt.Sprintf("%s-gpu-%d", claim, firstMinor), ContainerEdits: cdispec.ContainerEdits{
			Env: []string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"},
			Mounts: []*cdispec.Mount{
				{ContainerPath: "/dev/shm", HostPath: filepath.Join(daemon, "shm"), Options: rw},
				{ContainerPath: "/tmp/nvidia-mps", HostPath: filepath.Join(daemon, "pipe"), Options: rw},
			},
		}}
		if err := write(cache, claimClass, claim, []cdispec.Device{dev}, cdispec.ContainerEdits{}); err != nil {
			return err
		}
	}
	return nil
}

// write builds the spec of class with the toolkit's spec builder, lowers
// its cdiVersion to the minimum it needs and writes it as the CDI cache
// names a transient spec: <vendor>-<class>_<id>.yaml.
func write(cache *cdiapi.Cache, class, id string, devices []cdispec.Device, edits cdispec.ContainerEdits) error {
	s, err := spec.New(spec.WithVendor(vendor), spec.WithClass(class), spec.WithDeviceSpecs(devices), spec.WithEdits(edits))
	if err != nil {
		return fmt.Errorf("building the %s spec: %w", class, err)
	}
	raw := s.Raw()
	v, err := cdispec.MinimumRequiredVersion(raw)
	if err != nil {
		return fmt.Errorf("the %s spec's minimum version: %w", class, err)
	}
	raw.Version = v
	name := cdiapi.GenerateTransientSpecName(vendor, class, id)
	if err := cache.WriteSpec(raw, name); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
