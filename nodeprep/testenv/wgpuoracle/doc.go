// Package wgpuoracle holds only tests: nodeprep's self-test against real
// wgpu. Deno's WebGPU (wgpu-core and wgpu-hal, pinned in
// testdata/tools/deno) runs testdata/wgpu-oracle/probe.js beside
// `nodeprep selftest` on a corpus of driver conditions — lavapipe with the
// adapter properties wgpu judges changed (the fake ICD wrapping it,
// fakedriver.WrapICD), Mesa's EGL offering OpenGL ES 2.0 alone (the fake
// EGL vendor, fakedriver.WrapEGL), missing and broken ICD manifests and
// libraries, crashing and hanging ICDs, CPU-only adapters, EGL vendor and
// glvnd faults — on the host and in a container
// made from the CDI spec, and fails on any disagreement that is not a
// documented policy. The agreement table is docs/wgpu-oracle.md, rewritten
// by `go test ./nodeprep/testenv/wgpuoracle -update`.
package wgpuoracle
