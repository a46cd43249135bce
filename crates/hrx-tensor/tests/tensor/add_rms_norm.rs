//! The fused residual add and RMS norm (`record_add_rms_norm`) against an
//! f64 reference and against the two dispatches it replaces (`Add`, then
//! `record_rms_norm`), on rows that take the 4-wide kernel (576 columns,
//! SmolLM2's width, one and 64 rows, also as row views of larger tensors)
//! and the strided one (7 columns, unaligned row views); plus its errors.
//!
//! Tolerances: `sum` is one correctly rounded f32 add, so it must equal
//! the f64 sum of the f32 inputs rounded to f32 exactly. `out` is the norm
//! of those sums: the mean square within 6(n + 16)u max|s|^2 (the bound the
//! row tests use, covering the 4-wide kernel's shifted one-pass sums), so
//! rstd within half that relative to ms + eps plus 8u, and the output
//! relative to it plus its roundings (u = 2^-24). Against the two
//! dispatches the results must agree to 1 ulp (same reductions, same
//! workgroup size; measured: bit-equal).

use crate::common::*;
use hrx_runtime::Graph;
use hrx_tensor::{DType, DeviceTensor, TensorDesc, ops::BinaryOp};

const EPS: f32 = 1e-5;
const U: f64 = 1.0 / (1u64 << 24) as f64;

/// A poisoned f32 output of `shape`.
fn output(shape: &[usize]) -> DeviceTensor {
    let rt = &ops().runtime().clone();
    let desc = TensorDesc::new(DType::F32, shape.to_vec()).unwrap();
    let storage = rt
        .allocate(desc.bytes(), hrx_runtime::MemoryPlacement::GpuLocal)
        .unwrap();
    let mut graph = rt.graph();
    graph.fill(storage.view(), poison(DType::F32)).unwrap();
    let done = graph.prepare().unwrap().submit_after(&[]).unwrap();
    DeviceTensor::from_parts(rt.clone(), desc, Some(storage.view()), done).unwrap()
}

/// Record with `record` into one graph after the inputs' producers, and
/// read `sum` and `out` back.
fn run_pair(
    inputs: &[&DeviceTensor],
    shape: &[usize],
    record: impl FnOnce(&mut Graph, &DeviceTensor, &DeviceTensor),
) -> (Vec<f64>, Vec<f64>) {
    let (mut sum, mut out) = (output(shape), output(shape));
    let mut graph = ops().runtime().graph();
    record(&mut graph, &sum, &out);
    let mut deps: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
    deps.extend([sum.completion().clone(), out.completion().clone()]);
    let done = graph.prepare().unwrap().submit_after(&deps).unwrap();
    sum.set_producer(done.clone());
    out.set_producer(done);
    (sum.to_values().unwrap(), out.to_values().unwrap())
}

/// `values` of `[rows, cols]` as rows `1..=rows` of a `[rows + 2, cols]`
/// tensor (a contiguous row view that does not start at its storage).
fn row_view(rows: usize, cols: usize, values: &[f64]) -> DeviceTensor {
    let mut data = vec![9.0; (rows + 2) * cols];
    data[cols..cols + values.len()].copy_from_slice(values);
    let rt = &ops().runtime().clone();
    let t = DeviceTensor::from_values(rt, DType::F32, vec![rows + 2, cols], &data).unwrap();
    t.slice(0, 1..1 + rows).unwrap()
}

fn f32_held(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| f64::from(x as f32)).collect()
}

/// The f64 reference: the f32-rounded sums, the norm of them, and the
/// norm's error bounds.
fn reference(cols: usize, a: &[f64], b: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let sum: Vec<f64> = f32_held(a.iter().zip(b).map(|(x, y)| x + y).collect());
    let (mut out, mut tol) = (Vec::new(), Vec::new());
    let n = cols as f64;
    for row in sum.chunks(cols) {
        let ms = row.iter().map(|x| x * x).sum::<f64>() / n;
        let max2 = row.iter().map(|x| x * x).fold(0.0, f64::max);
        let ve = ms + f64::from(EPS);
        let rel = 3.0 * (n + 16.0) * U * max2 / ve + 16.0 * U;
        for (j, x) in row.iter().enumerate() {
            let y = x / ve.sqrt() * w[j];
            out.push(y);
            tol.push(y.abs() * rel);
        }
    }
    (sum, out, tol)
}

