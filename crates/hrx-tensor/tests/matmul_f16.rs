//! f16 matmul (f32 accumulation, f32 output) against an f64 reference on
//! the f16-rounded inputs: batches, transposes, bias and activation,
//! partial tiles and size-1 extents. On lavapipe this runs the decode
//! kernel (up to 64 rows) and the tiled workgroup-memory kernel; the cooperative-matrix kernel is compiled for
//! `Target::hopper()` and its SPIR-V validated here, and run on the H200 by
//! the `matmul_coop_gpu` example. Tolerance: atol 2e-3 + rtol 2e-3 (the
//! products of f16 values are exact in f32; only the f32 sums round).

mod common;

use common::{
    cases::unary_ref,
    matmul::{Operands, f16_round, operand_shape, stored, validate_modern},
    *,
};
use hrx_core::Target;
use hrx_loom::{Compiler, Specialization};
use hrx_tensor::{
    DType, Ops, TensorDesc,
    ops::{MatmulOptions, UnaryOp, coop_matmul_source},
};
use proptest::prelude::*;

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(1usize), 6 => 2usize..40]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn f16_matmul_matches_reference(
        // Above 64 rows the tiled kernel runs on lavapipe (the decode kernel
        // below; tests/matmul_decode.rs covers it in depth).
        m in prop_oneof![3 => dim(), 2 => 65usize..100], n in dim(), k in dim(),
        batch in prop_oneof![Just(vec![]), Just(vec![1]), Just(vec![3])],
        seed in any::<u64>(),
    ) {
        let mut rng = Gen::new(seed);
        let options = MatmulOptions {
            transpose_a: rng.below(2) == 0,
            transpose_b: rng.below(2) == 0,
            activation: [None, Some(UnaryOp::Relu), Some(UnaryOp::Silu)][rng.below(3)],
        };
        let Operands { b_batch, nb, nbb, va, vb, vbias, with_bias } =
            Operands::random(&mut rng, &batch, (m, k, n), f16_round);
        let a = input(DType::F16, &operand_shape(&batch, m, k, options.transpose_a), &stored(&va, nb, m, k, options.transpose_a), Placement::Contiguous);
        let b = input(DType::F16, &operand_shape(&b_batch, k, n, options.transpose_b), &stored(&vb, nbb, k, n, options.transpose_b), Placement::Contiguous);
        let bias = input(DType::F32, &[n], &vbias, Placement::Contiguous);
        let bias = with_bias.then_some(&bias);
        let shape = Ops::matmul_shape(a.desc(), b.desc(), options).unwrap();
        let mut inputs = vec![&a, &b];
        inputs.extend(bias);
        let got = run(&inputs, TensorDesc::new(DType::F32, shape).unwrap(), |g, out| {
            ops().record_matmul(g, &a, &b, bias, options, out)
        }).unwrap();
        let mut want = Vec::new();
        for bi in 0..nb {
            let bb = if b_batch.is_empty() { 0 } else { bi };
            for i in 0..m {
                for j in 0..n {
                    let mut s: f64 = (0..k).map(|q| va[bi * m * k + i * k + q] * vb[bb * k * n + q * n + j]).sum();
                    if with_bias { s += vbias[j]; }
                    want.push(options.activation.map_or(s, |op| unary_ref(op, s)));
                }
            }
        }
        assert_close(&got, &want, 2e-3, 2e-3, &format!("f16 matmul {m}x{k}x{n} batch {batch:?}/{b_batch:?} {options:?} bias {with_bias}"));
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
            let artifact = compiler
                .module(&src)
                .and_then(|module| module.compile_uncached(&Specialization::new("@matmul_coop")))
                .unwrap_or_else(|e| panic!("m={m} transposed_b={transposed_b}: {e}"));
            validate_modern(
                &format!("coop-m{m}-t{transposed_b}"),
                &artifact.spirv_bytes(),
            );
        }
    }
}
