// hrx built-in compute copy: dst[i] = src[i] over 16-byte words.
//
// The runtime binds one chunk of at most maxStorageBufferRange bytes per
// dispatch (both bindings cover the same number of words) and caps the grid
// at the device's workgroup-count limit; the grid-stride loop covers the rest.
// Regenerate copy.spv with `cargo xtask gen-copy-kernel` after editing.

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;

@compute @workgroup_size(256, 1, 1)
fn copy_words(
    @builtin(global_invocation_id) id: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let count = arrayLength(&dst);
    let stride = groups.x * 256u;
    for (var i = id.x; i < count; i += stride) {
        dst[i] = src[i];
    }
}
