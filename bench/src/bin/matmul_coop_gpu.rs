//! GPU check and timing of matmul on the live device (run on the H200):
//! f16 inputs (decode kernel for few rows, cooperative-matrix kernel where
//! the device reports a 16x16x16 f16 -> f32 shape, the tiled kernel
//! elsewhere) and f32, each checked against an f64 reference on sampled
//! elements, then timed; every line names the kernel that ran.
//!
//! `cargo run --release -p hrx-bench --bin matmul_coop_gpu [--quick | --decode | --big]`
//! prints one line per case and exits non-zero on a wrong result.

use hrx_runtime::Runtime;
use hrx_tensor::{
    DType, DeviceTensor, Ops, TensorDesc,
    ops::{MatmulOptions, Tuning, UnaryOp, coop_matmul_source},
};
use std::time::Instant;

fn lcg(seed: &mut u64) -> f64 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

fn rounded(v: f64, dtype: DType) -> f64 {
    if dtype == DType::F16 {
        half::f16::from_f64(v).to_f64()
    } else {
        f64::from(v as f32)
    }
}

struct Case {
    dtype: DType,
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    options: MatmulOptions,
    bias: bool,
    timed: bool,
}

fn main() -> hrx_core::Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--decode`: only the timed decode shapes (for CPU devices, where
    // 8192^3 takes minutes).
    let decode_only = std::env::args().any(|a| a == "--decode");
    // `--big`: only the timed f16 8192^3 (for tuning runs).
    let big_only = std::env::args().any(|a| a == "--big");
    let runtime = Runtime::from_env()?;
    let target = runtime.gpu()?.target().clone();
    // Tuning runs force the tensor-core shapes through these variables; a
    // malformed or invalid value is an error, not a silent default.
    let var = |name: &str| std::env::var(name).ok();
    let tuning = Tuning::parse(
        var("HRX_COOP_TILES").as_deref(),
        var("HRX_SPLITK").as_deref(),
    )?;
    let ops = Ops::new(&runtime).with_tuning(tuning);
    println!(
        "device: {}; cooperative f16 kernel: {}",
        target.name,
        coop_matmul_source(&target, 4096, false, None).is_some()
    );
    let plain = MatmulOptions::default();
    let mut cases = vec![];
    // Correctness: partial tiles, transposes, batch, epilogue.
    for (m, n, k, ta, tb, act) in [
        (1, 1, 1, false, false, None),
        (17, 33, 50, false, false, None),
        (130, 70, 47, true, false, Some(UnaryOp::Relu)),
        (64, 200, 96, false, true, Some(UnaryOp::Gelu)),
        (257, 129, 300, true, true, Some(UnaryOp::Silu)),
        // Tensor-core kernel, row-major operands, partial tiles.
        (130, 136, 72, false, false, None),
        (200, 520, 264, false, false, Some(UnaryOp::Relu)),
        // The wide 128 x 256 tensor-core tiling (enough workgroups at batch
        // 3), partial tiles in m, n and k: 16-byte copies of both operands,
        // of A only, and element copies of both.
        (1300, 2104, 296, false, false, Some(UnaryOp::Gelu)),
        (1290, 2056, 264, false, true, None),
        (1300, 2100, 300, true, true, Some(UnaryOp::Silu)),
        // k a multiple of 4 but not of 8: A copied element by element.
        (260, 1028, 100, false, false, Some(UnaryOp::Relu)),
        // Decode kernel: 16-byte loads, 4-byte words, several row tiles.
        (5, 264, 300, false, false, Some(UnaryOp::Gelu)),
        (3, 130, 77, true, false, None),
        (13, 4096, 515, false, false, Some(UnaryOp::Relu)),
        // Split-k tensor-core kernel (f16, 8 < m <= 64): 16-byte loads with
        // partial tiles in k and n; element loads (transposed operands, odd
        // extents); one full row fragment set over many splits.
        (24, 520, 1000, false, false, Some(UnaryOp::Gelu)),
        (40, 201, 300, true, true, Some(UnaryOp::Silu)),
        (64, 4096, 512, false, false, None),
        (9, 72, 4100, false, true, Some(UnaryOp::Relu)),
        // B contiguous along k (transposed) and aligned: staged n-major
        // with 16-byte copies, fragments loaded column-major (split-k with
        // partial column slabs and many splits, then the tensor-core kernel
        // with partial tiles).
        (9, 72, 4104, false, true, Some(UnaryOp::Relu)),
        (33, 1000, 520, false, true, Some(UnaryOp::Silu)),
        // Split-k, many slabs and splits per batch entry (their counters).
        (64, 4096, 4096, false, true, Some(UnaryOp::Gelu)),
        (300, 600, 136, false, true, Some(UnaryOp::Gelu)),
    ] {
        for dtype in [DType::F16, DType::F32] {
            cases.push(Case {
                dtype,
                batch: 3,
                m,
                n,
                k,
                options: MatmulOptions {
                    transpose_a: ta,
                    transpose_b: tb,
                    activation: act,
                },
                bias: true,
                timed: false,
            });
        }
    }
    if !quick {
        let decode_shapes = [1, 2, 4, 8, 16, 32, 64]
            .into_iter()
            .flat_map(|m| [(DType::F16, m, false), (DType::F16, m, true)])
            .chain([1, 8, 64].map(|m| (DType::F32, m, false)));
        for (dtype, m, transpose_b) in decode_shapes {
            cases.push(Case {
                dtype,
                batch: 1,
                m,
                n: 4096,
                k: 4096,
                options: MatmulOptions {
                    transpose_b,
                    ..plain
                },
                bias: false,
                timed: true,
            });
        }
        let big = [(DType::F16, false), (DType::F16, true), (DType::F32, false)];
        for (dtype, transpose_b) in big {
            if decode_only {
                break;
            }
            cases.push(Case {
                dtype,
                batch: 1,
                m: 8192,
                n: 8192,
                k: 8192,
                options: MatmulOptions {
                    transpose_b,
                    ..plain
                },
                bias: false,
                timed: true,
            });
        }
    }
    if big_only {
        cases.retain(|c| c.timed && c.m == 8192 && c.dtype == DType::F16);
    }
    let mut failed = false;
    for c in &cases {
        // One case's failure (a driver that cannot build a pipeline, say)
        // is reported and the remaining cases still run.
        let result = (|| -> hrx_core::Result<(String, bool)> {
            let mut seed = (c.m * 31 + c.n * 7 + c.k) as u64;
            let (ra, ca) = if c.options.transpose_a {
                (c.k, c.m)
            } else {
                (c.m, c.k)
            };
            let (rb, cb) = if c.options.transpose_b {
                (c.n, c.k)
            } else {
                (c.k, c.n)
            };
            let va: Vec<f64> = (0..c.batch * ra * ca)
                .map(|_| rounded(lcg(&mut seed), c.dtype))
                .collect();
            let vb: Vec<f64> = (0..c.batch * rb * cb)
                .map(|_| rounded(lcg(&mut seed), c.dtype))
                .collect();
            let vbias: Vec<f64> = (0..c.n)
                .map(|_| rounded(lcg(&mut seed), DType::F32))
                .collect();
            let a = DeviceTensor::from_values(&runtime, c.dtype, vec![c.batch, ra, ca], &va)?;
            let b = DeviceTensor::from_values(&runtime, c.dtype, vec![c.batch, rb, cb], &vb)?;
            let bias_t = DeviceTensor::from_values(&runtime, DType::F32, vec![c.n], &vbias)?;
            let bias = c.bias.then_some(&bias_t);
            let kernel = ops.matmul_kernel(&a, &b, c.options)?;
            let out = ops.matmul(&a, &b, bias, c.options)?;
            let got = out.to_values()?;
            // Replays of one prepared graph give the same bits (kernels
            // whose state carries between runs, such as split-k's slab
            // counters, must leave it as they found it).
            let mut replayed = true;
            if !c.timed {
                let again = ops.output(out.desc().clone())?;
                let mut graph = runtime.graph();
                ops.record_matmul(&mut graph, &a, &b, bias, c.options, &again)?;
                let exec = graph.prepare()?;
                for _ in 0..3 {
                    exec.submit()?.wait()?;
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    replayed &= bits(&again.to_values()?) == bits(&got);
                }
            }
            // Sampled reference elements (the full reference is too slow at 8192^3).
            let at =
                |v: &[f64], bi: usize, r: usize, col: usize, rows: usize, cols: usize, t: bool| {
                    if t {
                        v[bi * rows * cols + col * rows + r]
                    } else {
                        v[bi * rows * cols + r * cols + col]
                    }
                };
            let mut worst = 0.0f64;
            let samples = 257usize;
            for s in 0..samples {
                let idx = (s * 7919 + s * s * 31) % got.len();
                let (bi, rem) = (idx / (c.m * c.n), idx % (c.m * c.n));
                let (i, j) = (rem / c.n, rem % c.n);
                let mut want: f64 = (0..c.k)
                    .map(|q| {
                        at(&va, bi, i, q, c.m, c.k, c.options.transpose_a)
                            * at(&vb, bi, q, j, c.k, c.n, c.options.transpose_b)
                    })
                    .sum();
                if c.bias {
                    want += vbias[j];
                }
                if let Some(op) = c.options.activation {
                    want = match op {
                        UnaryOp::Relu => want.max(0.0),
                        UnaryOp::Silu => want / (1.0 + (-want).exp()),
                        _ => 0.5 * want * (1.0 + libm_erf(want / std::f64::consts::SQRT_2)),
                    };
                }
                let tol = 1e-3 * (c.k as f64).sqrt() * (1.0 + want.abs());
                let err = (got[idx] - want).abs();
                worst = worst.max(err / tol);
            }
            let ok = worst <= 1.0 && replayed;
            let mut line = format!(
                "{:?} {}x{}x{}x{} {:?} [{kernel}]: {} (worst error/tolerance {worst:.3})",
                c.dtype,
                c.batch,
                c.m,
                c.k,
                c.n,
                c.options,
                if ok {
                    "ok"
                } else if replayed {
                    "WRONG"
                } else {
                    "WRONG (a replay differs)"
                }
            );
            if c.timed {
                // Enough dispatches that one submission's overhead (~15-40 us)
                // stays small against the work.
                let reps = if target.kind == hrx_core::DeviceKind::Cpu {
                    3
                } else if c.m * c.n * c.k < 1 << 30 {
                    200
                } else {
                    20
                };
                let desc = TensorDesc::new(DType::F32, vec![c.batch, c.m, c.n])?;
                let outs: Vec<DeviceTensor> = (0..reps)
                    .map(|_| ops.output(desc.clone()))
                    .collect::<Result<_, _>>()?;
                let mut graph = runtime.graph();
                for o in &outs {
                    ops.record_matmul(&mut graph, &a, &b, None, c.options, o)?;
                }
                let exec = graph.prepare()?;
                exec.submit()?.wait()?;
                let start = Instant::now();
                exec.submit()?.wait()?;
                let secs = start.elapsed().as_secs_f64() / reps as f64;
                let flops = 2.0 * (c.batch * c.m * c.n * c.k) as f64;
                let bytes = (c.batch * (c.m * c.k + c.k * c.n)) as f64 * c.dtype.bytes() as f64
                    + (c.batch * c.m * c.n * 4) as f64;
                line += &format!(
                    "; {:.1} us, {:.1} TFLOP/s, {:.0} GB/s",
                    secs * 1e6,
                    flops / secs / 1e12,
                    bytes / secs / 1e9
                );
            }
            Ok((line, ok))
        })();
        match result {
            Ok((line, ok)) => {
                failed |= !ok;
                println!("{line}");
            }
            Err(error) => {
                failed = true;
                println!(
                    "{:?} {}x{}x{}x{} {:?}: ERROR {error}",
                    c.dtype, c.batch, c.m, c.k, c.n, c.options
                );
            }
        }
    }
    if failed {
        eprintln!("some results were wrong");
        std::process::exit(1);
    }
    Ok(())
}

/// erf to ~1e-7 (Abramowitz-Stegun 7.1.26 is too coarse for gelu checks,
/// so a series / continued-fraction split).
fn libm_erf(x: f64) -> f64 {
    let t = x.abs();
    let y = if t < 2.5 {
        // Maclaurin series.
        let mut sum = t;
        let mut term = t;
        let t2 = t * t;
        for n in 1..60 {
            term *= -t2 / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // Continued fraction for erfc.
        let mut f = 0.0;
        for n in (1..60).rev() {
            f = (n as f64 / 2.0) / (t + f);
        }
        1.0 - (-t * t).exp() / std::f64::consts::PI.sqrt() / (t + f)
    };
    y.copysign(x)
}
