//! Refused recordings: every shape, dtype or domain mismatch is an error
//! that names the operator and the shapes involved, and leaves the
//! caller's graph empty. Each case records into a fresh graph, so a stray
//! operation is charged to the case that queued it.

use crate::common::{Placement, input, ops, unbindable};
use hrx_runtime::{Graph, Runtime};
use hrx_tensor::ops::MatmulOptions;
use hrx_tensor::{DType, DeviceTensor, Ops, Result, TensorDesc};

/// The library of a second runtime domain, per test thread (see
/// `common::ops`: no device may outlive the tests).
fn other() -> Ops {
    thread_local! {
        static OTHER: Ops = Ops::new(&Runtime::from_env().expect("second runtime"));
    }
    OTHER.with(Ops::clone)
}

fn desc(dtype: DType, shape: &[usize]) -> TensorDesc {
    TensorDesc::new(dtype, shape.to_vec()).unwrap()
}

/// A tensor of ones in this test's domain.
fn ones(dtype: DType, shape: &[usize]) -> DeviceTensor {
    let n = shape.iter().product();
    input(dtype, shape, &vec![1.0; n], Placement::Contiguous)
}

/// An uninitialised output in this test's domain.
fn ours(dtype: DType, shape: &[usize]) -> DeviceTensor {
    ops().output(desc(dtype, shape)).unwrap()
}

/// An uninitialised tensor of the second domain.
fn theirs(dtype: DType, shape: &[usize]) -> DeviceTensor {
    other().output(desc(dtype, shape)).unwrap()
}

/// `[2, 3, 4]` f32 with its last two axes stored transposed: the leading
/// axes (strides 12 and 1) do not merge, so the row operators pack it
/// before their kernel.
fn unmergeable() -> DeviceTensor {
    let v: Vec<f64> = (0..24).map(f64::from).collect();
    input(DType::F32, &[2, 3, 4], &v, Placement::Transposed)
}

/// Record into a fresh graph; what is wrong unless it failed with an
/// error containing `want` (the operator and its shapes) and recorded
/// nothing.
fn refusal(want: &str, record: impl FnOnce(&mut Graph) -> Result<()>) -> Option<String> {
    let mut graph = ops().runtime().graph();
    let problem = match record(&mut graph) {
        Ok(()) => Some("recorded without an error".to_string()),
        Err(e) if !e.to_string().contains(want) => Some(format!("failed with {e}")),
        Err(_) => None,
    };
    let left = (!graph.is_empty()).then(|| format!("left {} operations", graph.len()));
    let problems: Vec<String> = problem.into_iter().chain(left).collect();
    (!problems.is_empty()).then(|| format!("{want}: {}", problems.join("; ")))
}

/// Require [`refusal`] to find nothing wrong.
fn refused(want: &str, record: impl FnOnce(&mut Graph) -> Result<()>) {
    if let Some(problem) = refusal(want, record) {
        panic!("{problem}");
    }
}

/// `record_matmul` of `a @ b + bias` into `out`, for [`refused`].
fn matmul<'t>(
    a: &'t DeviceTensor,
    b: &'t DeviceTensor,
    bias: Option<&'t DeviceTensor>,
    out: &'t DeviceTensor,
) -> impl FnOnce(&mut Graph) -> Result<()> + 't {
    move |g| ops().record_matmul(g, a, b, bias, MatmulOptions::default(), out)
}

const DOMAIN: &str = "belongs to another runtime domain";

