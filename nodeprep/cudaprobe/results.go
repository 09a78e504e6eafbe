package cudaprobe

import "strconv"

// The CUresults whose causes nodeprep names (cuda.h's CUresult enum, the
// CUDA driver API reference, "Error Handling").
const (
	ErrorNoDevice             = 100 // CUDA_ERROR_NO_DEVICE
	ErrorStubLibrary          = 34  // CUDA_ERROR_STUB_LIBRARY: the toolkit's stub libcuda.so
	ErrorJITCompilerNotFound  = 221 // CUDA_ERROR_JIT_COMPILER_NOT_FOUND: no libnvidia-ptxjitcompiler
	ErrorSystemNotReady       = 802 // CUDA_ERROR_SYSTEM_NOT_READY: the fabric manager has not finished
	ErrorSystemDriverMismatch = 803 // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: libcuda and the kernel module differ
	ErrorCompatNotSupported   = 804 // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: forward compatibility on a GPU without it
	ErrorUnknown              = 999 // CUDA_ERROR_UNKNOWN
)

// resultNames are cuda.h's names of the CUresults a probe can meet.
var resultNames = map[int]string{
	0:                         "CUDA_SUCCESS",
	1:                         "CUDA_ERROR_INVALID_VALUE",
	2:                         "CUDA_ERROR_OUT_OF_MEMORY",
	3:                         "CUDA_ERROR_NOT_INITIALIZED",
	4:                         "CUDA_ERROR_DEINITIALIZED",
	ErrorStubLibrary:          "CUDA_ERROR_STUB_LIBRARY",
	46:                        "CUDA_ERROR_DEVICE_UNAVAILABLE",
	ErrorNoDevice:             "CUDA_ERROR_NO_DEVICE",
	101:                       "CUDA_ERROR_INVALID_DEVICE",
	200:                       "CUDA_ERROR_INVALID_IMAGE",
	201:                       "CUDA_ERROR_INVALID_CONTEXT",
	209:                       "CUDA_ERROR_NO_BINARY_FOR_GPU",
	214:                       "CUDA_ERROR_ECC_UNCORRECTABLE",
	218:                       "CUDA_ERROR_INVALID_PTX",
	ErrorJITCompilerNotFound:  "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
	222:                       "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	303:                       "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
	304:                       "CUDA_ERROR_OPERATING_SYSTEM",
	500:                       "CUDA_ERROR_NOT_FOUND",
	700:                       "CUDA_ERROR_ILLEGAL_ADDRESS",
	702:                       "CUDA_ERROR_LAUNCH_TIMEOUT",
	719:                       "CUDA_ERROR_LAUNCH_FAILED",
	800:                       "CUDA_ERROR_NOT_PERMITTED",
	801:                       "CUDA_ERROR_NOT_SUPPORTED",
	ErrorSystemNotReady:       "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrorSystemDriverMismatch: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrorCompatNotSupported:   "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	ErrorUnknown:              "CUDA_ERROR_UNKNOWN",
}

// resultText is the driver's text for the results whose fix is ours, for
// a library without cuGetErrorString.
var resultText = map[int]string{
	ErrorNoDevice:             "no CUDA-capable device is detected",
	ErrorSystemNotReady:       "system not yet initialized",
	ErrorSystemDriverMismatch: "system has unsupported display driver / cuda driver combination",
	ErrorCompatNotSupported:   "forward compatibility was attempted on non supported HW",
	ErrorJITCompilerNotFound:  "PTX JIT compiler library not found",
	ErrorUnknown:              "unknown error",
}

// ResultName is cuda.h's name of a CUresult ("CUDA_ERROR_SYSTEM_NOT_READY"),
// or "CUDA error N" for one this package does not know.
func ResultName(code int) string {
	if n, ok := resultNames[code]; ok {
		return n
	}
	return "CUDA error " + strconv.Itoa(code)
}

// Fix says what to do about a CUresult, given whether /dev/nvidia-uvm
// exists where the probe ran ("" when nodeprep knows no specific fix).
func Fix(code int, uvm bool) string {
	switch code {
	case ErrorSystemNotReady:
		return "the NVSwitch fabric manager has not registered the GPUs (NVML can still say healthy): start it and wait for it; on NixOS set hardware.nvidia.datacenter.enable = true (the nvidia-fabricmanager unit); check with `nvidia-smi -q | grep -A2 Fabric` (State: Completed, Status: Success)"
	case ErrorNoDevice, ErrorUnknown:
		if !uvm {
			return "/dev/nvidia-uvm is missing: the nvidia-uvm kernel module is not loaded (load it: modprobe nvidia-uvm, or nvidia-modprobe -u -c=0; on NixOS it loads with the driver), and a CDI spec generated before it was loaded lacks /dev/nvidia-uvm and /dev/nvidia-uvm-tools: regenerate the spec after loading it"
		}
		return ""
	case ErrorSystemDriverMismatch:
		return "libcuda.so.1 and the loaded nvidia kernel module are of different driver versions: a driver update without a reboot, or a container image that brings its own libcuda; reboot, or use the driver's own libcuda (the CDI spec's)"
	case ErrorCompatNotSupported:
		return "a CUDA forward-compatibility libcuda (cuda-compat) was loaded on a GPU that does not support it, or against a driver it does not pair with: remove the compat library from the library path and use the driver's own libcuda"
	case ErrorStubLibrary:
		return "the CUDA toolkit's stub libcuda.so was loaded instead of the driver's: point --cuda-lib (selftest.cudaLib) at the driver's libcuda.so.1"
	case ErrorJITCompilerNotFound:
		return "libnvidia-ptxjitcompiler.so.1 cannot be loaded: the driver's JIT compiler must be beside libcuda (in a container, mounted by the CDI spec)"
	}
	return ""
}
