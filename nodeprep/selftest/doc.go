// Package selftest proves that a node's GPUs work for Vulkan and EGL
// workloads the way wgpu would find them: it probes the Vulkan adapters and
// EGL devices in a child process, runs a compute dispatch on each adapter,
// and matches the adapters to the GPUs of an NVML inventory by UUID.
//
// The probe is a small cgo shim (shim.c) that dlopens the Vulkan loader
// (default libvulkan.so.1) and libEGL.so.1 and resolves every entry point at
// run time, so the nodeprep binary links neither library and still runs,
// and reports the dlopen error, on a host that lacks them.
//
// The two halves:
//
//   - Run (parent side) starts a probe child (WithCommand: nodeprep-probe,
//     or a re-exec of nodeprep) with the ProbeRequests, bounded by a timeout, decodes the
//     child's JSON report and calls Evaluate. A hung driver is killed with
//     its whole process group; a crash becomes a reason naming the signal.
//   - ServeProbe (child side) runs one probe and writes its JSON report.
//
// Evaluate is pure: given an inventory and the two probe reports it gives
// the verdict, so the matching rules are unit-tested without a driver.
//
// The package never reads flags, the environment or os.Stdout: the command
// layer passes the executable, the environment and the writer in.
package selftest
