//! The decode (skinny-m) matmul kernel against an f64 reference: m in
//! 1..=64 (rows beyond one 8-row tile go through several workgroups, up
//! to the 64-row decode threshold of devices without cooperative matrices), odd and even k and
//! n so every B load width is used (16-byte quads where n is a multiple of
//! 8 (f16) or 4 (f32), 4-byte words for even n, strided elements for odd n,
//! transposed or padded B), transposes, batches with broadcasting, bias and
//! activation. Tolerance (per element, `common::matmul::matmul_bound`):
//! the worst-case rounding of k products and their f32 sum with the bias
//! in any order, `(k + 2) u (sum |a b| + |bias|)` with u = 2^-24 (2^-23
//! on the H200's cooperative-matrix split-k kernel, whose tensor cores
//! may truncate), through the activation's slope, plus the activation's
//! own error. Inputs are rounded to their dtype first, so the reference
//! sees what the kernel reads.

use crate::common::{
    matmul::{
        Operands, accumulation_roundoff, check_matmul, f16_round, f32_round, operand_shape, stored,
    },
    *,
};
use hrx_core::Target;
use hrx_tensor::{
    DType, DeviceTensor, Ops, TensorDesc,
    ops::{MatmulOptions, UnaryOp, decode_matmul_source},
};
use hrx_test_support::spirv_val;
use proptest::prelude::*;

