package gpu

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The fabric states (Fabric.State), NVML_GPU_FABRIC_STATE_* of nvml.h.
const (
	FabricNotSupported = "not-supported" // no NVLink fabric (PCIe cards), or a driver without the call
	FabricNotStarted   = "not-started"   // the fabric manager has not begun registering the GPU
	FabricInProgress   = "in-progress"   // registration under way
	FabricCompleted    = "completed"     // registered; Status says with what result
)

// FabricFix is what every fabric health reason ends with: how to get the
// fabric manager to register the GPUs, and how to look.
const FabricFix = "start the NVIDIA fabric manager (NixOS: hardware.nvidia.datacenter.enable = true, which runs nvidia-fabricmanager.service; systemctl status nvidia-fabricmanager) and check with nvidia-smi -q | grep -A2 Fabric"

// FabricLogFix is what the reason of a registration that completed badly
// ends with: where the fabric manager says why.
const FabricLogFix = "the fabric manager's log says why (journalctl -u nvidia-fabricmanager; NixOS: hardware.nvidia.datacenter.enable runs it); check with nvidia-smi -q | grep -A2 Fabric"

// fabricStates names nvmlGpuFabricState_t.
var fabricStates = map[uint8]string{
	nvml.GPU_FABRIC_STATE_NOT_SUPPORTED: FabricNotSupported,
	nvml.GPU_FABRIC_STATE_NOT_STARTED:   FabricNotStarted,
	nvml.GPU_FABRIC_STATE_IN_PROGRESS:   FabricInProgress,
	nvml.GPU_FABRIC_STATE_COMPLETED:     FabricCompleted,
}

// fabricSummaries names NVML_GPU_FABRIC_HEALTH_SUMMARY_* (0, not
// supported, is "").
var fabricSummaries = map[uint8]string{
	nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY:          "healthy",
	nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY:        "unhealthy",
	nvml.GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY: "limited-capacity",
}

// newFabric turns NVML's fields into a Fabric: the status only once
// completed, the health mask only once completed and when hasMask (the
// v2 and later structures carry one).
func newFabric(state uint8, status uint32, mask uint32, hasMask bool, summary uint8) *Fabric {
	f := &Fabric{State: fabricStates[state]}
	if f.State == "" {
		f.State = fmt.Sprintf("unknown (%d)", state)
	}
	if state != nvml.GPU_FABRIC_STATE_COMPLETED {
		return f
	}
	st := int32(status)
	f.Status = &st
	if hasMask {
		f.HealthMask = &mask
	}
	f.HealthSummary = fabricSummaries[summary]
	return f
}

// readFabric reads the GPU's fabric registration. From the real library
// (r.sym.check) it asks nvmlDeviceGetGpuFabricInfoV for the v3 structure,
// then v2 when the driver answers ERROR_ARGUMENT_VERSION_MISMATCH (drivers
// before v3), then the unversioned nvmlDeviceGetGpuFabricInfo; a driver with
// neither function, or NOT_SUPPORTED, is FabricNotSupported. go-nvml's
// GpuFabricInfoHandler calls the real library with the real device handle,
// so a mock device (the simulated servers) cannot answer it: those are read
// through GetGpuFabricInfo_v4, which carries the same fields.
func (r *reader) readFabric(dev nvml.Device) {
	g := r.g
	notSupported := func(ret nvml.Return) bool {
		if absent(ret) {
			g.Fabric = &Fabric{State: FabricNotSupported}
			return true
		}
		return false
	}
	if !r.sym.check {
		info, ret := dev.GetGpuFabricInfo_v4()
		if notSupported(ret) || !r.ok("fabric info", ret) {
			return
		}
		g.Fabric = newFabric(info.State, info.Status, info.HealthMask, true, info.HealthSummary)
		return
	}
	if r.sym.has("nvmlDeviceGetGpuFabricInfoV") {
		v := dev.GetGpuFabricInfoV()
		info3, ret := v.V3()
		if ret == nvml.SUCCESS {
			g.Fabric = newFabric(info3.State, info3.Status, info3.HealthMask, true, info3.HealthSummary)
			return
		}
		if ret == nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			var info2 nvml.GpuFabricInfo_v2
			if info2, ret = v.V2(); ret == nvml.SUCCESS {
				g.Fabric = newFabric(info2.State, info2.Status, info2.HealthMask, true, 0)
				return
			}
		}
		if ret != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			if !notSupported(ret) {
				r.ok("fabric info", ret)
			}
			return
		}
	}
	if !r.sym.has("nvmlDeviceGetGpuFabricInfo") {
		g.Fabric = &Fabric{State: FabricNotSupported}
		return
	}
	info, ret := dev.GetGpuFabricInfo()
	if notSupported(ret) || !r.ok("fabric info", ret) {
		return
	}
	g.Fabric = newFabric(info.State, info.Status, 0, false, 0)
}

