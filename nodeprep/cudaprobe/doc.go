// Package cudaprobe is the CUDA driver probe: in the probe child it
// dlopens the CUDA driver library (libcuda.so.1) and, for every device the
// driver lists, all at once, reads its UUID, makes a context, copies a
// buffer to the device and back and checks it, and loads a small kernel
// from PTX (through the driver's JIT compiler, libnvidia-ptxjitcompiler)
// and launches it, checking what it wrote (Probe, Serve, ServeOnPipe).
// Evaluate then matches the devices to the NVML inventory by UUID, as the
// self-test matches Vulkan adapters, and names each failure by its CUDA
// error with the fix (fabric manager, the UVM module, a driver/library
// mismatch). nodeprep/selftest runs it in a child of its own beside the
// Vulkan and EGL probes' child; docs/commands.md, "The CUDA probe", describes it.
package cudaprobe
