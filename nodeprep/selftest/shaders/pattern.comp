// pattern.comp: the self-test's compute shader. Each invocation writes one
// element of a storage buffer with a value that depends on its index and a
// seed, so a buffer the driver never touched, a partly written one, or one
// written by the wrong kernel all fail the check. The Go side computes the
// same function (Pattern in dispatch.go); keep the two in step.
//
// Regenerate pattern.spv with `make shaders` (glslangValidator -V).
#version 450

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) writeonly buffer Out {
    uint data[];
};

layout(push_constant) uniform Params {
    uint seed;
    uint count;
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < count) {
        // Knuth's multiplicative hash constant; uint arithmetic wraps mod 2^32.
        data[i] = (i * 2654435761u) ^ seed;
    }
}