#[test]
fn matmul_mismatches_record_nothing() {
    for dtype in [DType::F32, DType::F16] {
        let (a, b) = (ones(dtype, &[2, 3]), ones(dtype, &[3, 4]));
        let of = format!("matmul of {dtype}[2, 3] and {dtype}[3, 4]");
        let out = ours(DType::F32, &[2, 5]);
        let want = format!("{of}: output f32[2, 5] must be a contiguous f32[2, 4]");
        refused(&want, matmul(&a, &b, None, &out));
        // An f16 output: f32 operands never write one; f16 operands only
        // on the tensor-core kernel, which two rows never take.
        let out = ours(DType::F16, &[2, 4]);
        let want = match dtype {
            DType::F16 => {
                format!("{of}: an f16 output is written only by the cooperative-matrix kernel")
            }
            _ => format!("{of}: output f16[2, 4] must be a contiguous f32[2, 4]"),
        };
        refused(&want, matmul(&a, &b, None, &out));
        let out = ours(DType::F32, &[2, 4]);
        let bias = ones(DType::F32, &[3]);
        let want = format!("{of}: bias f32[3] must have shape [4]");
        refused(&want, matmul(&a, &b, Some(&bias), &out));
        let bias = ones(DType::I32, &[4]);
        let want = format!(
            "{of}: a and b must both be f32 or both f16, the bias f32 (found {dtype}, {dtype}, i32)"
        );
        refused(&want, matmul(&a, &b, Some(&bias), &out));
        let other = if dtype == DType::F32 {
            DType::F16
        } else {
            DType::F32
        };
        let mixed = ones(other, &[3, 4]);
        let want = format!(
            "matmul of {dtype}[2, 3] and {other}[3, 4]: a and b must both be f32 or both f16"
        );
        refused(&want, matmul(&a, &mixed, None, &out));
        let (ba, bb) = (ones(dtype, &[2, 2, 3]), ones(dtype, &[3, 3, 4]));
        let want = format!(
            "matmul of {dtype}[2, 2, 3] and {dtype}[3, 3, 4] (transposed: false, false): the batch axes do not broadcast"
        );
        let out3 = ours(DType::F32, &[3, 2, 4]);
        refused(&want, matmul(&ba, &bb, None, &out3));
        let wide = ones(dtype, &[4, 4]);
        let want = format!(
            "matmul of {dtype}[2, 3] and {dtype}[4, 4] (transposed: false, false): inner extents 3 and 4 differ"
        );
        refused(&want, matmul(&a, &wide, None, &out));
        let out = unbindable(DType::F32, &[2, 4]);
        let want = format!("{of}: tensor f32[2, 4] starts in storage at byte 4");
        refused(&want, matmul(&a, &b, None, &out));
    }
}

#[test]
fn matmul_foreign_tensors_record_nothing() {
    for dtype in [DType::F32, DType::F16] {
        let (a, b) = (ones(dtype, &[2, 3]), ones(dtype, &[3, 4]));
        let (fa, fb) = (theirs(dtype, &[2, 3]), theirs(dtype, &[3, 4]));
        let (out, bias) = (ours(DType::F32, &[2, 4]), ones(DType::F32, &[4]));
        let (fout, fbias) = (theirs(DType::F32, &[2, 4]), theirs(DType::F32, &[4]));
        let of = format!("matmul of {dtype}[2, 3] and {dtype}[3, 4]");
        let cases = [
            (&fa, &b, None, &out, format!("{dtype}[2, 3]")),
            (&a, &fb, None, &out, format!("{dtype}[3, 4]")),
            (&a, &b, Some(&fbias), &out, "f32[4]".into()),
            (&a, &b, Some(&bias), &fout, "f32[2, 4]".into()),
        ];
        for (a, b, bias, out, tensor) in cases {
            refused(&format!("{of}: tensor {tensor} {DOMAIN}"), |g| {
                ops().record_matmul(g, a, b, bias, MatmulOptions::default(), out)
            });
        }
    }
}

#[test]
fn softmax_mismatches_record_nothing() {
    let a = ones(DType::F32, &[2, 3]);
    for (name, log) in [("softmax", false), ("log_softmax", true)] {
        let record = |a: &DeviceTensor, out: &DeviceTensor| {
            let (a, out) = (a.clone(), out.clone());
            move |g: &mut Graph| match log {
                true => ops().record_log_softmax(g, &a, &out),
                false => ops().record_softmax(g, &a, &out),
            }
        };
        let of = format!("{name} of f32[2, 3]");
        let cases = [
            (
                &a,
                ours(DType::F32, &[3, 2]),
                "output f32[3, 2] must be a contiguous f32[2, 3]".to_string(),
            ),
            (
                &a,
                ours(DType::I32, &[2, 3]),
                "output i32[2, 3] must be a contiguous f32[2, 3]".into(),
            ),
            (
                &a,
                theirs(DType::F32, &[2, 3]),
                format!("tensor f32[2, 3] {DOMAIN}"),
            ),
        ];
        for (a, out, why) in cases {
            refused(&format!("{of}: {why}"), record(a, &out));
        }
        let half = ones(DType::F16, &[2, 3]);
        let want = format!("{name} of f16[2, 3]: f32 only");
        refused(&want, record(&half, &ours(DType::F16, &[2, 3])));
        let foreign = theirs(DType::F32, &[2, 3]);
        refused(
            &format!("{of}: tensor f32[2, 3] {DOMAIN}"),
            record(&foreign, &ours(DType::F32, &[2, 3])),
        );
    }
}