/// Check one shape, the inputs as whole tensors or as row views.
fn check(rows: usize, cols: usize, views: bool, seed: u64) {
    let what = format!("add_rms_norm [{rows}, {cols}] views {views}");
    let mut rng = Gen::new(seed);
    let n = rows * cols;
    let av = f32_held(values(&mut rng, n, -2.0, 2.0));
    let bv = f32_held(values(&mut rng, n, -2.0, 2.0));
    let wv = f32_held(values(&mut rng, cols, 0.5, 1.5));
    let shape = [rows, cols];
    let (a, b) = if views {
        (row_view(rows, cols, &av), row_view(rows, cols, &bv))
    } else {
        let whole = |v: &[f64]| input(DType::F32, &shape, v, Placement::Contiguous);
        (whole(&av), whole(&bv))
    };
    let w = input(DType::F32, &[cols], &wv, Placement::Contiguous);
    let inputs = [&a, &b, &w];
    let (sum, out) = run_pair(&inputs, &shape, |g, sum, out| {
        ops()
            .record_add_rms_norm(g, &a, &b, &w, EPS, sum, out)
            .unwrap()
    });
    let (want_sum, want_out, tol) = reference(cols, &av, &bv, &wv);
    assert_eq!(sum, want_sum, "{what}: sum");
    for (i, ((g, w), t)) in out.iter().zip(&want_out).zip(&tol).enumerate() {
        assert!(
            (g - w).abs() <= *t,
            "{what}: out {i}: got {g}, want {w} ± {t}"
        );
    }
    // The two dispatches it replaces.
    let (sum2, out2) = run_pair(&inputs, &shape, |g, sum, out| {
        ops().record_binary(g, BinaryOp::Add, &a, &b, sum).unwrap();
        ops()
            .record_rms_norm(g, sum, Some(&w), None, EPS, out)
            .unwrap()
    });
    assert_eq!(sum, sum2, "{what}: sum against add");
    for (i, (g, w)) in out.iter().zip(&out2).enumerate() {
        let ulp = f64::from(f32::EPSILON) * w.abs();
        assert!(
            (g - w).abs() <= ulp,
            "{what}: out {i}: got {g}, add then rms_norm gave {w}"
        );
    }
}

#[test]
fn add_rms_norm_matches_reference_and_two_dispatches() {
    for (rows, cols) in [(1, 576), (64, 576), (3, 7)] {
        for views in [false, true] {
            check(rows, cols, views, (rows * 1000 + cols) as u64);
        }
    }
}

#[test]
fn add_rms_norm_errors() {
    let a = input(DType::F32, &[2, 8], &[1.0; 16], Placement::Contiguous);
    let b = input(DType::F32, &[2, 8], &[2.0; 16], Placement::Contiguous);
    let w = input(DType::F32, &[8], &[1.0; 8], Placement::Contiguous);
    let (sum, out) = (output(&[2, 8]), output(&[2, 8]));
    let mut graph = ops().runtime().graph();
    let mut fails = |a: &DeviceTensor,
                     b: &DeviceTensor,
                     w: &DeviceTensor,
                     eps: f32,
                     sum: &DeviceTensor,
                     out: &DeviceTensor,
                     message: &str| {
        let e = ops()
            .record_add_rms_norm(&mut graph, a, b, w, eps, sum, out)
            .unwrap_err()
            .to_string();
        assert!(e.contains(message), "{e} lacks {message}");
    };
    let of = "add_rms_norm of f32[2, 8] and f32[2, 8]: ";
    fails(
        &a,
        &b,
        &w,
        EPS,
        &a,
        &out,
        &format!("{of}sum must not overlap a"),
    );
    fails(&a, &b, &w, EPS, &b, &out, "sum must not overlap b");
    fails(&a, &b, &w, EPS, &sum, &sum, "sum must not overlap out");
    fails(&a, &b, &w, EPS, &sum, &b, "out must not overlap b");
    let w4 = input(DType::F32, &[4], &[1.0; 4], Placement::Contiguous);
    fails(
        &a,
        &b,
        &w4,
        EPS,
        &sum,
        &out,
        "weight must have shape [8], got f32[4]",
    );
    let b3 = input(DType::F32, &[2, 4], &[1.0; 8], Placement::Contiguous);
    fails(
        &a,
        &b3,
        &w,
        EPS,
        &sum,
        &out,
        "the inputs must have the same shape",
    );
    let bi = input(DType::I32, &[2, 8], &[1.0; 16], Placement::Contiguous);
    fails(&a, &bi, &w, EPS, &sum, &out, "i32[2, 8] is not f32");
    let padded = input(DType::F32, &[2, 8], &[1.0; 16], Placement::Padded);
    fails(&padded, &b, &w, EPS, &sum, &out, "must be contiguous");
    fails(&a, &b, &w, f32::NAN, &sum, &out, "eps NaN must be finite");
    let small = output(&[2, 4]);
    fails(
        &a,
        &b,
        &w,
        EPS,
        &small,
        &out,
        "output f32[2, 4] must be a contiguous",
    );
    assert!(graph.is_empty(), "an error recorded nothing");
}
