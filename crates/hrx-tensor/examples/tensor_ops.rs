//! Tensor operators: eager calls, strided views, and a recorded graph.
//!
//! 1. Eager: `h = relu(x @ w^T + bias)` with `w` stored `[n, k]` and read
//!    transposed in place, then softmax, a row-sum reduction, argmax and a
//!    permute, each checked against a CPU reference.
//! 2. Recorded: matmul and layer norm recorded into one graph, prepared once
//!    and submitted twice after the inputs' producers.
//!
//! Run with `cargo run -p hrx-tensor --example tensor_ops`.

use hrx_runtime::{Result, Runtime};
use hrx_tensor::{
    DType, DeviceTensor, Error, Ops, TensorDesc,
    ops::{MatmulOptions, Reduction, UnaryOp},
};

const M: usize = 8;
const K: usize = 32;
const N: usize = 16;

/// Deterministic values in [-1, 1) (a 64-bit LCG), so runs are repeatable.
fn values(count: usize, seed: u64) -> Vec<f64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // The top 24 bits are exact in f32, so uploads lose nothing.
            (state >> 40) as f64 / (1u64 << 23) as f64 - 1.0
        })
        .collect()
}

/// Compare device results with a reference; `what` names the check.
fn check(what: &str, got: &[f64], expected: &[f64], tolerance: f64) -> Result<()> {
    if got.len() != expected.len() {
        return Err(Error::msg(format!(
            "{what}: {} values, expected {}",
            got.len(),
            expected.len()
        )));
    }
    let worst = got
        .iter()
        .zip(expected)
        .map(|(g, e)| (g - e).abs() / e.abs().max(1.0))
        .fold(0.0, f64::max);
    println!(
        "{what:<40} {:>4} values, worst error {worst:.2e}",
        got.len()
    );
    if worst > tolerance {
        return Err(Error::msg(format!(
            "{what}: error {worst:e} exceeds {tolerance:e}"
        )));
    }
    Ok(())
}

/// `relu(x @ w^T + bias)` with x `[M, K]`, w `[N, K]`, in f64.
fn reference_linear(x: &[f64], w: &[f64], bias: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; M * N];
    for i in 0..M {
        for j in 0..N {
            let dot: f64 = (0..K).map(|k| x[i * K + k] * w[j * K + k]).sum();
            out[i * N + j] = (dot + bias[j]).max(0.0);
        }
    }
    out
}

fn reference_softmax(h: &[f64]) -> Vec<f64> {
    h.chunks(N)
        .flat_map(|row| {
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            row.iter().map(move |v| (v - max).exp() / sum)
        })
        .collect()
}

fn reference_layer_norm(h: &[f64], eps: f64) -> Vec<f64> {
    h.chunks(N)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / N as f64;
            let variance = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / N as f64;
            let scale = 1.0 / (variance + eps).sqrt();
            row.iter().map(move |v| (v - mean) * scale)
        })
        .collect()
}

fn main() -> Result<()> {
    let runtime = Runtime::from_env()?;
    println!("device: {}", runtime.gpu()?.target().name);
    let ops = Ops::new(&runtime);

    let (x_host, w_host, bias_host) = (values(M * K, 1), values(N * K, 2), values(N, 3));
    let x = DeviceTensor::from_values(&runtime, DType::F32, vec![M, K], &x_host)?;
    let w = DeviceTensor::from_values(&runtime, DType::F32, vec![N, K], &w_host)?;
    let bias = DeviceTensor::from_values(&runtime, DType::F32, vec![N], &bias_host)?;
    let linear = MatmulOptions {
        transpose_b: true,
        activation: Some(UnaryOp::Relu),
        ..MatmulOptions::default()
    };

    // 1. Eager operators: each returns its output at once, with the
    // submission that produces it; `to_values` waits for that.
    let h = ops.matmul(&x, &w, Some(&bias), linear)?;
    let h_values = h.to_values()?;
    let h_expected = reference_linear(&x_host, &w_host, &bias_host);
    check(
        "relu(x @ w^T + b)  [8,32]x[16,32]^T",
        &h_values,
        &h_expected,
        1e-5,
    )?;

    let p = ops.softmax(&h)?;
    let p_expected = reference_softmax(&h_expected);
    check("softmax over rows", &p.to_values()?, &p_expected, 1e-5)?;

    let row_sums = ops.reduce(Reduction::Sum, &p, 1)?;
    check(
        "sum of each softmax row",
        &row_sums.to_values()?,
        &[1.0; M],
        1e-5,
    )?;

    let argmax = ops.argmax(&h)?;
    let argmax_expected: Vec<f64> = h_expected
        .chunks(N)
        .map(|row| {
            // First index of the largest value, as the operator defines it.
            let best = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            row.iter().position(|&v| v == best).unwrap_or(0) as f64
        })
        .collect();
    check(
        "argmax of each row (i32)",
        &argmax.to_values()?,
        &argmax_expected,
        0.0,
    )?;

    // A permuted view costs nothing; `permute` packs it into a new tensor.
    // Moving values is exact: compare with the device's own `h`.
    let ht = ops.permute(&h, &[1, 0])?;
    let ht_expected: Vec<f64> = (0..N)
        .flat_map(|j| (0..M).map(move |i| (i, j)))
        .map(|(i, j)| h_values[i * N + j])
        .collect();
    check(
        "permute [8,16] -> [16,8]",
        &ht.to_values()?,
        &ht_expected,
        0.0,
    )?;

    // 2. Recorded: two operators in one graph, prepared once (kernels
    // compiled, barriers derived, command buffer recorded), then replayed.
    let hidden = ops.output(TensorDesc::new(DType::F32, vec![M, N])?)?;
    let mut normalized = ops.output(TensorDesc::new(DType::F32, vec![M, N])?)?;
    let mut graph = runtime.graph();
    ops.record_matmul(&mut graph, &x, &w, Some(&bias), linear, &hidden)?;
    ops.record_layer_norm(&mut graph, &hidden, None, None, 1e-5, &normalized)?;
    let graph = graph.prepare()?;
    println!(
        "recorded graph: 2 operators, {} barrier(s)",
        graph.barriers().len()
    );
    let inputs = [
        x.completion().clone(),
        w.completion().clone(),
        bias.completion().clone(),
    ];
    let norm_expected = reference_layer_norm(&h_expected, 1e-5);
    for replay in 1..=2 {
        normalized.set_producer(graph.submit_after(&inputs)?);
        check(
            &format!("layer_norm(linear), replay {replay}"),
            &normalized.to_values()?,
            &norm_expected,
            1e-4,
        )?;
    }
    println!("ok");
    Ok(())
}
