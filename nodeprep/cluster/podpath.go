package cluster

import (
	"fmt"
	"strings"
)

// PatchedRuntimeClass is the runtime class whose pods get the CDI spec
// nodeprep patched and proved, with the device plugin's envvar strategy:
// k3s registers the handler nvidia-cdi for nvidia-container-runtime.cdi,
// which runs the NVIDIA runtime in cdi mode whatever its config says, so
// NVIDIA_VISIBLE_DEVICES=GPU-<uuid> becomes nvidia.com/gpu=GPU-<uuid> from
// the patched spec (nvidia-container-toolkit cmd/nvidia-container-runtime.cdi,
// internal/modifier/cdi.go). The plain nvidia handler's default mode auto
// gives such a pod jit-cdi (toolkit 1.18 and later) or legacy (before), a
// spec built from the driver that lacks nodeprep's Vulkan and EGL mounts
// (internal/info/auto.go). It is podpath.PatchedClass on the node side.
const PatchedRuntimeClass = "nvidia-cdi"

// envvarStrategy reports whether the plugin's device-list strategy (a
// comma list) hands devices over through NVIDIA_VISIBLE_DEVICES or the
// volume-mount list, which only the NVIDIA runtime reads.
func envvarStrategy(listStrategy string) bool {
	for _, s := range strings.Split(listStrategy, ",") {
		switch strings.TrimSpace(s) {
		case ListStrategyEnvvar, ListStrategyVolumeMounts:
			return true
		}
	}
	return false
}

// runtimeClassBypass says why a pod with runtimeClassName rc does not get
// the patched spec from the NVIDIA runtime on a pool node ("" when it
// does), with the fix. plugin is true for the device plugin's own pods,
// which ask for NVIDIA_VISIBLE_DEVICES=all and need the driver's NVML.
func runtimeClassBypass(rc *string, plugin bool) (reason, fix string) {
	what, lacks := "the pod", "no Vulkan or EGL"
	if plugin {
		what, lacks = "the plugin", "no NVML on NixOS, where the runtime's own driver search finds none"
	}
	fix = fmt.Sprintf("set runtimeClassName: %s", PatchedRuntimeClass)
	switch name := deref(rc, ""); name {
	case PatchedRuntimeClass:
		return "", ""
	case "":
		return fmt.Sprintf("%s has no runtimeClassName: the node's default runtime (runc) ignores NVIDIA_VISIBLE_DEVICES, so it gets no driver files at all", what), fix
	case "nvidia":
		return fmt.Sprintf("runtimeClassName nvidia runs the NVIDIA runtime in its default mode auto, which for NVIDIA_VISIBLE_DEVICES picks jit-cdi (toolkit 1.18 and later) or legacy (before) and never reads the spec nodeprep patched: %s gets %s", what, lacks), fix
	default:
		return fmt.Sprintf("runtimeClassName %s is not %s, the class whose pods nodeprep's nodes prove get the patched spec", name, PatchedRuntimeClass), fix
	}
}

// withPodPath adds a runtime-class problem (runtimeClassBypass) to the
// on-prem cell of cells (the pool's nodes: the fallback's cloud nodes have
// a runtime of their own). A workload's runtime class matters only when
// the plugin hands devices over with an envvar strategy (the CDI
// strategies are injected by containerd itself, on any handler); the
// plugin's own always does.
func (c *checker) withPodPath(cells []Cell, rc *string, plugin bool) []Cell {
	if !plugin && !envvarStrategy(c.listStrategy) {
		return cells
	}
	reason, fix := runtimeClassBypass(c.handlerOf(rc), plugin)
	if reason == "" {
		return cells
	}
	return failOnPrem(cells, reason, fix)
}

// failOnPrem fails the on-prem cell of cells with reason and fix, added
// after what it already failed on.
func failOnPrem(cells []Cell, reason, fix string) []Cell {
	for i := range cells {
		if cells[i].Column != ColumnOnPrem {
			continue
		}
		if cells[i].Verdict == VerdictFail {
			cells[i].Reason += "; " + reason
			cells[i].Fix += "; " + fix
		} else {
			cells[i] = Cell{Column: ColumnOnPrem, Verdict: VerdictFail, Reason: reason, Fix: fix}
		}
	}
	return cells
}

// pluginListStrategy is the device-list strategy of the first device
// plugin among objs (chart values or a DaemonSet), else the plugin's
// default, envvar: what GPU workloads' pods get their devices by.
func pluginListStrategy(objs []Object) string {
	for i := range objs {
		o := &objs[i]
		switch {
		case o.Values != nil:
			return deref(o.Values.DeviceListStrategy, ListStrategyEnvvar)
		case o.PodSpec != nil && o.Kind == "DaemonSet" && isDevicePlugin(o.PodSpec):
			return daemonSetSettings(o.PodSpec).listStrategy
		}
	}
	return ListStrategyEnvvar
}
