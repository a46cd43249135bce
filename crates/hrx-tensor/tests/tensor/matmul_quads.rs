//! The f32 quad kernel (`tiled (16-byte quads)`: 16-byte copies, two
//! tile buffers), forced on lavapipe with `Tuning::f32_quads`, against
//! the f64 reference within the f32 matmul bound: partial tiles in m and
//! n, k of one step, a partial last step and many steps, B contiguous
//! along n and along k (transposed), batches with either operand
//! broadcast, bias and activations, C's rows whole quads or not. Layouts it does not take (k not a
//! multiple of 4, an A that starts off a quad, A transposed) and f16
//! operands do not take it, and `f32_quads: Some(false)` keeps every
//! matmul off it.

use crate::common::{
    bounds::{U32, assert_within},
    matmul::{reference_batched, stored},
    *,
};
use hrx_tensor::{
    DType, Ops, TensorDesc,
    ops::{MatmulOptions, Tuning, UnaryOp},
};

const QUADS: &str = "tiled (16-byte quads)";

fn forced(on: bool) -> Ops {
    ops().with_tuning(Tuning {
        f32_quads: Some(on),
        ..Tuning::default()
    })
}

/// The quad kernel forced on with workgroups of `columns` columns.
fn forced_columns(columns: usize) -> Ops {
    ops().with_tuning(Tuning {
        f32_quads: Some(true),
        f32_quad_columns: Some(columns),
        ..Tuning::default()
    })
}

/// One case: A's and B's batch (empty: one matrix), m, k, n, B stored
/// transposed, and the epilogue.
struct Case {
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    dims: (usize, usize, usize),
    transpose_b: bool,
    bias: bool,
    activation: Option<UnaryOp>,
}

fn case(
    (a_batch, b_batch): (&[usize], &[usize]),
    dims: (usize, usize, usize),
    transpose_b: bool,
    (bias, activation): (bool, Option<UnaryOp>),
) -> Case {
    Case {
        a_batch: a_batch.to_vec(),
        b_batch: b_batch.to_vec(),
        dims,
        transpose_b,
        bias,
        activation,
    }
}

#[test]
fn quad_kernel_matches_reference() {
    matches_reference(&forced_columns(128));
}

#[test]
fn quad_kernel_of_64_columns_matches_reference() {
    matches_reference(&forced_columns(64));
}