#[test]
fn norm_mismatches_record_nothing() {
    let a = ones(DType::F32, &[2, 3]);
    let (w, out) = (ones(DType::F32, &[3]), ours(DType::F32, &[2, 3]));
    for (name, rms) in [("layer_norm", false), ("rms_norm", true)] {
        let norm = |a: &DeviceTensor,
                    w: Option<&DeviceTensor>,
                    b: Option<&DeviceTensor>,
                    eps,
                    out: &DeviceTensor| {
            let (a, w, b, out) = (a.clone(), w.cloned(), b.cloned(), out.clone());
            move |g: &mut Graph| match rms {
                true => ops().record_rms_norm(g, &a, w.as_ref(), b.as_ref(), eps, &out),
                false => ops().record_layer_norm(g, &a, w.as_ref(), b.as_ref(), eps, &out),
            }
        };
        let of = format!("{name} of f32[2, 3]");
        let bad_out = ours(DType::F32, &[3, 2]);
        let want = format!("{of}: output f32[3, 2] must be a contiguous f32[2, 3]");
        refused(&want, norm(&a, Some(&w), None, 1e-5, &bad_out));
        let bad_out = ours(DType::I32, &[2, 3]);
        let want = format!("{of}: output i32[2, 3] must be a contiguous f32[2, 3]");
        refused(&want, norm(&a, Some(&w), None, 1e-5, &bad_out));
        // f16 outputs are written by the kernel for rows of whole quads.
        let half_out = ours(DType::F16, &[2, 3]);
        let want = format!("{of}: an f16 output needs rows a multiple of 4 long");
        refused(&want, norm(&a, Some(&w), None, 1e-5, &half_out));
        let long = ones(DType::F32, &[4]);
        let want = format!("{of}: weight must have shape [3], got f32[4]");
        refused(&want, norm(&a, Some(&long), None, 1e-5, &out));
        let want = format!("{of}: bias must have shape [3], got f32[4]");
        refused(&want, norm(&a, Some(&w), Some(&long), 1e-5, &out));
        let half = ones(DType::F16, &[3]);
        let want = format!("{of}: f16[3] is not f32");
        refused(&want, norm(&a, Some(&half), None, 1e-5, &out));
        refused(&want, norm(&a, None, Some(&half), 1e-5, &out));
        let want = format!("{of}: eps NaN must be finite and >= 0");
        refused(&want, norm(&a, None, None, f32::NAN, &out));
        let foreign = theirs(DType::F32, &[3]);
        let want = format!("{of}: tensor f32[3] {DOMAIN}");
        refused(&want, norm(&a, Some(&foreign), None, 1e-5, &out));
        refused(&want, norm(&a, None, Some(&foreign), 1e-5, &out));
        let want = format!("{of}: tensor f32[2, 3] {DOMAIN}");
        refused(
            &want,
            norm(&theirs(DType::F32, &[2, 3]), None, None, 1e-5, &out),
        );
        refused(
            &want,
            norm(&a, None, None, 1e-5, &theirs(DType::F32, &[2, 3])),
        );
    }
}

