// Package gpu builds the GPU inventory from NVML (github.com/NVIDIA/go-nvml,
// only through nvml.Interface) and provides the simulated DGX servers that
// let the whole pipeline run where there is no GPU.
//
// Build reads an Inventory from any nvml.Interface; FromNVML does so from
// the host's libnvidia-ml.so.1 and Simulate from a built-in simulated
// server (Simulated, SimulatedNames). Init failures come back as errors
// marked fault.ErrUnavailable with a sentinel (ErrLibraryNotFound,
// ErrDriverNotLoaded, ErrVersionMismatch, ErrInit); a failure on one GPU
// is reported in that GPU's Health, never as an error.
package gpu
