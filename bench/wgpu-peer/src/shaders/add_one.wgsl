// dst[i] = src[i] + 1 over 32-bit words, 64 invocations per workgroup: the
// kernel of hrx's runtime benchmark, word for word.
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&dst) {
        dst[i] = src[i] + 1u;
    }
}
