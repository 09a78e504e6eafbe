package cluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The device plugin's device-list strategies (NVIDIA/k8s-device-plugin
// api/config/v1/consts.go) and device-ID strategies.
const (
	ListStrategyEnvvar         = "envvar"
	ListStrategyVolumeMounts   = "volume-mounts"
	ListStrategyCDIAnnotations = "cdi-annotations"
	ListStrategyCDICRI         = "cdi-cri"
	IDStrategyUUID             = "uuid"
	IDStrategyIndex            = "index"
)

// chartDefaultAffinity is the device plugin chart's default affinity
// (values.yaml): a node must carry one of Node Feature Discovery's NVIDIA
// PCI or CPU labels, or nvidia.com/gpu.present=true. It applies when a
// values file sets neither affinity nor nodeSelector... and also when it
// sets only nodeSelector: Helm merges the user's values over the chart's.
var chartDefaultAffinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
	RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "feature.node.kubernetes.io/pci-10de.present", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "feature.node.kubernetes.io/cpu-model.vendor_id", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA"}}}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.present", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}},
	}},
}}

// chartDefaultTolerations are the chart's default tolerations (values.yaml).
var chartDefaultTolerations = []corev1.Toleration{
	{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
	{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// valuesPodSpec is the scheduling part of the DaemonSet the chart renders
// from v merged over the chart's defaults.
func valuesPodSpec(v *DevicePluginValues) *corev1.PodSpec {
	ps := &corev1.PodSpec{NodeSelector: v.NodeSelector, Affinity: v.Affinity, Tolerations: v.Tolerations}
	if ps.Affinity == nil {
		ps.Affinity = chartDefaultAffinity
	}
	if v.Tolerations == nil {
		ps.Tolerations = chartDefaultTolerations
	}
	return ps
}

type pluginSettings struct {
	listStrategy, idStrategy, driverRoot string
	where                                string // "values" or "DaemonSet"
}

// isDevicePlugin reports whether a DaemonSet's pods run NVIDIA's device
// plugin (an image or container named k8s-device-plugin / nvidia-device-plugin).
func isDevicePlugin(ps *corev1.PodSpec) bool {
	for _, c := range ps.Containers {
		if strings.Contains(c.Image, "k8s-device-plugin") || strings.Contains(c.Image, "nvidia-device-plugin") || strings.Contains(c.Name, "nvidia-device-plugin") {
			return true
		}
	}
	return false
}

// daemonSetSettings reads the plugin's strategies from its container's
// environment (DEVICE_LIST_STRATEGY, DEVICE_ID_STRATEGY, NVIDIA_DRIVER_ROOT)
// or flags (--device-list-strategy, ...), with the plugin's defaults.
func daemonSetSettings(ps *corev1.PodSpec) pluginSettings {
	s := pluginSettings{listStrategy: ListStrategyEnvvar, idStrategy: IDStrategyUUID, driverRoot: "/", where: "DaemonSet"}
	for _, c := range ps.Containers {
		if !isDevicePlugin(&corev1.PodSpec{Containers: []corev1.Container{c}}) {
			continue
		}
		for _, e := range c.Env {
			switch e.Name {
			case "DEVICE_LIST_STRATEGY":
				s.listStrategy = e.Value
			case "DEVICE_ID_STRATEGY":
				s.idStrategy = e.Value
			case "NVIDIA_DRIVER_ROOT":
				s.driverRoot = e.Value
			}
		}
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if k, v, ok := strings.Cut(a, "="); ok {
				switch k {
				case "--device-list-strategy":
					s.listStrategy = v
				case "--device-id-strategy":
					s.idStrategy = v
				case "--nvidia-driver-root":
					s.driverRoot = v
				}
			}
		}
	}
	return s
}

// devicePlugin judges the device plugin: it must land on the pool and on
// every GPU NodePool, on no other NodePool, and its strategies must hand
// devices over by names the nodes' CDI spec has.
func (c *checker) devicePlugin(ps *corev1.PodSpec, s pluginSettings) []Cell {
	on := Cell{Column: ColumnOnPrem, Verdict: VerdictOK}
	var why, fixes []string
	if reason, fix := schedulable(ps, c.onprem, "pool nodes"); reason != "" {
		why = append(why, "does not land on pool nodes: "+reason)
		fixes = append(fixes, fix)
	}
	for _, ls := range strings.Split(s.listStrategy, ",") {
		switch strings.TrimSpace(ls) {
		case ListStrategyCDIAnnotations, ListStrategyCDICRI:
			why = append(why, fmt.Sprintf("deviceListStrategy %s makes pods get the plugin's own CDI spec (kind k8s.device-plugin.nvidia.com/gpu), which the plugin rewrites without Vulkan or EGL mounts whenever it starts: nodeprep's re-patch on write (the NixOS path unit, nodeprep cdi watch) patches it again, but a pod created before that pass ends (tens of milliseconds after each plugin start; for good on a node that runs no re-patch) gets no Vulkan or EGL", ls))
			fixes = append(fixes, fmt.Sprintf("set deviceListStrategy: envvar with runtimeClassName: %s, so the NVIDIA runtime resolves devices from the spec nodeprep patches at boot (kind nvidia.com/gpu)", PatchedRuntimeClass))
		}
	}
	if len(c.pool.DeviceNames) > 0 && !slices.Contains(c.pool.DeviceNames, s.idStrategy) {
		why = append(why, fmt.Sprintf("deviceIDStrategy %s, but the nodes' CDI spec names devices by %s", s.idStrategy, strings.Join(c.pool.DeviceNames, ", ")))
		fixes = append(fixes, fmt.Sprintf("set deviceIDStrategy: %s (or add %q to cdi.deviceNames)", c.pool.DeviceNames[0], s.idStrategy))
	}
	if c.pool.DriverRoot != "" && c.pool.DriverRoot != "/" && s.driverRoot != c.pool.DriverRoot {
		why = append(why, fmt.Sprintf("driver root %s, but the nodes' driver is under %s", s.driverRoot, c.pool.DriverRoot))
		fixes = append(fixes, fmt.Sprintf("set nvidiaDriverRoot: %s", c.pool.DriverRoot))
	}
	if len(why) > 0 {
		on = Cell{Column: ColumnOnPrem, Verdict: VerdictFail, Reason: strings.Join(why, "; "), Fix: strings.Join(fixes, "; ")}
	}
	cells := []Cell{on}
	for _, np := range c.nodePools {
		col := "nodepool/" + np.Name
		reason, fix := schedulable(ps, fallbackNode(np, wanted(ps)), np.Name+" nodes")
		switch gpu := c.pool.isGPUNodePool(np); {
		case gpu && reason != "":
			cells = append(cells, Cell{Column: col, Verdict: VerdictFail, Reason: "does not land on the fallback's GPU nodes, which then advertise no nvidia.com/gpu: " + reason, Fix: fix})
		case gpu:
			cells = append(cells, Cell{Column: col, Verdict: VerdictOK})
		case reason == "":
			cells = append(cells, Cell{Column: col, Verdict: VerdictFail, Reason: "lands on this NodePool's nodes, which have no GPU", Fix: "pin the plugin to the pool label with nodeSelector"})
		default:
			cells = append(cells, Cell{Column: col, Verdict: VerdictOK, Reason: "does not land on these non-GPU nodes"})
		}
	}
	return cells
}
