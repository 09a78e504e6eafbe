// Package gpu builds the GPU inventory from NVML (github.com/NVIDIA/go-nvml,
// only through nvml.Interface) and provides the simulated DGX servers that
// let the whole pipeline run where there is no GPU.
package gpu
