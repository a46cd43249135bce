//! f16 matmul (f32 accumulation, f32 output) against an f64 reference on
//! the f16-rounded inputs: batches with either operand's batch broadcast
//! (batch stride 0), transposes, contiguous, padded (gapped rows,
//! unaligned start) and transposed-view operands, bias and activation,
//! partial tiles, size-1 extents and an empty inner axis (k = 0: the
//! output is the activation of the bias, or zeros, in every element). On
//! lavapipe this runs the decode kernels (up to 64 rows, k > 0) and the
//! tiled workgroup-memory kernel (more rows, and every k = 0); the
//! cooperative-matrix kernel is compiled for `Target::hopper()` and its
//! SPIR-V validated here, and run on the H200 by the `matmul_coop_gpu`
//! example. Tolerance (per element, `common::matmul::matmul_bound`):
//! products of f16 values are exact in f32, only the sums round, so the
//! output is within `(k + 2) u (sum |a b| + |bias|)` of the exact sum in
//! any order (u = 2^-24, 2^-23 on cooperative-matrix kernels), through the
//! activation's slope, plus the activation's own error; the bias is
//! rounded to f32 first.

use crate::common::{
    matmul::{
        BatchedOperands, accumulation_roundoff, check_matmul_batched, f16_round, f32_round,
        operand_shape, stored,
    },
    *,
};
use hrx_core::{Error, Target};
use hrx_loom::{Compiler, Specialization};
use hrx_tensor::{
    DType, DeviceTensor, TensorDesc,
    ops::{MatmulOptions, UnaryOp, coop_matmul_source},
};
use hrx_test_support::spirv_val;
use proptest::prelude::*;

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(1usize), 6 => 2usize..40]
}

/// Upload `BatchedOperands` as f16 A and B laid out as asked, and the f32
/// bias when used.
fn operands(
    o: &BatchedOperands,
    (m, k, n): (usize, usize, usize),
    options: MatmulOptions,
    (pa, pb): (Placement, Placement),
) -> (DeviceTensor, DeviceTensor, Option<DeviceTensor>) {
    let (ta, tb) = (options.transpose_a, options.transpose_b);
    let a = input(
        DType::F16,
        &operand_shape(&o.a_batch, m, k, ta),
        &stored(&o.va, o.nab, m, k, ta),
        pa,
    );
    let b = input(
        DType::F16,
        &operand_shape(&o.b_batch, k, n, tb),
        &stored(&o.vb, o.nbb, k, n, tb),
        pb,
    );
    let bias = o
        .with_bias
        .then(|| input(DType::F32, &[n], &o.vbias, Placement::Contiguous));
    (a, b, bias)
}