fn n_dim() -> impl Strategy<Value = usize> {
    // Multiples of 8 and 4 (quads), even (words), odd (elements).
    prop_oneof![
        3 => (1usize..12).prop_map(|q| 8 * q),
        1 => (1usize..20).prop_map(|q| 4 * q),
        1 => (1usize..40).prop_map(|q| 2 * q),
        2 => (0usize..40).prop_map(|q| 2 * q + 1),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decode_matmul_matches_reference(
        f16 in any::<bool>(),
        m in prop_oneof![4 => 1usize..=8, 2 => 9usize..=16, 1 => 17usize..=64],
        n in n_dim(),
        k in prop_oneof![3 => (0usize..60).prop_map(|q| 2 * q + 1), 1 => 1usize..130],
        batch in prop_oneof![Just(vec![]), Just(vec![1]), Just(vec![3])],
        seed in any::<u64>(),
    ) {
        let dtype = if f16 { DType::F16 } else { DType::F32 };
        let round = |v: f64| if f16 { f16_round(v) } else { f32_round(v) };
        let mut rng = Gen::new(seed);
        // B mostly [k, n] (the decode layout), sometimes transposed or padded.
        let options = MatmulOptions {
            transpose_a: rng.below(4) == 0,
            transpose_b: rng.below(4) == 0,
            activation: [None, Some(UnaryOp::Relu), Some(UnaryOp::Gelu), Some(UnaryOp::Silu)][rng.below(4)],
        };
        let Operands { b_batch, nb, nbb, va, vb, vbias, with_bias } =
            Operands::random(&mut rng, &batch, (m, k, n), round);
        let pb = [Placement::Contiguous, Placement::Contiguous, Placement::Padded][rng.below(3)];
        let a = input(dtype, &operand_shape(&batch, m, k, options.transpose_a), &stored(&va, nb, m, k, options.transpose_a), Placement::Contiguous);
        let b = input(dtype, &operand_shape(&b_batch, k, n, options.transpose_b), &stored(&vb, nbb, k, n, options.transpose_b), pb);
        let bias = input(DType::F32, &[n], &vbias, Placement::Contiguous);
        let bias = with_bias.then_some(&bias);
        let kernel = ops().matmul_kernel(&a, &b, options).unwrap();
        check_matmul(
            (&a, &b, bias.map(|t| (t, &vbias[..]))),
            (&va, &vb),
            (nb, !b_batch.is_empty()),
            (m, k, n),
            options,
            accumulation_roundoff(kernel),
            &format!("{dtype} decode matmul {m}x{k}x{n} batch {batch:?}/{b_batch:?} {options:?} bias {with_bias} {pb:?} on {kernel}"),
        );
    }
}

#[test]
fn decode_kernel_is_chosen_for_few_rows() {
    let a = input(DType::F32, &[4, 64], &[0.5; 256], Placement::Contiguous);
    let b = input(DType::F32, &[64, 32], &[0.25; 2048], Placement::Contiguous);
    let name = ops()
        .matmul_kernel(&a, &b, MatmulOptions::default())
        .unwrap();
    assert_eq!(name, "decode (16-byte loads)");
    // The f16 threshold: 128 rows still decode without cooperative
    // matrices; with them (the H200) the split-k kernel takes over from
    // 4 rows. 129 rows never decode.
    let coop = ops()
        .runtime()
        .gpu()
        .unwrap()
        .target()
        .supports_cooperative_matrix();
    let bh = input(DType::F16, &[64, 32], &[0.25; 2048], Placement::Contiguous);
    for (rows, coop_kernel) in [
        (3, "decode (16-byte loads)"),
        (4, "cooperative matrix (split k)"),
        (64, "cooperative matrix (split k)"),
        (128, "cooperative matrix"),
    ] {
        let a = input(
            DType::F16,
            &[rows, 64],
            &vec![0.5; rows * 64],
            Placement::Contiguous,
        );
        let name = ops()
            .matmul_kernel(&a, &bh, MatmulOptions::default())
            .unwrap();
        let expected = if coop {
            coop_kernel
        } else {
            "decode (16-byte loads)"
        };
        assert_eq!(name, expected, "{rows} rows");
    }
    let a = input(
        DType::F16,
        &[129, 64],
        &[0.5; 129 * 64],
        Placement::Contiguous,
    );
    let name = ops()
        .matmul_kernel(&a, &bh, MatmulOptions::default())
        .unwrap();
    assert_ne!(name, "decode (16-byte loads)");
    let a = input(
        DType::F32,
        &[129, 64],
        &[0.5; 129 * 64],
        Placement::Contiguous,
    );
    let name = ops()
        .matmul_kernel(&a, &b, MatmulOptions::default())
        .unwrap();
    assert_eq!(name, "tiled");
}

/// Split-k matmuls recorded into one graph share its scratch and its
/// zeroed scratch (one allocation of each for all, not one each) and still
/// all come out right, so the hazards order them and each leaves its slab
/// counters at zero for the next. Only devices with cooperative matrices (the
/// H200) run split-k; elsewhere this checks nothing and says so.
#[test]
fn split_k_matmuls_of_one_graph_share_one_scratch() {
    let runtime = hrx_runtime::Runtime::from_env().unwrap();
    let ops = Ops::new(&runtime);
    let (m, k, n) = (16, 512, 256);
    let a = DeviceTensor::from_values(&runtime, DType::F16, vec![m, k], &vec![0.5; m * k]).unwrap();
    let b =
        DeviceTensor::from_values(&runtime, DType::F16, vec![k, n], &vec![0.25; k * n]).unwrap();
    let kernel = ops.matmul_kernel(&a, &b, MatmulOptions::default()).unwrap();
    if kernel != "cooperative matrix (split k)" {
        eprintln!("no split-k on this device ({kernel}); nothing to check");
        return;
    }
    let outs: Vec<DeviceTensor> = (0..8)
        .map(|_| {
            ops.output(TensorDesc::new(DType::F32, vec![m, n]).unwrap())
                .unwrap()
        })
        .collect();
    // A first recording makes what the registry caches (a zero bias).
    ops.record_matmul(
        &mut runtime.graph(),
        &a,
        &b,
        None,
        MatmulOptions::default(),
        &outs[0],
    )
    .unwrap();
    // Allocations made, not alive: the uploads' staging buffers are freed
    // by the completion watcher at any moment.
    let before = runtime.memory_stats().total_allocations;
    let mut graph = runtime.graph();
    for out in &outs {
        ops.record_matmul(&mut graph, &a, &b, None, MatmulOptions::default(), out)
            .unwrap();
    }
    assert_eq!(runtime.memory_stats().total_allocations, before + 2);
    let exec = graph.prepare().unwrap();
    for _ in 0..3 {
        exec.submit().unwrap().wait().unwrap();
    }
    for out in &outs {
        let got = out.to_values().unwrap();
        assert!(
            got.iter().all(|&v| v == k as f64 * 0.125),
            "{:?}",
            &got[..8]
        );
    }
}

#[test]
fn decode_kernel_compiles_for_hopper() {
    // The H200 shape (subgroups of 32, 512 work items) for every load width.
    let compiler = hrx_loom::Compiler::for_target(None, &Target::hopper()).unwrap();
    for dtype in [DType::F16, DType::F32] {
        for transpose_b in [false, true] {
            let src =
                decode_matmul_source(&Target::hopper(), dtype, transpose_b, Some(UnaryOp::Gelu));
            let artifact = compiler
                .module(&src)
                .and_then(|module| {
                    module.compile_uncached(&hrx_loom::Specialization::new("@matmul_gemv"))
                })
                .unwrap_or_else(|e| panic!("{dtype} transposed {transpose_b}: {e}"));
            spirv_val::validate(&format!("decode-{dtype}-{transpose_b}"), artifact.spirv());
        }
    }
}