/// An input whose leading axes do not merge is packed by a copy before the
/// row kernel; an output that fails to bind must be found before that copy
/// reaches the caller's graph.
#[test]
fn row_operators_pack_nothing_for_an_unbindable_output() {
    let a = unmergeable();
    let w = ones(DType::F32, &[4]);
    let of = |name: &str| {
        format!(
            "{name} of f32[2, 3, 4] strides [12, 1, 3]: tensor f32[2, 3, 4] starts in storage at byte 4"
        )
    };
    let out = unbindable(DType::F32, &[2, 3, 4]);
    let problems = [
        refusal(&of("softmax"), |g| ops().record_softmax(g, &a, &out)),
        refusal(&of("log_softmax"), |g| {
            ops().record_log_softmax(g, &a, &out)
        }),
        refusal(&of("layer_norm"), |g| {
            ops().record_layer_norm(g, &a, Some(&w), Some(&w), 1e-5, &out)
        }),
        refusal(&of("rms_norm"), |g| {
            ops().record_rms_norm(g, &a, Some(&w), None, 1e-5, &out)
        }),
    ];
    let problems: Vec<String> = problems.into_iter().flatten().collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn copy_and_permute_mismatches_record_nothing() {
    let a = ones(DType::F32, &[2, 3]);
    let copy = |src: &DeviceTensor, dst: &DeviceTensor| {
        let (src, dst) = (src.clone(), dst.clone());
        move |g: &mut Graph| ops().record_copy(g, &src, &dst)
    };
    let want = "copy of f32[2, 3] into f32[3, 2]: dtypes or shapes differ";
    refused(want, copy(&a, &ours(DType::F32, &[3, 2])));
    let want = "copy of f32[2, 3] into i32[2, 3]: dtypes or shapes differ";
    refused(want, copy(&a, &ours(DType::I32, &[2, 3])));
    let want = format!("copy of f32[2, 3] into f32[2, 3]: tensor f32[2, 3] {DOMAIN}");
    refused(&want, copy(&a, &theirs(DType::F32, &[2, 3])));
    refused(
        &want,
        copy(&theirs(DType::F32, &[2, 3]), &ours(DType::F32, &[2, 3])),
    );
    let bytes = ones(DType::U8, &[2, 3]);
    let want = "copy of u8[2, 3] into u8[2, 3]: only 4-byte and 2-byte elements are copied";
    refused(want, copy(&bytes, &ours(DType::U8, &[2, 3])));
    // A permute is a strided view copied into a packed output.
    let e = Ops::permuted(&a, &[0, 0]).unwrap_err();
    assert!(
        e.to_string()
            .contains("permute of f32[2, 3]: [0, 0] is not a permutation of 0..2"),
        "{e}"
    );
    let t = Ops::permuted(&a, &[1, 0]).unwrap();
    let want = "copy of f32[3, 2] strides [1, 3] into f32[2, 3]: dtypes or shapes differ";
    refused(want, copy(&t, &ours(DType::F32, &[2, 3])));
    let want =
        format!("copy of f32[3, 2] strides [1, 3] into f32[3, 2]: tensor f32[3, 2] {DOMAIN}");
    refused(&want, copy(&t, &theirs(DType::F32, &[3, 2])));
}

#[test]
fn concat_mismatches_record_nothing() {
    let (a, b) = (ones(DType::F32, &[2, 3]), ones(DType::F32, &[2, 2]));
    let out = ours(DType::F32, &[2, 5]);
    let concat = |inputs: &[&DeviceTensor], axis, out: &DeviceTensor| {
        let (inputs, out): (Vec<DeviceTensor>, _) =
            (inputs.iter().map(|&t| t.clone()).collect(), out.clone());
        move |g: &mut Graph| {
            let inputs: Vec<&DeviceTensor> = inputs.iter().collect();
            ops().record_concat(g, &inputs, axis, &out)
        }
    };
    let want = "concat of [[2, 3], [2, 2]] along axis 0: dtypes or the other extents differ";
    refused(want, concat(&[&a, &b], 0, &out));
    let want = "concat of [[2, 3], [2, 2]] along axis 2: the axis is out of range";
    refused(want, concat(&[&a, &b], 2, &out));
    let ints = ones(DType::I32, &[2, 2]);
    let want = "concat of [[2, 3], [2, 2]] along axis 1: dtypes or the other extents differ";
    refused(want, concat(&[&a, &ints], 1, &out));
    let want = "concat of [] along axis 0: no inputs";
    refused(want, concat(&[], 0, &out));
    let want = "concat along axis 1: output f32[2, 4] must have shape [2, 5] and dtype f32";
    refused(want, concat(&[&a, &b], 1, &ours(DType::F32, &[2, 4])));
    let want = "concat along axis 1: output i32[2, 5] must have shape [2, 5] and dtype f32";
    refused(want, concat(&[&a, &b], 1, &ours(DType::I32, &[2, 5])));
    let want = format!("concat: tensor f32[2, 2] {DOMAIN}");
    refused(&want, concat(&[&a, &theirs(DType::F32, &[2, 2])], 1, &out));
    // The first part would record; the foreign output must stop both.
    let want = format!("tensor f32[2, 3] strides [5, 1] {DOMAIN}");
    refused(&want, concat(&[&a, &b], 1, &theirs(DType::F32, &[2, 5])));
}
