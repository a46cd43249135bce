//! The fused residual adds and norms (`record_add_rms_norm`,
//! `record_add_layer_norm`) against an f64 reference and against the two
//! dispatches each replaces (`Add`, then the norm), on rows that take the
//! 4-wide kernel (576 columns, SmolLM2's width, and 384, MiniLM's; one
//! and 64 rows, also as row views of larger tensors) and the strided one
//! (7 columns, unaligned row views), with the sum kept and not; plus
//! their errors.
//!
//! Tolerances: `sum` is one correctly rounded f32 add, so it must equal
//! the f64 sum of the f32 inputs rounded to f32 exactly. The RMS `out` is
//! the norm of those sums: the mean square within 6(n + 16)u max|s|^2
//! (the bound the row tests use, covering the 4-wide kernel's shifted
//! one-pass sums), so rstd within half that relative to ms + eps plus 8u,
//! and the output relative to it plus its roundings (u = 2^-24). The
//! layer norm's `out` is held to 1e-5 of the row's largest output (its
//! centred sums cancel). Against the two dispatches the results must
//! agree to 1 ulp of the row's largest output (same reductions, same
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

/// The layer-norm reference: the f32-rounded sums, their layer norm with
/// `w` and `b`, and each output's bound (1e-5 of its row's largest).
fn layer_reference(
    cols: usize,
    (a, b): (&[f64], &[f64]),
    (w, bias): (&[f64], &[f64]),
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let sum: Vec<f64> = f32_held(a.iter().zip(b).map(|(x, y)| x + y).collect());
    let (mut out, mut tol) = (Vec::new(), Vec::new());
    let n = cols as f64;
    for row in sum.chunks(cols) {
        let mean = row.iter().sum::<f64>() / n;
        let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let rstd = 1.0 / (var + f64::from(EPS)).sqrt();
        let ys: Vec<f64> = row
            .iter()
            .enumerate()
            .map(|(j, x)| (x - mean) * rstd * w[j] + bias[j])
            .collect();
        let largest = ys.iter().fold(0.0f64, |m, y| m.max(y.abs()));
        tol.extend(std::iter::repeat_n(1e-5 * largest.max(1.0), cols));
        out.extend(ys);
    }
    (sum, out, tol)
}

/// Which fused form a check runs.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Form {
    Rms,
    Layer,
}

/// Check one form on one shape, the inputs as whole tensors or as row
/// views: against the f64 reference and against the two dispatches it
/// replaces (`Add`, then the norm).
fn check(form: Form, rows: usize, cols: usize, views: bool, seed: u64) {
    let what = format!("add {form:?} norm [{rows}, {cols}] views {views}");
    let mut rng = Gen::new(seed);
    let n = rows * cols;
    let av = f32_held(values(&mut rng, n, -2.0, 2.0));
    // The layer norm's addend is offset, so that the centring matters.
    let (lo, hi) = if form == Form::Layer {
        (1.0, 3.0)
    } else {
        (-2.0, 2.0)
    };
    let bv = f32_held(values(&mut rng, n, lo, hi));
    let wv = f32_held(values(&mut rng, cols, 0.5, 1.5));
    let biasv = f32_held(values(&mut rng, cols, -0.5, 0.5));
    let shape = [rows, cols];
    let (a, b) = if views {
        (row_view(rows, cols, &av), row_view(rows, cols, &bv))
    } else {
        let whole = |v: &[f64]| input(DType::F32, &shape, v, Placement::Contiguous);
        (whole(&av), whole(&bv))
    };
    let w = input(DType::F32, &[cols], &wv, Placement::Contiguous);
    let bias = input(DType::F32, &[cols], &biasv, Placement::Contiguous);
    let inputs = [&a, &b, &w, &bias];
    let (sum, out) = run_pair(&inputs, &shape, |g, sum, out| {
        let o = ops();
        match form {
            Form::Rms => o.record_add_rms_norm(g, &a, &b, &w, EPS, Some(sum), out),
            Form::Layer => {
                o.record_add_layer_norm(g, &a, &b, Some(&w), Some(&bias), EPS, Some(sum), out)
            }
        }
        .unwrap()
    });
    // Without the sum kept: the same norm.
    let (_, unkept) = run_pair(&inputs, &shape, |g, _, out| {
        let o = ops();
        match form {
            Form::Rms => o.record_add_rms_norm(g, &a, &b, &w, EPS, None, out),
            Form::Layer => {
                o.record_add_layer_norm(g, &a, &b, Some(&w), Some(&bias), EPS, None, out)
            }
        }
        .unwrap()
    });
    assert_eq!(unkept, out, "{what}: the norm without the sum kept");
    let (want_sum, want_out, tol) = match form {
        Form::Rms => reference(cols, &av, &bv, &wv),
        Form::Layer => layer_reference(cols, (&av, &bv), (&wv, &biasv)),
    };
    assert_eq!(sum, want_sum, "{what}: sum");
    for (i, ((g, w), t)) in out.iter().zip(&want_out).zip(&tol).enumerate() {
        assert!(
            (g - w).abs() <= *t,
            "{what}: out {i}: got {g}, want {w} ± {t}"
        );
    }
    // The two dispatches it replaces.
    let (sum2, out2) = run_pair(&inputs, &shape, |g, sum, out| {
        let o = ops();
        o.record_binary(g, BinaryOp::Add, &a, &b, sum).unwrap();
        match form {
            Form::Rms => o.record_rms_norm(g, sum, Some(&w), None, EPS, out),
            Form::Layer => o.record_layer_norm(g, sum, Some(&w), Some(&bias), EPS, out),
        }
        .unwrap()
    });
    assert_eq!(sum, sum2, "{what}: sum against add");
    for (row, (got, two)) in out.chunks(cols).zip(out2.chunks(cols)).enumerate() {
        // RMS: 1 ulp of each output; layer norm (whose bias can bring an
        // output near zero): 1 ulp of the row's largest.
        let largest = two.iter().fold(0.0f64, |m, y| m.max(y.abs()));
        for (j, (g, w)) in got.iter().zip(two).enumerate() {
            let scale = if form == Form::Rms { w.abs() } else { largest };
            assert!(
                (g - w).abs() <= f64::from(f32::EPSILON) * scale,
                "{what}: out [{row}, {j}]: got {g}, add then the norm gave {w}"
            );
        }
    }
}