/// Run and check one case (see `check_matmul_batched`), naming the kernel
/// chosen in failures.
fn check(
    o: &BatchedOperands,
    dims: (usize, usize, usize),
    options: MatmulOptions,
    placements: (Placement, Placement),
    what: &str,
) {
    let (a, b, bias) = operands(o, dims, options, placements);
    let kernel = ops().matmul_kernel(&a, &b, options).unwrap();
    let (a_batched, b_batched) = o.batched();
    check_matmul_batched(
        (&a, &b, bias.as_ref().map(|t| (t, &o.vbias[..]))),
        (&o.va, &o.vb),
        (o.nb, a_batched, b_batched),
        dims,
        options,
        accumulation_roundoff(kernel),
        &format!(
            "f16 matmul {dims:?} batch {:?}/{:?} {options:?} bias {} {placements:?} on {kernel}: {what}",
            o.a_batch, o.b_batch, o.with_bias
        ),
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn f16_matmul_matches_reference(
        // Above 64 rows the tiled kernel runs on lavapipe (the decode kernel
        // below; matmul_decode.rs covers it in depth).
        m in prop_oneof![3 => dim(), 2 => 65usize..100], n in dim(),
        k in prop_oneof![1 => Just(0usize), 5 => dim()],
        batch in prop_oneof![Just(vec![]), Just(vec![1]), Just(vec![3]), Just(vec![2, 2])],
        seed in any::<u64>(),
    ) {
        let mut rng = Gen::new(seed);
        let options = MatmulOptions {
            transpose_a: rng.below(2) == 0,
            transpose_b: rng.below(2) == 0,
            activation: [None, Some(UnaryOp::Relu), Some(UnaryOp::Gelu), Some(UnaryOp::Silu)][rng.below(4)],
        };
        let o = BatchedOperands::random(&mut rng, &batch, (m, k, n), f16_round);
        let placements = (PLACEMENTS[rng.below(3)], PLACEMENTS[rng.below(3)]);
        check(&o, (m, k, n), options, placements, "random");
    }
}

/// k = 0 on the sizes that would pick each kernel (few rows: decode; few
/// rows of a transposed B: dot; many: tiled), with and without bias and
/// activation, a broadcast A and B, strided views: every element of the
/// poisoned output must be the activation of the bias, or zero. The
/// decode kernels leave k = 0 to the tiled (or cooperative-matrix) ones.
#[test]
fn f16_empty_inner_axis_writes_bias_or_zeros() {
    let mut rng = Gen::new(3);
    let relu = Some(UnaryOp::Relu);
    for (m, n, batch, transpose_b, activation) in [
        (1, 24, vec![], false, None),
        (3, 33, vec![3], false, relu),
        (2, 64, vec![3], true, None),
        (8, 129, vec![2, 2], true, Some(UnaryOp::Gelu)),
        (80, 17, vec![3], false, None),
        (130, 65, vec![2], true, Some(UnaryOp::Silu)),
    ] {
        for placements in [
            (Placement::Contiguous, Placement::Contiguous),
            (Placement::Transposed, Placement::Padded),
        ] {
            let options = MatmulOptions {
                transpose_a: false,
                transpose_b,
                activation,
            };
            let o = BatchedOperands::random(&mut rng, &batch, (m, 0, n), f16_round);
            check(&o, (m, 0, n), options, placements, "k = 0");
        }
    }
}

/// Broadcast A (batch stride 0) against a batched B, and the reverse, on
/// few rows (the decode kernels: 16-byte loads, rows of a transposed B,
/// elements) and many (tiled), with contiguous, padded (gapped rows,
/// unaligned start) and transposed-view operands, in f16 and f32
/// (matmul.rs broadcasts only B).
#[test]
fn broadcast_a_with_strided_operands() {
    use Placement::{Contiguous, Padded, Transposed};
    let mut rng = Gen::new(4);
    let batches: [(&[usize], &[usize], usize); 3] =
        [(&[], &[3], 3), (&[1, 1], &[2, 2], 4), (&[3], &[], 3)];
    let layouts = [
        (Contiguous, Contiguous, false),
        (Contiguous, Contiguous, true),
        (Padded, Transposed, false),
        (Transposed, Padded, true),
    ];
    for (m, k, n) in [(2, 40, 24), (5, 17, 9), (70, 33, 20)] {
        for (dtype, round) in [
            (DType::F16, f16_round as fn(f64) -> f64),
            (DType::F32, f32_round),
        ] {
            for ((a_batch, b_batch, nb), (pa, pb, transpose_b)) in
                batches.into_iter().flat_map(|b| layouts.map(|l| (b, l)))
            {
                let nab: usize = a_batch.iter().product();
                let nbb: usize = b_batch.iter().product();
                let mut drawn = |count| -> Vec<f64> {
                    values(&mut rng, count, -1.0, 1.0)
                        .into_iter()
                        .map(round)
                        .collect()
                };
                let (va, vb) = (drawn(nab * m * k), drawn(nbb * k * n));
                let a_shape = operand_shape(a_batch, m, k, false);
                let b_shape = operand_shape(b_batch, k, n, transpose_b);
                let a = input(dtype, &a_shape, &va, pa);
                let b = input(dtype, &b_shape, &stored(&vb, nbb, k, n, transpose_b), pb);
                let options = MatmulOptions {
                    transpose_b,
                    ..MatmulOptions::default()
                };
                let kernel = ops().matmul_kernel(&a, &b, options).unwrap();
                check_matmul_batched(
                    (&a, &b, None),
                    (&va, &vb),
                    (nb, nab == nb, nbb == nb),
                    (m, k, n),
                    options,
                    accumulation_roundoff(kernel),
                    &format!(
                        "{dtype} {m}x{k}x{n} batch {a_batch:?}/{b_batch:?} {pa:?}/{pb:?} \
                         transposed B {transpose_b} on {kernel}"
                    ),
                );
            }
        }
    }
}

#[test]
fn mixed_dtypes_are_refused() {
    let a = input(DType::F16, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let b = input(DType::F32, &[3, 2], &[1.0; 6], Placement::Contiguous);
    let e = ops()
        .matmul(&a, &b, None, MatmulOptions::default())
        .unwrap_err();
    assert!(
        e.to_string().contains("must both be f32 or both f16"),
        "{e}"
    );
}

/// An f16 output: where the cooperative-matrix kernel runs, every element
/// is the f32 output of the same product rounded once to f16 (the same
/// kernel and summation order, so exactly); where another kernel runs
/// (every product on lavapipe, few rows anywhere) it is refused as
/// unsupported before anything is recorded.
#[test]
fn f16_output_is_the_f32_result_rounded_once_or_refused() {
    let ops = ops();
    let mut rng = Gen::new(11);
    // Partial tiles in m, n and k; GELU and no activation; the wide
    // tiling (n = 2104 at enough rows); a decode-sized product.
    for (m, k, n, activation) in [
        (130, 72, 136, Some(UnaryOp::Gelu)),
        (200, 264, 70, None),
        (1300, 296, 2104, Some(UnaryOp::Gelu)),
        (4, 64, 64, None),
    ] {
        let a = input(
            DType::F16,
            &[m, k],
            &values(&mut rng, m * k, -1.0, 1.0),
            Placement::Contiguous,
        );
        let b = input(
            DType::F16,
            &[k, n],
            &values(&mut rng, k * n, -1.0, 1.0),
            Placement::Contiguous,
        );
        let bias = input(
            DType::F32,
            &[n],
            &values(&mut rng, n, -1.0, 1.0),
            Placement::Contiguous,
        );
        let options = MatmulOptions {
            activation,
            ..MatmulOptions::default()
        };
        let kernel = ops.matmul_kernel(&a, &b, options).unwrap();
        let wide = ops.matmul(&a, &b, Some(&bias), options).unwrap();
        let narrow = ops
            .output(TensorDesc::new(DType::F16, vec![m, n]).unwrap())
            .unwrap();
        let mut graph = ops.runtime().graph();
        let recorded = ops.record_matmul(&mut graph, &a, &b, Some(&bias), options, &narrow);
        let case = format!("{m}x{k}x{n} {activation:?} on {kernel}");
        if kernel != "cooperative matrix" {
            let error = recorded.unwrap_err();
            assert!(matches!(error, Error::Unsupported(_)), "{case}: {error}");
            assert!(error.to_string().contains("f16 output"), "{case}: {error}");
            assert!(graph.is_empty(), "{case}: a refusal records nothing");
            continue;
        }
        recorded.unwrap();
        graph.prepare().unwrap().submit().unwrap().wait().unwrap();
        let want: Vec<f64> = wide
            .to_values()
            .unwrap()
            .iter()
            .map(|&v| f64::from(half::f16::from_f32(v as f32)))
            .collect();
        let got = narrow.to_values().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{case}: element {i}: {g} against {w}"
            );
        }
    }
}

