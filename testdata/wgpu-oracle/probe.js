// The wgpu oracle of nodeprep's tests: run by Deno (its WebGPU is
// wgpu-core), it asks for an adapter the way a default WebGPU program does
// (navigator.gpu.requestAdapter() with no options; the backends come from
// DENO_WEBGPU_BACKEND, which Deno reads once when it creates its wgpu
// instance), prints the adapter's info, features and limits, creates a
// device and runs one compute dispatch, and verifies what it wrote. It
// prints one JSON object on stdout and exits 0 whatever it finds: the
// verdict is in the object ("stage" names the first step that failed,
// "" when every step passed).
//
//   deno run --allow-env=DENO_WEBGPU_BACKEND testdata/wgpu-oracle/probe.js
const out = { backend: Deno.env.get("DENO_WEBGPU_BACKEND") ?? "", stage: "" };

function fail(stage, err) {
  out.stage = stage;
  if (err !== undefined) out.error = String(err?.message ?? err);
  console.log(JSON.stringify(out));
  Deno.exit(0);
}

if (typeof navigator.gpu !== "object") fail("api", "navigator.gpu is not defined");
let adapter;
try {
  adapter = await navigator.gpu.requestAdapter();
} catch (e) {
  fail("adapter", e);
}
if (!adapter) fail("adapter", "requestAdapter returned null");

const info = adapter.info;
out.adapter = {
  vendor: info.vendor,
  architecture: info.architecture,
  device: info.device,
  description: info.description,
  isFallbackAdapter: info.isFallbackAdapter ?? false,
  subgroupMinSize: info.subgroupMinSize,
  subgroupMaxSize: info.subgroupMaxSize,
  features: [...adapter.features].sort(),
  limits: {},
};
// GPUSupportedLimits' members are getters on its prototype.
for (const k of Object.keys(Object.getPrototypeOf(adapter.limits))) {
  const v = adapter.limits[k];
  if (typeof v === "number") out.adapter.limits[k] = v;
}

let device;
try {
  device = await adapter.requestDevice();
} catch (e) {
  fail("device", e);
}

// One dispatch: out[i] = in[i] * 3 + i over 64 invocations, verified.
const n = 64;
try {
  device.pushErrorScope("validation");
  const module = device.createShaderModule({
    code: `
      @group(0) @binding(0) var<storage, read> src: array<u32>;
      @group(0) @binding(1) var<storage, read_write> dst: array<u32>;
      @compute @workgroup_size(64)
      fn main(@builtin(global_invocation_id) id: vec3<u32>) {
        dst[id.x] = src[id.x] * 3u + id.x;
      }`,
  });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const input = new Uint32Array(n).map((_, i) => i + 7);
  const src = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.STORAGE, mappedAtCreation: true });
  new Uint32Array(src.getMappedRange()).set(input);
  src.unmap();
  const dst = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const read = device.createBuffer({ size: n * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const bind = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: src } }, { binding: 1, resource: { buffer: dst } }],
  });
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bind);
  pass.dispatchWorkgroups(1);
  pass.end();
  enc.copyBufferToBuffer(dst, 0, read, 0, n * 4);
  device.queue.submit([enc.finish()]);
  const verr = await device.popErrorScope();
  if (verr) fail("dispatch", verr.message);
  await read.mapAsync(GPUMapMode.READ);
  const got = new Uint32Array(read.getMappedRange().slice(0));
  read.unmap();
  for (let i = 0; i < n; i++) {
    if (got[i] !== input[i] * 3 + i) fail("verify", `element ${i} is ${got[i]}, want ${input[i] * 3 + i}`);
  }
} catch (e) {
  fail("dispatch", e);
}
console.log(JSON.stringify(out));