fn matches_reference(quads: &Ops) {
    let cases = [
        // Partial tiles in m and n, a partial last k step.
        case(
            (&[], &[]),
            (200, 36, 136),
            false,
            (true, Some(UnaryOp::Gelu)),
        ),
        case((&[], &[]), (129, 8, 4), true, (false, None)),
        // Many k steps, B along k.
        case((&[], &[]), (140, 256, 200), true, (true, None)),
        // Batches: both, B broadcast, A broadcast.
        case(
            (&[2], &[2]),
            (70, 44, 260),
            false,
            (false, Some(UnaryOp::Relu)),
        ),
        case((&[3], &[]), (65, 4, 128), true, (true, Some(UnaryOp::Silu))),
        case((&[], &[2]), (66, 12, 8), false, (true, None)),
        // Columns not whole quads (B along k): the epilogue stores lane
        // by lane; above, it stores quads.
        case((&[], &[]), (130, 20, 70), true, (true, Some(UnaryOp::Gelu))),
    ];
    for (number, c) in cases.iter().enumerate() {
        let mut rng = Gen::new(40 + number as u64);
        let (m, k, n) = c.dims;
        let batch = if c.a_batch.is_empty() {
            &c.b_batch
        } else {
            &c.a_batch
        };
        let (nab, nbb, nb) = (
            c.a_batch.iter().product::<usize>(),
            c.b_batch.iter().product::<usize>(),
            batch.iter().product::<usize>(),
        );
        let round = |v: Vec<f64>| -> Vec<f64> { v.into_iter().map(|x| x as f32 as f64).collect() };
        let va = round(values(&mut rng, nab * m * k, -1.0, 1.0));
        let vb = round(values(&mut rng, nbb * k * n, -1.0, 1.0));
        let vbias = round(values(&mut rng, n, -1.0, 1.0));
        let mut sa = c.a_batch.clone();
        sa.extend([m, k]);
        let mut sb = c.b_batch.clone();
        sb.extend(if c.transpose_b { [n, k] } else { [k, n] });
        let a = input(DType::F32, &sa, &va, Placement::Contiguous);
        let b_values = stored(&vb, nbb, k, n, c.transpose_b);
        let b = input(DType::F32, &sb, &b_values, Placement::Contiguous);
        let bias = input(DType::F32, &[n], &vbias, Placement::Contiguous);
        let bias = c.bias.then_some(&bias);
        let options = MatmulOptions {
            transpose_b: c.transpose_b,
            activation: c.activation,
            ..MatmulOptions::default()
        };
        let what = format!("case {number}: {sa:?} x {sb:?}");
        assert_eq!(
            quads.matmul_kernel(&a, &b, options).unwrap(),
            QUADS,
            "{what}"
        );
        let shape = Ops::matmul_shape(a.desc(), b.desc(), options).unwrap();
        let mut inputs = vec![&a, &b];
        inputs.extend(bias);
        let got = run(
            &inputs,
            TensorDesc::new(DType::F32, shape).unwrap(),
            |g, out| quads.record_matmul(g, &a, &b, bias, options, out),
        )
        .unwrap();
        let batches = (nb, nab == nb, nbb == nb);
        let bias_values = c.bias.then_some(&vbias[..]);
        let (want, tol) =
            reference_batched((&va, &vb, bias_values), batches, c.dims, c.activation, U32);
        assert_within(&got, &want, &tol, &what);
    }
}

#[test]
fn other_layouts_run_the_plain_kernel() {
    let quads = forced(true);
    let values = |count: usize| vec![0.5; count];
    let plain =
        |a: &hrx_tensor::DeviceTensor, b, options| quads.matmul_kernel(a, b, options).unwrap();
    let b = input(
        DType::F32,
        &[8, 136],
        &values(8 * 136),
        Placement::Contiguous,
    );
    let a = input(
        DType::F32,
        &[200, 8],
        &values(200 * 8),
        Placement::Contiguous,
    );
    let defaults = MatmulOptions::default();
    assert_eq!(plain(&a, &b, defaults), QUADS);
    // k = 6: rows of A are not whole quads.
    let a6 = input(DType::F32, &[200, 6], &values(1200), Placement::Contiguous);
    let b6 = input(
        DType::F32,
        &[6, 136],
        &values(6 * 136),
        Placement::Contiguous,
    );
    assert_eq!(plain(&a6, &b6, defaults), "tiled");
    // A starting one element into its storage, rows 3 elements apart.
    let padded = input(DType::F32, &[200, 8], &values(200 * 8), Placement::Padded);
    assert_eq!(plain(&padded, &b, defaults), "tiled");
    // A stored transposed (contiguous along m).
    let at = input(
        DType::F32,
        &[8, 200],
        &values(200 * 8),
        Placement::Contiguous,
    );
    let transposed = MatmulOptions {
        transpose_a: true,
        ..defaults
    };
    assert_eq!(plain(&at, &b, transposed), "tiled");
    // f16 operands never take it; nor anything with the kernel turned off.
    let a16 = input(
        DType::F16,
        &[200, 8],
        &values(200 * 8),
        Placement::Contiguous,
    );
    let b16 = input(
        DType::F16,
        &[8, 136],
        &values(8 * 136),
        Placement::Contiguous,
    );
    assert_ne!(plain(&a16, &b16, defaults), QUADS);
    let off = forced(false);
    assert_eq!(off.matmul_kernel(&a, &b, defaults).unwrap(), "tiled");
    // The built-in choice for a product of 4 tiles is the plain kernel on
    // any device (on a CPU device, for every product).
    assert_eq!(ops().matmul_kernel(&a, &b, defaults).unwrap(), "tiled");
}
