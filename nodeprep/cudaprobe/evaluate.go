package cudaprobe

import (
	"fmt"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// Kinds of CUDA finding (Finding.Kind); nodeprep/selftest reports them as
// its reason kinds.
const (
	KindNotFound      = "cuda-not-found"      // libcuda could not be opened, or is not a CUDA driver
	KindInitFailed    = "cuda-init-failed"    // cuInit or cuDeviceGetCount failed
	KindMissingDevice = "cuda-missing-device" // no CUDA device with a GPU's UUID, or more than one
	KindFailed        = "cuda-failed"         // a device's context, memory, JIT or kernel failed
)

// Finding is one CUDA failure, with what to do in its Message.
type Finding struct {
	Kind    string // one of the Kind* constants
	Message string // what failed, the CUDA error by name, and the fix
}

// GPUResult is how one inventory GPU fared under CUDA.
type GPUResult struct {
	GPU    int    // the inventory GPU's Index
	UUID   string // its NVML UUID
	Device *int   // the CUDA ordinal with that UUID; nil when none
	OK     bool   // that device passed every step
}

// Evaluate matches the report's devices to the GPUs by UUID, as the
// Vulkan adapters are matched (cuDeviceGetUuid_v2 and NVML give the same
// bytes): every GPU needs exactly one CUDA device with its UUID, and that
// device's memory round trip and kernel must verify. A probe that stopped
// before the devices (Stage set) gives one finding, not one per GPU; the
// first finding of KindNotFound means the library could not be used at
// all. A device no GPU claims is ignored (a GPU left out of the
// inventory is the inventory's concern).
func Evaluate(gpus []gpu.GPU, rep *Report) ([]GPUResult, []Finding) {
	results := make([]GPUResult, len(gpus))
	for i, g := range gpus {
		results[i] = GPUResult{GPU: g.Index, UUID: g.UUID}
	}
	if rep.Stage != "" {
		return results, []Finding{stageFinding(rep)}
	}
	var out []Finding
	for i, g := range gpus {
		var same []int
		for k := range rep.Devices {
			if strings.EqualFold(rep.Devices[k].UUID, g.UUID) {
				same = append(same, k)
			}
		}
		switch len(same) {
		case 0:
			out = append(out, Finding{KindMissingDevice, fmt.Sprintf("GPU %d (%s): no CUDA device has its UUID; %s lists %s", g.Index, g.UUID, rep.Library, listDevices(rep))})
			continue
		case 1:
		default:
			out = append(out, Finding{KindMissingDevice, fmt.Sprintf("GPU %d (%s): %d CUDA devices report its UUID (ordinals %v): the driver's device list is inconsistent", g.Index, g.UUID, len(same), same)})
			continue
		}
		d := &rep.Devices[same[0]]
		ord := d.Ordinal
		results[i].Device = &ord
		results[i].OK = d.OK()
		if !d.OK() {
			out = append(out, Finding{KindFailed, fmt.Sprintf("GPU %d (%s), CUDA device %d: %s", g.Index, g.UUID, d.Ordinal, deviceProblem(d, rep.UVM))})
		}
	}
	return results, out
}

func listDevices(rep *Report) string {
	if len(rep.Devices) == 0 {
		return fmt.Sprintf("no device (cuDeviceGetCount: %d)", rep.Count)
	}
	var s []string
	for _, d := range rep.Devices {
		u := d.UUID
		if u == "" {
			u = "no UUID (" + d.Step + " failed)"
		}
		s = append(s, fmt.Sprintf("%d %s", d.Ordinal, u))
	}
	return "devices " + strings.Join(s, ", ")
}

// stageFinding is the one finding of a probe that stopped before the devices.
func stageFinding(rep *Report) Finding {
	switch rep.Stage {
	case StageLoad, StageSym:
		hint := "name it with --cuda-lib or selftest.cudaLib"
		if strings.Contains(rep.Library, "/") {
			hint = "check the path --cuda-lib or selftest.cudaLib gives"
		}
		return Finding{KindNotFound, fmt.Sprintf("the CUDA driver library %s cannot be used: %s (%s; on NixOS %s)", rep.Library, rep.Error, hint, NixOSLibrary)}
	}
	msg := fmt.Sprintf("%s failed: %s", rep.Stage, describe(rep.Code, rep.Result, rep.Error))
	if rep.Code == ErrorNoDevice || rep.Code == ErrorUnknown {
		msg += uvmState(rep.UVM, rep.UVMTools)
	}
	if fix := Fix(rep.Code, rep.UVM); fix != "" {
		msg += ": " + fix
	}
	return Finding{KindInitFailed, msg}
}

func uvmState(uvm, tools bool) string {
	switch {
	case !uvm && !tools:
		return " (/dev/nvidia-uvm and /dev/nvidia-uvm-tools are missing)"
	case !uvm:
		return " (/dev/nvidia-uvm is missing)"
	case !tools:
		return " (/dev/nvidia-uvm-tools is missing)"
	}
	return ""
}

// describe is "CUDA_ERROR_X (802, system not yet initialized)".
func describe(code int, result, text string) string {
	if result == "" {
		result = ResultName(code)
	}
	if text != "" {
		return fmt.Sprintf("%s (%d, %s)", result, code, text)
	}
	return fmt.Sprintf("%s (%d)", result, code)
}

// deviceProblem says what failed on a device, with the fix.
func deviceProblem(d *Device, uvm bool) string {
	switch {
	case d.Step != "" && d.Code == 0:
		return d.Step + ": " + d.Error
	case d.Step != "":
		msg := d.Step + " failed: " + describe(d.Code, d.Result, d.Error)
		if d.JITLog != "" {
			msg += "; the JIT compiler said: " + strings.Join(strings.Fields(d.JITLog), " ")
		}
		if fix := Fix(d.Code, uvm); fix != "" {
			msg += ": " + fix
		}
		return msg
	case !d.Memory:
		return "the memory round trip did not verify"
	case d.Wrong > 0:
		return fmt.Sprintf("the PTX kernel ran but wrote %d of %d elements wrong (%s): the device or its driver computes wrongly", d.Wrong, Elements, d.FirstWrong)
	}
	return "the PTX kernel did not run"
}