// fabricField is one field of the fabric health mask that, set to bad,
// makes the GPU unhealthy (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*).
type fabricField struct {
	shift, width, bad uint32
	what              string
}

var fabricFields = []fabricField{
	{nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE, "NVLink bandwidth degraded"},
	{nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_TRUE, "route recovery in progress"},
	{nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE, "route unhealthy"},
	{nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ACCESS_TIMEOUT_RECOVERY, nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE, "access timeout recovery in progress"},
}

// incorrectConfigurations names NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*
// values that are a problem (1, NONE, is a correct configuration).
var incorrectConfigurations = map[uint32]string{
	2: "incorrect configuration: system GUID",
	3: "incorrect configuration: chassis serial number",
	4: "incorrect configuration: no partition",
	5: "incorrect configuration: insufficient NVLinks",
	6: "incorrect configuration: incompatible GPU firmware",
	7: "incorrect configuration: invalid location",
	8: "incorrect configuration: GPU state invalid",
}

// FabricProblems decodes a fabric health mask into what is wrong, in the
// order of nvml.h's fields ("NVLink bandwidth degraded", "route
// unhealthy", "incorrect configuration: insufficient NVLinks", ...); none
// for a healthy mask or one whose fields the driver does not support (0).
func FabricProblems(mask uint32) []string {
	var out []string
	for _, f := range fabricFields {
		if mask>>f.shift&f.width == f.bad {
			out = append(out, f.what)
		}
	}
	c := mask >> nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION & nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION
	if what, ok := incorrectConfigurations[c]; ok {
		out = append(out, what)
	} else if c > 8 {
		out = append(out, fmt.Sprintf("incorrect configuration (%d)", c))
	}
	return out
}

// fabricVerdict is the health reason of a GPU's fabric ("" when it is
// fine): registration not started or in progress, completed with an error
// status, or completed with problems in the health mask or an unhealthy
// summary. A GPU without a fabric (FabricNotSupported) is fine.
func fabricVerdict(f *Fabric) string {
	if f == nil {
		return ""
	}
	switch f.State {
	case FabricNotSupported:
		return ""
	case FabricNotStarted:
		return "NVLink fabric registration not started: CUDA fails with 802 (system not yet initialized) until the fabric manager registers the GPU; " + FabricFix
	case FabricInProgress:
		return "NVLink fabric registration in progress: CUDA fails with 802 (system not yet initialized) until it completes; " + FabricFix
	case FabricCompleted:
	default:
		return fmt.Sprintf("NVLink fabric state %s; %s", f.State, FabricFix)
	}
	if f.Status != nil && *f.Status != 0 {
		return fmt.Sprintf("NVLink fabric registration completed with error %s: CUDA cannot use the GPU; %s", returnText(*f.Status), FabricLogFix)
	}
	var problems []string
	if f.HealthMask != nil {
		problems = FabricProblems(*f.HealthMask)
	}
	if f.HealthSummary == "unhealthy" || f.HealthSummary == "limited-capacity" {
		problems = append(problems, "health summary "+f.HealthSummary)
	}
	if len(problems) > 0 {
		return fmt.Sprintf("NVLink fabric degraded (%s); %s", strings.Join(problems, ", "), FabricLogFix)
	}
	return ""
}

// returnText is an nvmlReturn_t as NVML names it.
func returnText(code int32) string {
	return fmt.Sprintf("%v (%d)", nvml.Return(code), code)
}
