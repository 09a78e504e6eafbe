package cudaprobe

/*
#cgo CFLAGS: -O2 -Wall
#cgo LDFLAGS: -ldl -lpthread
#include <stdlib.h>
#include "probe.h"
*/
import "C"

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"time"
	"unsafe"
)

//go:embed pattern.ptx
var patternPTX string

// UVMNodes are the device nodes of NVIDIA's unified memory module
// (nvidia-uvm) that every CUDA context needs and Vulkan and EGL do not.
var UVMNodes = []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// Probe runs the CUDA probe in this process: dlopen req.Library, cuInit,
// cuDeviceGetCount, then every device on a thread of its own (UUID,
// context, verified memory round trip, the PTX kernel launched and its
// result verified). Failures are in the report. Call it only in a child
// process: a driver can hang or crash, and it stays loaded.
func Probe(req Request) *Report {
	start := time.Now()
	seed := req.Seed
	if seed == 0 {
		seed = uint32(time.Now().UnixNano()) | 1
	}
	r := &Report{Library: req.Library, Devices: []Device{}, Elements: Elements, Seed: seed}
	_, err := os.Stat(UVMNodes[0])
	r.UVM = err == nil
	_, err = os.Stat(UVMNodes[1])
	r.UVMTools = err == nil

	rep := (*C.struct_np_cu_report)(C.calloc(1, C.sizeof_struct_np_cu_report))
	defer C.free(unsafe.Pointer(rep))
	lib := C.CString(req.Library)
	defer C.free(unsafe.Pointer(lib))
	ptx := C.CString(patternPTX)
	defer C.free(unsafe.Pointer(ptx))
	rc := C.np_cu_probe(lib, ptx, C.uint(seed), C.uint(Elements), rep)

	r.LoadMS, r.InitMS, r.CountMS, r.DevicesMS = round3(float64(rep.load_ms)), round3(float64(rep.init_ms)), round3(float64(rep.count_ms)), round3(float64(rep.devices_ms))
	if v := int(rep.driver_version); v > 0 {
		r.DriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	r.Count = int(rep.count)
	if rc != 0 {
		r.Stage = C.GoString(rep.fail.step)
		switch r.Stage {
		case StageLoad, StageSym:
			r.Error = C.GoString(&rep.dlerr[0])
		default:
			r.Code = int(rep.fail.result)
			r.Result, r.Error = name(r.Code, C.GoString(&rep.fail.name[0]), C.GoString(&rep.fail.text[0]))
		}
		r.TotalMS = ms(time.Since(start))
		return r
	}
	for i := 0; i < int(rep.probed); i++ {
		d := &rep.dev[i]
		dev := Device{
			Ordinal: int(d.ordinal),
			Name:    C.GoString(&d.name[0]),
			Memory:  d.memory_verified != 0,
			Timings: DeviceTimings{
				UUIDMS: round3(float64(d.uuid_ms)), ContextMS: round3(float64(d.context_ms)),
				MemoryMS: round3(float64(d.memory_ms)), ModuleMS: round3(float64(d.module_ms)),
				LaunchMS: round3(float64(d.launch_ms)), VerifyMS: round3(float64(d.verify_ms)),
				TotalMS: round3(float64(d.total_ms)),
			},
		}
		if d.has_uuid != 0 {
			var u [16]byte
			for k := range u {
				u[k] = byte(d.uuid[k])
			}
			dev.UUID = FormatUUID(u)
		}
		if d.cc_major > 0 {
			dev.ComputeCapability = fmt.Sprintf("%d.%d", int(d.cc_major), int(d.cc_minor))
		}
		if d.fail.step != nil {
			dev.Step = C.GoString(d.fail.step)
			dev.Code = int(d.fail.result)
			dev.Result, dev.Error = name(dev.Code, C.GoString(&d.fail.name[0]), C.GoString(&d.fail.text[0]))
			if dev.Code == 0 { // the round trip's own check: no CUresult
				dev.Result, dev.Error = "", C.GoString(&d.fail.text[0])
			}
			dev.JITLog = C.GoString(&d.fail.log[0])
		}
		if d.launched != 0 {
			dev.Wrong = int(d.wrong)
			dev.Kernel = d.wrong == 0 && dev.Step == ""
			if d.wrong > 0 {
				dev.FirstWrong = fmt.Sprintf("element %d: got 0x%08x, want 0x%08x", uint32(d.first_index), uint32(d.first_got), uint32(d.first_want))
			}
		}
		r.Devices = append(r.Devices, dev)
	}
	r.TotalMS = ms(time.Since(start))
	return r
}

// name returns a CUresult's name and text: the library's own
// (cuGetErrorName), else this package's table, else "CUDA error N".
func name(code int, libName, libText string) (string, string) {
	n, text := libName, libText
	if n == "" {
		n = ResultName(code)
	}
	if text == "" {
		text = resultText[code]
	}
	return n, text
}

// FormatUUID formats 16 UUID bytes as NVML does, "GPU-" and the 8-4-4-4-12
// hex groups.
func FormatUUID(b [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
