// y = a * x + y over vec4<f32>, 256 invocations per workgroup: hrx's loom
// SAXPY benchmark kernel. The grid is 2-D because wgpu caps each dimension
// at 65,535 workgroups; `row` is the x extent in vec4 elements.
struct Args { quads: u32, a: f32, row: u32, pad: u32 }
@group(0) @binding(0) var<uniform> args: Args;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let q = id.y * args.row + id.x;
    if q < args.quads {
        y[q] = fma(vec4<f32>(args.a), x[q], y[q]);
    }
}