/// Products of many rows over a short k, the encoder's projections in
/// small: on the H200 they take the 256 x 128 x 32 tensor-core tiling
/// (a partial k step, columns not filling 256). Every 97th row (and the
/// last) against an f64 reference, within the accumulation bound
/// `k u sum |a b|` (u the kernel's roundoff) plus the bias's rounding;
/// elsewhere whatever kernel runs is checked the same way.
#[test]
fn many_rows_over_a_short_k() {
    let ops = ops();
    let mut rng = Gen::new(21);
    for (m, k, n) in [(8192, 40, 1152), (8192, 72, 384)] {
        let mut exact = |len, round: fn(f64) -> f64| -> Vec<f64> {
            values(&mut rng, len, -1.0, 1.0)
                .into_iter()
                .map(round)
                .collect()
        };
        let (va, vb) = (exact(m * k, f16_round), exact(k * n, f16_round));
        let vbias = exact(n, f32_round);
        let a = input(DType::F16, &[m, k], &va, Placement::Contiguous);
        let b = input(DType::F16, &[k, n], &vb, Placement::Contiguous);
        let bias = input(DType::F32, &[n], &vbias, Placement::Contiguous);
        let options = MatmulOptions::default();
        let kernel = ops.matmul_kernel(&a, &b, options).unwrap();
        let u = accumulation_roundoff(kernel);
        let got = ops
            .matmul(&a, &b, Some(&bias), options)
            .unwrap()
            .to_values()
            .unwrap();
        for i in (0..m).step_by(97).chain([m - 1]) {
            for j in 0..n {
                let terms = (0..k).map(|p| va[i * k + p] * vb[p * n + j]);
                let (sum, mag) = terms.fold((0.0, 0.0), |(s, g), t| (s + t, g + t.abs()));
                let want = sum + vbias[j];
                let tol = (k as f64 + 2.0) * u * (mag + vbias[j].abs());
                let g = got[i * n + j];
                assert!(
                    (g - want).abs() <= tol,
                    "{m}x{k}x{n} on {kernel}: [{i}, {j}] is {g}, expected {want} +- {tol}"
                );
            }
        }
    }
}

#[test]
fn coop_kernel_only_where_the_target_has_the_shape() {
    assert!(coop_matmul_source(&Target::lavapipe(), 64, false, None).is_none());
    let mut odd = Target::hopper();
    odd.subgroup_size_min = 16;
    assert!(coop_matmul_source(&odd, 64, false, None).is_none());
}

#[test]
fn coop_kernel_compiles_for_hopper_and_validates() {
    let compiler = Compiler::for_target(None, &Target::hopper()).unwrap();
    // Every tiling (decode and large m), with and without an epilogue, B
    // row-major or transposed (staged n-major, fragments column-major).
    for (m, act) in [
        (1, None),
        (20, Some(UnaryOp::Gelu)),
        (64, None),
        (4096, Some(UnaryOp::Silu)),
    ] {
        for transposed_b in [false, true] {
            let src = coop_matmul_source(&Target::hopper(), m, transposed_b, act).unwrap();
            assert_eq!(src.contains("coop.load<col_major>"), transposed_b);
            // Aligned rows of C: the epilogue stores quads.
            assert!(src.contains("vector.store"), "m={m}");
            let artifact = compiler
                .module(&src)
                .and_then(|module| module.compile_uncached(&Specialization::new("@matmul_coop")))
                .unwrap_or_else(|e| panic!("m={m} transposed_b={transposed_b}: {e}"));
            spirv_val::validate_modern(&format!("coop-m{m}-t{transposed_b}"), artifact.spirv());
        }
    }
}