#[test]
fn add_rms_norm_matches_reference_and_two_dispatches() {
    for (rows, cols) in [(1, 576), (64, 576), (3, 7)] {
        for views in [false, true] {
            check(Form::Rms, rows, cols, views, (rows * 1000 + cols) as u64);
        }
    }
}

#[test]
fn add_layer_norm_matches_reference_and_two_dispatches() {
    for (rows, cols) in [(1, 384), (64, 384), (3, 7)] {
        for views in [false, true] {
            check(
                Form::Layer,
                rows,
                cols,
                views,
                (rows * 1000 + cols) as u64 + 1,
            );
        }
    }
}

/// The layer-norm form's own checks: its name, an optional bias of the
/// wrong shape, and no weight or bias at all.
#[test]
fn add_layer_norm_errors_and_bare_norm() {
    let a = input(DType::F32, &[2, 8], &[1.0; 16], Placement::Contiguous);
    let b = input(DType::F32, &[2, 8], &[2.0; 16], Placement::Contiguous);
    let bias4 = input(DType::F32, &[4], &[1.0; 4], Placement::Contiguous);
    let (sum, out) = (output(&[2, 8]), output(&[2, 8]));
    let mut graph = ops().runtime().graph();
    let e = ops()
        .record_add_layer_norm(
            &mut graph,
            &a,
            &b,
            None,
            Some(&bias4),
            EPS,
            Some(&sum),
            &out,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("add_layer_norm of f32[2, 8] and f32[2, 8]: bias must have shape [8]"),
        "{e}"
    );
    let e = ops()
        .record_add_layer_norm(&mut graph, &a, &b, None, None, EPS, Some(&sum), &a)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out must not overlap a"), "{e}");
    let e = ops()
        .record_add_layer_norm(&mut graph, &a, &b, None, None, EPS, None, &b)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out must not overlap b"), "{e}");
    assert!(graph.is_empty(), "an error recorded nothing");
    // Without weight and bias: rows of 3 then 3 give zeros.
    let (sum, out) = run_pair(&[&a, &b], &[2, 8], |g, sum, out| {
        ops()
            .record_add_layer_norm(g, &a, &b, None, None, EPS, Some(sum), out)
            .unwrap()
    });
    assert_eq!(sum, vec![3.0; 16]);
    assert_eq!(out, vec![0.0; 16]);
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
            .record_add_rms_norm(&mut graph, a, b, w, eps, Some(sum), out)
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

/// The sum (where kept), the output and its f16 copy.
type Normed = (Option<Vec<f64>>, Vec<f64>, Vec<f64>);

/// `record_add_layer_norm_with_f16` of `a + b` with `w` and `bias` into
/// fresh outputs, the sum kept or not, run alone: the sum (where kept),
/// the output and its f16 copy; or the refusal, nothing recorded.
fn norm_with_copy(
    (a, b): (&DeviceTensor, &DeviceTensor),
    (w, bias): (&DeviceTensor, &DeviceTensor),
    keep_sum: bool,
) -> hrx_core::Result<Normed> {
    let shape = a.desc().shape().to_vec();
    let low_desc = TensorDesc::new(DType::F16, shape.clone()).unwrap();
    let mut low = ops().output(low_desc).unwrap();
    let (mut sum, mut out) = (output(&shape), output(&shape));
    let mut graph = ops().runtime().graph();
    let kept = keep_sum.then_some(&sum);
    let recorded = ops().record_add_layer_norm_with_f16(
        &mut graph,
        a,
        b,
        Some(w),
        Some(bias),
        EPS,
        kept,
        &out,
        &low,
    );
    if let Err(e) = recorded {
        assert!(graph.is_empty(), "a refusal recorded nothing");
        return Err(e);
    }
    let deps: Vec<_> = [a, b, w, bias, &sum, &out, &low]
        .iter()
        .map(|t| t.completion().clone())
        .collect();
    let done = graph.prepare().unwrap().submit_after(&deps).unwrap();
    for t in [&mut sum, &mut out, &mut low] {
        t.set_producer(done.clone());
    }
    let sum = keep_sum.then(|| sum.to_values().unwrap());
    Ok((sum, out.to_values().unwrap(), low.to_values().unwrap()))
}

/// The layer norm's f16 copy (`record_add_layer_norm_with_f16`): on rows
/// of quads (384 columns, MiniLM's width; 64 rows and a row view) `sum`
/// and `out` are bit-equal to `record_add_layer_norm`'s and the copy is
/// `out` rounded to f16; rows of 7 columns are refused as `Unsupported`,
/// a copy that is not f16 or overlaps an operand is an error, and a
/// refusal records nothing.
#[test]
fn add_layer_norm_writes_an_f16_copy() {
    let target = ops().runtime().gpu().unwrap().target().clone();
    let has_f16 = target.shader_f16 && target.storage_16bit;
    let mut rng = Gen::new(71);
    let (rows, cols) = (64, 384);
    let n = rows * cols;
    let av = values(&mut rng, n, -3.0, 3.0);
    let bv = values(&mut rng, n, -3.0, 3.0);
    let wv = values(&mut rng, cols, 0.5, 1.5);
    let biasv = values(&mut rng, cols, -0.5, 0.5);
    let a = row_view(rows, cols, &av);
    let b = input(DType::F32, &[rows, cols], &bv, Placement::Contiguous);
    let w = input(DType::F32, &[cols], &wv, Placement::Contiguous);
    let bias = input(DType::F32, &[cols], &biasv, Placement::Contiguous);
    let recorded = norm_with_copy((&a, &b), (&w, &bias), true);
    if !has_f16 {
        assert!(matches!(recorded, Err(hrx_core::Error::Unsupported(_))));
        return;
    }
    let (got_sum, got_out, got_low) = recorded.unwrap();
    let (want_sum, want_out) = run_pair(&[&a, &b, &w, &bias], &[rows, cols], |g, s, o| {
        ops()
            .record_add_layer_norm(g, &a, &b, Some(&w), Some(&bias), EPS, Some(s), o)
            .unwrap()
    });
    assert_eq!(got_sum, Some(want_sum), "the sums");
    assert_eq!(got_out, want_out, "the outputs");
    for (i, (x, h)) in got_out.iter().zip(&got_low).enumerate() {
        let rounded = f64::from(half::f16::from_f64(*x));
        assert_eq!(h.to_bits(), rounded.to_bits(), "copy {i}: {h} against {x}");
    }
    // Without the sum kept: the same output and copy.
    let (_, unkept, unkept_low) = norm_with_copy((&a, &b), (&w, &bias), false).unwrap();
    assert_eq!(unkept, got_out, "the outputs, the sum not kept");
    assert_eq!(unkept_low, got_low, "the copy, the sum not kept");

    // Refusals and errors record nothing.
    let odd = input(DType::F32, &[2, 7], &[1.0; 14], Placement::Contiguous);
    let (odd_sum, odd_out) = (output(&[2, 7]), output(&[2, 7]));
    let odd_low = ops()
        .output(TensorDesc::new(DType::F16, vec![2, 7]).unwrap())
        .unwrap();
    let mut graph = ops().runtime().graph();
    let unsupported = ops().record_add_layer_norm_with_f16(
        &mut graph,
        &odd,
        &odd,
        None,
        None,
        EPS,
        Some(&odd_sum),
        &odd_out,
        &odd_low,
    );
    assert!(
        matches!(unsupported, Err(hrx_core::Error::Unsupported(_))),
        "{unsupported:?}"
    );
    // A copy that is not f16, and an f16 copy over the sum's storage.
    let (sum, out) = (output(&[rows, cols]), output(&[rows, cols]));
    let low_desc = TensorDesc::new(DType::F16, vec![rows, cols]).unwrap();
    let mut copy_error = |copy: &DeviceTensor| {
        ops()
            .record_add_layer_norm_with_f16(
                &mut graph,
                &a,
                &b,
                None,
                None,
                EPS,
                Some(&sum),
                &out,
                copy,
            )
            .unwrap_err()
            .to_string()
    };
    let not_f16 = copy_error(&output(&[rows, cols]));
    assert!(not_f16.contains("must be f16"), "{not_f16}");
    let clash = copy_error(&sum.view(0, low_desc).unwrap());
    assert!(clash.contains("must not overlap"), "{clash}");
    assert!(graph.is_empty(), "refusals and errors recorded nothing");
}
