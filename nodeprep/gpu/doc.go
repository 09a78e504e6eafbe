// Package gpu builds the GPU inventory from NVML (github.com/NVIDIA/go-nvml,
// only through nvml.Interface) and provides the simulated DGX servers that
// let the whole pipeline run where there is no GPU.
//
// Build reads an Inventory from any nvml.Interface; FromNVML does so from
// the host's libnvidia-ml.so.1 and Simulate from a built-in simulated
// server (Simulated, SimulatedNames, and SimulatedFaults for a server whose
// NVLink fabric is not registered). Init failures come back as errors
// marked fault.ErrUnavailable with a sentinel (ErrLibraryNotFound,
// ErrDriverNotLoaded, ErrVersionMismatch, ErrInit); a failure on one GPU
// is reported in that GPU's Health, never as an error, and so is an
// NVLink fabric registration that is not complete (Fabric, FabricProblems).
package gpu
