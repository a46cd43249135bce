// One MLP layer: out[m, n] = act(sum_k a[m, k] * w[k, n] + bias[n]), with
// 16x16 tiles of a and w staged in workgroup memory (zeros past the edges,
// so any shape works). act is relu when `relu` is 1. Row-major.
struct Shape { m: u32, n: u32, k: u32, relu: u32 }
@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const T: u32 = 16u;
var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tw: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let row = group.y * T + local.y;
    let col = group.x * T + local.x;
    var acc = 0.0;
    for (var k0 = 0u; k0 < shape.k; k0 += T) {
        let ka = k0 + local.x;
        let kw = k0 + local.y;
        var va = 0.0;
        if row < shape.m && ka < shape.k {
            va = a[row * shape.k + ka];
        }
        var vw = 0.0;
        if kw < shape.k && col < shape.n {
            vw = w[kw * shape.n + col];
        }
        ta[local.y][local.x] = va;
        tw[local.y][local.x] = vw;
        workgroupBarrier();
        for (var k = 0u; k < T; k++) {
            acc = fma(ta[local.y][k], tw[k][local.x], acc);
        }
        workgroupBarrier();
    }
    if row < shape.m && col < shape.n {
        var v = acc + bias[col];
        if shape.relu == 1u {
            v = max(v, 0.0);
        }
        out[row * shape.n + col] = v;
    }
}
