//! WGSL equivalents of corpus kernels, for naga's own front end: same
//! bindings, push constants, workgroup sizes and bounds checks.

/// (corpus kernel, WGSL source with entry point `main`).
pub const EQUIVALENTS: [(&str, &str); 11] = [
    ("fill", FILL),
    ("scale", SCALE),
    ("saxpy4", SAXPY4),
    ("clamp2d", CLAMP2D),
    ("row_sum", ROW_SUM),
    ("wg_sum", WG_SUM),
    ("histogram", HISTOGRAM),
    ("transpose", TRANSPOSE),
    ("matmul", MATMUL),
    ("softmax", SOFTMAX),
    ("layernorm", LAYERNORM),
];

const FILL: &str = r#"
struct Args { n: u32, value: f32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < args.n { out[id.x] = args.value; }
}
"#;

const SCALE: &str = r#"
struct Args { n: u32, factor: f32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < args.n { data[i] = data[i] * args.factor; }
}
"#;

/// The bandwidth benchmark's baseline kernel too.
pub const SAXPY4: &str = r#"
struct Args { n: u32, a: f32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x * 4u;
    if i < args.n {
        let q = i >> 2u;
        y[q] = fma(vec4<f32>(args.a), x[q], y[q]);
    }
}
"#;

const CLAMP2D: &str = r#"
struct Args { rows: u32, cols: u32, lo: f32, hi: f32, offset: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read_write> m: array<f32>;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let c = g.x;
    let r = g.y;
    if r < args.rows && c < args.cols {
        let i = args.offset / 4u + r * args.cols + c;
        let x = m[i];
        let a = select(x, args.lo, x < args.lo);
        m[i] = select(a, args.hi, a > args.hi);
    }
}
"#;

const ROW_SUM: &str = r#"
struct Args { rows: u32, cols: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> m: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let r = id.x;
    if r < args.rows {
        var acc = 0.0;
        for (var j = 0u; j < args.cols; j++) { acc += m[r * args.cols + j]; }
        out[r] = acc;
    }
}
"#;

const WG_SUM: &str = r#"
struct Args { n: u32, groups: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<workgroup> t: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>,
        @builtin(local_invocation_id) l: vec3<u32>,
        @builtin(workgroup_id) w: vec3<u32>) {
    var x = 0.0;
    if g.x < args.n { x = src[g.x]; }
    t[l.x] = x;
    workgroupBarrier();
    var s = 32u;
    for (var k = 0u; k < 6u; k++) {
        if l.x < s { t[l.x] = t[l.x] + t[l.x + s]; }
        workgroupBarrier();
        s = s / 2u;
    }
    if l.x == 0u { dst[w.x] = t[0]; }
}
"#;

const HISTOGRAM: &str = r#"
struct Args { n: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> values: array<u32>;
@group(0) @binding(1) var<storage, read_write> bins: array<atomic<i32>>;
var<workgroup> local_bins: array<atomic<i32>, 64>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>,
        @builtin(local_invocation_id) l: vec3<u32>) {
    atomicStore(&local_bins[l.x], 0);
    workgroupBarrier();
    if g.x < args.n { atomicAdd(&local_bins[values[g.x] & 63u], 1); }
    workgroupBarrier();
    atomicAdd(&bins[l.x], atomicLoad(&local_bins[l.x]));
}
"#;

const TRANSPOSE: &str = r#"
struct Args { rows: u32, cols: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
var<workgroup> tile: array<f32, 272>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let r = w.y * 16u + l.y;
    let c = w.x * 16u + l.x;
    if r < args.rows && c < args.cols { tile[l.y * 17u + l.x] = src[r * args.cols + c]; }
    workgroupBarrier();
    let orow = w.x * 16u + l.y;
    let ocol = w.y * 16u + l.x;
    if orow < args.cols && ocol < args.rows {
        dst[orow * args.rows + ocol] = tile[l.x * 17u + l.y];
    }
}
"#;

const MATMUL: &str = r#"
struct Args { m: u32, n: u32, k: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
var<workgroup> ta: array<f32, 256>;
var<workgroup> tb: array<f32, 256>;
@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) l: vec3<u32>, @builtin(global_invocation_id) g: vec3<u32>) {
    let row = g.y;
    let col = g.x;
    let tiles = (args.k + 15u) / 16u;
    var acc = 0.0;
    for (var t = 0u; t < tiles; t++) {
        let ka = t * 16u + l.x;
        let kb = t * 16u + l.y;
        var va = 0.0;
        if row < args.m && ka < args.k { va = a[row * args.k + ka]; }
        var vb = 0.0;
        if col < args.n && kb < args.k { vb = b[kb * args.n + col]; }
        ta[l.y * 16u + l.x] = va;
        tb[l.y * 16u + l.x] = vb;
        workgroupBarrier();
        for (var q = 0u; q < 16u; q++) {
            acc = fma(ta[l.y * 16u + q], tb[q * 16u + l.x], acc);
        }
        workgroupBarrier();
    }
    if row < args.m && col < args.n { c[row * args.n + col] = acc; }
}
"#;

const SOFTMAX: &str = r#"
struct Args { rows: u32, cols: u32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let r = id.x;
    if r < args.rows {
        let base = r * args.cols;
        var m = bitcast<f32>(0xff800000u);
        for (var j = 0u; j < args.cols; j++) { m = max(m, x[base + j]); }
        var s = 0.0;
        for (var j = 0u; j < args.cols; j++) { s += exp(x[base + j] - m); }
        let inv = 1.0 / s;
        for (var j = 0u; j < args.cols; j++) { y[base + j] = exp(x[base + j] - m) * inv; }
    }
}
"#;

const LAYERNORM: &str = r#"
struct Args { rows: u32, cols: u32, eps: f32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> gamma: array<f32>;
@group(0) @binding(2) var<storage, read> beta: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let r = id.x;
    if r < args.rows {
        let base = r * args.cols;
        var s = 0.0;
        var ss = 0.0;
        for (var j = 0u; j < args.cols; j++) {
            let v = x[base + j];
            s += v;
            ss = fma(v, v, ss);
        }
        let nf = f32(args.cols);
        let mean = s / nf;
        let variance = ss / nf - mean * mean;
        let rs = inverseSqrt(variance + args.eps);
        for (var j = 0u; j < args.cols; j++) {
            y[base + j] = fma((x[base + j] - mean) * rs, gamma[j], beta[j]);
        }
    }
}
"#;
