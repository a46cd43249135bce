//! Every corpus kernel, compiled for the live device's `Target`, runs
//! through hrx-runtime (a graph dispatch with the artifact's push constants
//! and `launch()` grid) and matches an f64 CPU reference.
//!
//! Sizes include partial workgroups; inputs are seeded random non-zero
//! values; outputs are poisoned with a NaN pattern before each run, and the
//! guard words past each output must stay poisoned. Tolerances are stated
//! per kernel (`EPS` is the f32 unit roundoff).

use super::run::{Rng, bits, check, gpu, idx, read, read_f32, rel};
use hrx::loom::{ScalarValue as S, Specialization};

/// Element counts: one item, less than a workgroup, partial last groups.
const SIZES: [usize; 5] = [1, 7, 255, 1000, 4099];
/// Matrix shapes (rows, cols): degenerate, tiny, tile edges, uneven.
const SHAPES: [(usize, usize); 5] = [(1, 1), (7, 3), (17, 33), (64, 16), (100, 41)];
const EPS: f64 = f32::EPSILON as f64 / 2.0;

fn spec(name: &str) -> Specialization {
    Specialization::new(name)
}

#[test]
fn fill() {
    // Exact: a store of the push constant.
    let g = gpu();
    let k = g.kernel(corpus!("fill.loom"), &spec("@fill"));
    let mut rng = Rng::new(1);
    for n in SIZES {
        let value = rng.f32_in(-10.0, 10.0);
        let out = g.output(n);
        g.run(&k, &[&out], &[idx(n), S::F32(value)], &[n as u64]);
        let got = read_f32("fill", &out, n);
        check("fill", &got, &vec![f64::from(value); n], |_| 0.0);
    }
}

#[test]
fn scale() {
    // Exact: one correctly rounded f32 multiply.
    let g = gpu();
    let k = g.kernel(corpus!("scale.loom"), &spec("@scale"));
    let mut rng = Rng::new(2);
    for n in SIZES {
        let x = rng.f32s(n, -100.0, 100.0);
        let factor = rng.f32_in(-3.0, 3.0);
        let data = g.input(&bits(&x));
        g.run(&k, &[&data], &[idx(n), S::F32(factor)], &[n as u64]);
        let want: Vec<f64> = x
            .iter()
            .map(|&v| f64::from((f64::from(v) * f64::from(factor)) as f32))
            .collect();
        check("scale", &read_f32("scale", &data, n), &want, |_| 0.0);
    }
}

#[test]
fn saxpy4() {
    // One fused (or mul+add) rounding: 2 ulp of |a x| + |y|.
    let g = gpu();
    let k = g.kernel(corpus!("saxpy4.loom"), &spec("@saxpy4"));
    let mut rng = Rng::new(3);
    for n in [4, 8, 1028, 4100, 16388] {
        let x = rng.f32s(n, -10.0, 10.0);
        let y = rng.f32s(n, -10.0, 10.0);
        let a = rng.f32_in(-2.0, 2.0);
        let (xb, yb) = (g.input(&bits(&x)), g.input(&bits(&y)));
        g.run(&k, &[&xb, &yb], &[idx(n), S::F32(a)], &[n as u64]);
        let want: Vec<f64> = (0..n)
            .map(|i| f64::from(a) * f64::from(x[i]) + f64::from(y[i]))
            .collect();
        let tol = |i: usize| 4.0 * EPS * (f64::from(a * x[i]).abs() + f64::from(y[i]).abs());
        check("saxpy4", &read_f32("saxpy4", &yb, n), &want, tol);
        // x is read-only: untouched.
        assert_eq!(read("saxpy4 x", &xb, n), bits(&x));
    }
}

#[test]
fn f16_to_f32() {
    // Exact: widening is exact; doubling an f16 below 2^15 is exact.
    use half::f16;
    let g = gpu();
    if !(g.target.shader_f16 && g.target.storage_16bit) {
        eprintln!("note: device lacks f16 storage or arithmetic; skipping");
        return;
    }
    let k = g.kernel(corpus!("f16_to_f32.loom"), &spec("@f16_to_f32"));
    let mut rng = Rng::new(4);
    for n in SIZES {
        let h: Vec<f16> = (0..n)
            .map(|_| f16::from_f32(rng.f32_in(-1000.0, 1000.0)))
            .collect();
        let words = n.div_ceil(2);
        let mut packed = vec![0u32; words];
        for (i, v) in h.iter().enumerate() {
            packed[i / 2] |= u32::from(v.to_bits()) << (16 * (i % 2));
        }
        let src = g.input(&packed);
        let dst = g.output(n);
        let back = g.output(words);
        g.run(&k, &[&src, &dst, &back], &[idx(n)], &[n as u64]);
        let want: Vec<f64> = h.iter().map(|v| f64::from(v.to_f32())).collect();
        check("f16->f32", &read_f32("f16->f32", &dst, n), &want, |_| 0.0);
        let got = read("f16 back", &back, words);
        for (i, v) in h.iter().enumerate() {
            let half_bits = (got[i / 2] >> (16 * (i % 2))) as u16;
            let want = f16::from_f64(v.to_f64() * 2.0);
            assert_eq!(f16::from_bits(half_bits), want, "f16 back [{i}] of {n}");
        }
        if n % 2 == 1 {
            // The odd element's neighbour half-word is not the kernel's.
            assert_eq!(got[words - 1] >> 16, super::run::POISON >> 16, "f16 tail");
        }
    }
}

#[test]
fn clamp2d() {
    // Exact: compares and selects only. The view starts at a byte offset;
    // the words before it must stay poisoned.
    let g = gpu();
    let k = g.kernel(corpus!("clamp2d.loom"), &spec("@clamp2d"));
    let mut rng = Rng::new(5);
    for (rows, cols) in SHAPES {
        let pad = 8;
        let x = rng.f32s(rows * cols, -5.0, 5.0);
        let (lo, hi) = (rng.f32_in(-3.0, -0.5), rng.f32_in(0.5, 3.0));
        let mut init = vec![super::run::POISON; pad];
        init.extend(bits(&x));
        let m = g.input(&init);
        let scalars = [
            idx(rows),
            idx(cols),
            S::F32(lo),
            S::F32(hi),
            S::Offset(4 * pad as u64),
        ];
        g.run(&k, &[&m], &scalars, &[rows as u64, cols as u64]);
        let got = read("clamp2d", &m, pad + rows * cols);
        assert!(
            got[..pad].iter().all(|&w| w == super::run::POISON),
            "clamp2d pad"
        );
        let got: Vec<f32> = got[pad..].iter().map(|&w| f32::from_bits(w)).collect();
        let want: Vec<f64> = x.iter().map(|&v| f64::from(v.clamp(lo, hi))).collect();
        check(&format!("clamp2d {rows}x{cols}"), &got, &want, |_| 0.0);
    }
}

#[test]
fn row_sum() {
    // Sequential f32 sum: cols * EPS * sum |x|.
    let g = gpu();
    let k = g.kernel(corpus!("row_sum.loom"), &spec("@row_sum"));
    let mut rng = Rng::new(6);
    for (rows, cols) in SHAPES.into_iter().chain([(130, 1), (3, 500)]) {
        let x = rng.f32s(rows * cols, -10.0, 10.0);
        let m = g.input(&bits(&x));
        let out = g.output(rows);
        g.run(
            &k,
            &[&m, &out],
            &[idx(rows), idx(cols)],
            &[rows as u64, cols as u64],
        );
        let row = |r: usize| &x[r * cols..(r + 1) * cols];
        let want: Vec<f64> = (0..rows)
            .map(|r| row(r).iter().map(|&v| f64::from(v)).sum())
            .collect();
        let tol =
            |r: usize| cols as f64 * EPS * row(r).iter().map(|v| f64::from(v.abs())).sum::<f64>();
        check("row_sum", &read_f32("row_sum", &out, rows), &want, tol);
    }
}

#[test]
fn wg_sum() {
    // Tree sum of 64 per workgroup: 6 levels, 6 * EPS * sum |x|.
    let g = gpu();
    let k = g.kernel(corpus!("wg_sum.loom"), &spec("@wg_sum"));
    let mut rng = Rng::new(7);
    for n in SIZES {
        let groups = n.div_ceil(64);
        let x = rng.f32s(n, -10.0, 10.0);
        let inb = g.input(&bits(&x));
        let out = g.output(groups);
        g.run(&k, &[&inb, &out], &[idx(n), idx(groups)], &[n as u64]);
        let chunk = |w: usize| &x[64 * w..(64 * w + 64).min(n)];
        let want: Vec<f64> = (0..groups)
            .map(|w| chunk(w).iter().map(|&v| f64::from(v)).sum())
            .collect();
        let tol = |w: usize| 6.0 * EPS * chunk(w).iter().map(|v| f64::from(v.abs())).sum::<f64>();
        check("wg_sum", &read_f32("wg_sum", &out, groups), &want, tol);
    }
}

#[test]
fn prefix_sum() {
    // Inclusive scan within each group of 64, 6 levels of adds.
    let g = gpu();
    let k = g.kernel(corpus!("prefix_sum.loom"), &spec("@prefix_sum"));
    let mut rng = Rng::new(8);
    for n in SIZES {
        let x = rng.f32s(n, -10.0, 10.0);
        let data = g.input(&bits(&x));
        g.run(&k, &[&data], &[idx(n)], &[n as u64]);
        let mut want = vec![0.0f64; n];
        let mut mag = vec![0.0f64; n];
        for i in 0..n {
            let first = i % 64 == 0;
            let (prev, prev_mag) = if first {
                (0.0, 0.0)
            } else {
                (want[i - 1], mag[i - 1])
            };
            want[i] = prev + f64::from(x[i]);
            mag[i] = prev_mag + f64::from(x[i].abs());
        }
        let tol = |i: usize| 6.0 * EPS * mag[i];
        check("prefix_sum", &read_f32("prefix_sum", &data, n), &want, tol);
    }
}

#[test]
fn transpose() {
    // Exact: data movement only.
    let g = gpu();
    let k = g.kernel(corpus!("transpose.loom"), &spec("@transpose"));
    let mut rng = Rng::new(9);
    for (rows, cols) in SHAPES.into_iter().chain([(16, 16), (33, 47)]) {
        let x = rng.f32s(rows * cols, -10.0, 10.0);
        let inb = g.input(&bits(&x));
        let out = g.output(rows * cols);
        g.run(
            &k,
            &[&inb, &out],
            &[idx(rows), idx(cols)],
            &[rows as u64, cols as u64],
        );
        let want: Vec<f64> = (0..cols * rows)
            .map(|o| f64::from(x[(o % rows) * cols + o / rows]))
            .collect();
        let label = format!("transpose {rows}x{cols}");
        check(&label, &read_f32(&label, &out, rows * cols), &want, |_| 0.0);
    }
}

#[test]
fn matmul() {
    // k fused multiply-adds per element: (k + 1) * EPS * sum |a| |b|.
    let g = gpu();
    let k = g.kernel(corpus!("matmul.loom"), &spec("@matmul"));
    let mut rng = Rng::new(10);
    for (m, n, kk) in [
        (1, 1, 1),
        (7, 5, 3),
        (33, 17, 40),
        (16, 16, 16),
        (50, 70, 100),
    ] {
        let a = rng.f32s(m * kk, -2.0, 2.0);
        let b = rng.f32s(kk * n, -2.0, 2.0);
        let (ab, bb, cb) = (g.input(&bits(&a)), g.input(&bits(&b)), g.output(m * n));
        let scalars = [idx(m), idx(n), idx(kk)];
        g.run(
            &k,
            &[&ab, &bb, &cb],
            &scalars,
            &[m as u64, n as u64, kk as u64],
        );
        let mut want = vec![0.0; m * n];
        let mut mag = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..kk {
                    let (x, y) = (f64::from(a[i * kk + p]), f64::from(b[p * n + j]));
                    want[i * n + j] += x * y;
                    mag[i * n + j] += (x * y).abs();
                }
            }
        }
        let tol = |i: usize| (kk as f64 + 1.0) * EPS * mag[i];
        let label = format!("matmul {m}x{n}x{kk}");
        check(&label, &read_f32(&label, &cb, m * n), &want, tol);
    }
}

#[test]
fn softmax() {
    // exp is a few ulp on Vulkan (3 + 2|x| ulp): relative 1e-5 plus the
    // sum's rounding.
    let g = gpu();
    let k = g.kernel(corpus!("softmax.loom"), &spec("@softmax"));
    let mut rng = Rng::new(11);
    for (rows, cols) in SHAPES.into_iter().chain([(65, 200)]) {
        let x = rng.f32s(rows * cols, -4.0, 4.0);
        let (xb, yb) = (g.input(&bits(&x)), g.output(rows * cols));
        g.run(
            &k,
            &[&xb, &yb],
            &[idx(rows), idx(cols)],
            &[rows as u64, cols as u64],
        );
        let mut want = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            let row: Vec<f64> = x[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mx = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
            want.extend(row.iter().map(|v| (v - mx).exp() / sum));
        }
        let label = format!("softmax {rows}x{cols}");
        let got = read_f32(&label, &yb, rows * cols);
        check(
            &label,
            &got,
            &want,
            rel(&want, 2e-5 + cols as f64 * EPS, 1e-9),
        );
    }
}

#[test]
fn layernorm() {
    // Variance as E[x^2] - mean^2 in f32 cancels: absolute 2e-4 on unit
    // scale outputs, plus relative 1e-4.
    let g = gpu();
    let k = g.kernel(corpus!("layernorm.loom"), &spec("@layernorm"));
    let mut rng = Rng::new(12);
    for (rows, cols) in SHAPES.into_iter().chain([(70, 128)]) {
        let x = rng.f32s(rows * cols, -2.0, 2.0);
        let gamma = rng.f32s(cols, 0.5, 1.5);
        let beta = rng.f32s(cols, -1.0, 1.0);
        let eps = 1e-5f32;
        let (xb, gb, bb) = (
            g.input(&bits(&x)),
            g.input(&bits(&gamma)),
            g.input(&bits(&beta)),
        );
        let yb = g.output(rows * cols);
        let scalars = [idx(rows), idx(cols), S::F32(eps)];
        g.run(
            &k,
            &[&xb, &gb, &bb, &yb],
            &scalars,
            &[rows as u64, cols as u64],
        );
        let mut want = Vec::with_capacity(rows * cols);
        for r in 0..rows {
            let row: Vec<f64> = x[r * cols..(r + 1) * cols]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mean = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / cols as f64;
            let rs = 1.0 / (var + f64::from(eps)).sqrt();
            for (j, v) in row.iter().enumerate() {
                want.push((v - mean) * rs * f64::from(gamma[j]) + f64::from(beta[j]));
            }
        }
        let label = format!("layernorm {rows}x{cols}");
        // A single column has variance 0: (x - mean) is 0 up to rounding,
        // scaled by 1/sqrt(eps) ~ 316.
        let atol = if cols == 1 { 1e-3 } else { 2e-4 };
        let got = read_f32(&label, &yb, rows * cols);
        check(&label, &got, &want, rel(&want, 1e-4, atol));
    }
}

#[test]
fn histogram() {
    // Exact: integer atomics. Bins start from random counts (not poison:
    // the kernel adds to them).
    let g = gpu();
    let k = g.kernel(corpus!("histogram.loom"), &spec("@histogram"));
    let mut rng = Rng::new(13);
    for n in SIZES {
        let values: Vec<u32> = (0..n).map(|_| rng.u32()).collect();
        let start: Vec<u32> = (0..64).map(|_| rng.u32() % 1000).collect();
        let (vb, bins) = (g.input(&values), g.input(&start));
        g.run(&k, &[&vb, &bins], &[idx(n)], &[n as u64]);
        let mut want = start.clone();
        for v in &values {
            want[(v & 63) as usize] += 1;
        }
        assert_eq!(read("histogram", &bins, 64), want, "histogram n={n}");
    }
}

#[test]
fn config_value() {
    // out = select(negate, -(x f), x f) + width: two roundings.
    let g = gpu();
    let source = corpus!("config.loom");
    let cases = [
        (spec("@configured"), 64usize, 2.0f32, false),
        (
            spec("@configured")
                .with_config("cfg.width", 128usize)
                .with_config("cfg.factor", -1.5f32)
                .with_config("cfg.negate", true),
            128,
            -1.5,
            true,
        ),
    ];
    let mut rng = Rng::new(14);
    for (spec, width, factor, negate) in cases {
        let k = g.kernel(source, &spec);
        assert_eq!(k.artifact.workgroup_size(), [width as u32, 1, 1]);
        for n in SIZES {
            let x = rng.f32s(n, -100.0, 100.0);
            let data = g.input(&bits(&x));
            g.run(&k, &[&data], &[idx(n)], &[n as u64]);
            let want: Vec<f64> = x
                .iter()
                .map(|&v| {
                    let y = f64::from(v) * f64::from(factor);
                    (if negate { -y } else { y }) + width as f64
                })
                .collect();
            let tol = |i: usize| 2.0 * EPS * (want[i].abs() + f64::from(x[i] * factor).abs());
            check("config", &read_f32("config", &data, n), &want, tol);
        }
    }
}

/// The reference row of `int_ops.loom` for one element pair.
fn int_row(x: i32, y: i32) -> [i32; 16] {
    let (ux, uy) = (x as u32, y as u32);
    let both = (x < y) ^ (ux < uy);
    [
        x.wrapping_add(y),
        x.wrapping_sub(y),
        x.wrapping_mul(y),
        x / y,
        x % y,
        (ux / uy) as i32,
        (ux % uy) as i32,
        x & y,
        x | y,
        x ^ y,
        x.wrapping_shl(5),
        x >> 5,
        (ux >> 5) as i32,
        if both { -1 } else { 5 },
        // Rust's float-to-int casts saturate, as the lowering promises.
        (x as f32) as i32,
        ((ux as f32) as u32) as i32,
    ]
}

#[test]
fn int_ops() {
    // Exact, including wrapping, truncating division, arithmetic shifts and
    // saturating float-to-int conversion.
    let g = gpu();
    let k = g.kernel(corpus!("int_ops.loom"), &spec("@int_ops"));
    let mut rng = Rng::new(15);
    for n in SIZES {
        let mut a: Vec<i32> = (0..n).map(|_| rng.u32() as i32).collect();
        let b: Vec<i32> = (0..n)
            .map(|i| {
                // Small divisors half the time, so quotients are not all 0.
                let y = if i % 2 == 0 {
                    (rng.u32() % 200) as i32 - 100
                } else {
                    rng.u32() as i32
                };
                if y == 0 { 7 } else { y }
            })
            .collect();
        for (x, y) in a.iter_mut().zip(&b) {
            if *x == i32::MIN && *y == -1 {
                *x = 1; // the one overflowing division
            }
        }
        let words = |v: &[i32]| v.iter().map(|&x| x as u32).collect::<Vec<_>>();
        let (ab, bb, ob) = (g.input(&words(&a)), g.input(&words(&b)), g.output(16 * n));
        g.run(&k, &[&ab, &bb, &ob], &[idx(n)], &[n as u64]);
        let got = read("int_ops", &ob, 16 * n);
        for i in 0..n {
            let want = int_row(a[i], b[i]);
            let row: Vec<i32> = got[16 * i..16 * i + 16].iter().map(|&w| w as i32).collect();
            assert_eq!(row, want, "int_ops n={n} [{i}] x={} y={}", a[i], b[i]);
        }
    }
}

#[test]
fn float_math() {
    // Per column: exact for neg, abs, min, max, sub, select and bitcast;
    // divide 2.5 ulp; log, sqrt, rsqrt within a few ulp (log: 2^-21
    // absolute near 1); tanh 1e-5 absolute (it is derived from exp).
    let g = gpu();
    let k = g.kernel(corpus!("float_math.loom"), &spec("@float_math"));
    let mut rng = Rng::new(16);
    for n in SIZES {
        let mut x = rng.f32s(n, -10.0, 10.0);
        if n > 3 {
            x[3] = 0.5; // the equal case of the compares
        }
        let (ib, ob) = (g.input(&bits(&x)), g.output(12 * n));
        g.run(&k, &[&ib, &ob], &[idx(n)], &[n as u64]);
        let got = read_f32("float_math", &ob, 12 * n);
        for col in 0..12 {
            let got: Vec<f32> = (0..n).map(|i| got[12 * i + col]).collect();
            let want: Vec<f64> = x
                .iter()
                .map(|&v| {
                    let xd = f64::from(v);
                    let ax = f64::from(v.abs() + 0.5);
                    match col {
                        0 => -xd,
                        1 => xd.abs(),
                        2 => ax.ln(),
                        3 => ax.sqrt(),
                        4 => 1.0 / ax.sqrt(),
                        5 => xd.tanh(),
                        6 => xd.min(0.5),
                        7 => xd.max(0.5),
                        8 => f64::from((xd / ax) as f32),
                        9 => f64::from((xd - 0.5) as f32),
                        10 => f64::from(u8::from(v != 0.5)),
                        _ => f64::from(f32::from_bits(v.to_bits() | 1)),
                    }
                })
                .collect();
            let tol = |i: usize| {
                let w = want[i].abs();
                match col {
                    2 => 3.0 * 2.0 * EPS * w + 2f64.powi(-21),
                    3 | 4 => 4.0 * 2.0 * EPS * w,
                    5 => 1e-5,
                    8 => 3.0 * 2.0 * EPS * w,
                    _ => 0.0,
                }
            };
            check(&format!("float_math col {col} n={n}"), &got, &want, tol);
        }
    }
}

#[test]
fn subgroup_ops() {
    // Lane layout is read back and checked (lane = local % size, subgroup
    // = local / size); sums within size * EPS * sum |x|; everything else
    // exact. Shuffles up/down past the subgroup's ends are undefined and
    // not checked.
    let g = gpu();
    let k = g.kernel(corpus!("subgroup.loom"), &spec("@subgroup_ops"));
    let mut rng = Rng::new(17);
    for n in SIZES {
        let x = rng.f32s(n, -100.0, 100.0);
        let (ib, ob, nb, fb) = (
            g.input(&bits(&x)),
            g.output(6 * n),
            g.output(2 * n),
            g.output(4 * n),
        );
        g.run(&k, &[&ib, &ob, &nb, &fb], &[idx(n)], &[n as u64]);
        let info = read("subgroup info", &fb, 4 * n);
        let size = info[1] as usize;
        assert!(size.is_power_of_two() && size <= 64, "subgroup size {size}");
        for i in 0..n {
            let local = i % 64;
            let want = [local % size, size, local / size, 64 / size];
            let got: Vec<usize> = info[4 * i..4 * i + 4].iter().map(|&w| w as usize).collect();
            assert_eq!(got, want, "subgroup facts of item {i}");
        }
        // Lanes past n hold 0.0 (the kernel's else branch).
        let xs = |i: usize| if i < n { x[i] } else { 0.0 };
        let fo = read_f32("subgroup f32", &ob, 6 * n);
        let io = read("subgroup i32", &nb, 2 * n);
        for i in 0..n {
            let lane = i % size;
            let first = i - lane;
            let group: Vec<f32> = (first..first + size).map(xs).collect();
            let sum: f64 = group.iter().map(|&v| f64::from(v)).sum();
            let mag: f64 = group.iter().map(|&v| f64::from(v.abs())).sum();
            let mx = group.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let row = &fo[6 * i..6 * i + 6];
            let at = format!("subgroup n={n} item {i}");
            assert!(
                (f64::from(row[0]) - sum).abs() <= size as f64 * EPS * mag,
                "{at}: sum {} vs {sum}",
                row[0]
            );
            assert_eq!(row[1], mx, "{at}: max");
            assert_eq!(row[2], group[lane ^ 1], "{at}: xor");
            if lane >= 1 {
                assert_eq!(row[3], group[lane - 1], "{at}: up");
            }
            if lane + 1 < size {
                assert_eq!(row[4], group[lane + 1], "{at}: down");
            }
            assert_eq!(
                row[5],
                group[0] + group[lane % 2],
                "{at}: broadcast + index"
            );
            let ints: Vec<i32> = group.iter().map(|&v| v as i32).collect();
            let isum = ints.iter().fold(0i32, |a, &b| a.wrapping_add(b));
            let imin = ints.iter().copied().min().unwrap_or(0);
            assert_eq!(
                [io[2 * i] as i32, io[2 * i + 1] as i32],
                [isum, imin],
                "{at}: ints"
            );
        }
    }
}

#[test]
fn subgroup_rotate() {
    // Every lane reads the value the next lane of its subgroup stored
    // before a subgroup barrier (the last lane wraps to the first): exact.
    let g = gpu();
    let k = g.kernel(corpus!("subgroup_rotate.loom"), &spec("@subgroup_rotate"));
    let (size, most) = (g.target.subgroup_size_min, g.target.subgroup_size_max);
    assert_eq!(size, most, "a fixed subgroup size");
    let size = size as usize;
    let mut rng = Rng::new(18);
    for n in SIZES {
        let x = rng.f32s(n, -100.0, 100.0);
        let (ib, ob) = (g.input(&bits(&x)), g.output(n));
        g.run(&k, &[&ib, &ob], &[idx(n)], &[n as u64]);
        let got = read_f32("subgroup_rotate", &ob, n);
        let xs = |i: usize| if i < n { x[i] } else { 0.0 };
        for (i, &y) in got.iter().enumerate() {
            let lane = i % 64 % size;
            let from = i - lane + (lane + 1) % size;
            assert_eq!(y, xs(from), "subgroup_rotate n={n} item {i}");
        }
    }
}

#[test]
fn every_corpus_file_is_run_here() {
    // A new corpus kernel must get a run test above.
    let here = include_str!("corpus.rs");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(super::CORPUS_DIR);
    for entry in std::fs::read_dir(dir).expect("corpus dir") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".loom") {
            let needle = format!("corpus!(\"{name}\")");
            assert!(here.contains(&needle), "{name} has no run test");
        }
    }
}

#[test]
fn bridge_contract_and_dispatch_args() {
    use hrx::execution::Access;
    let g = gpu();
    let k = g.kernel(corpus!("saxpy4.loom"), &spec("@saxpy4"));
    let c = k.artifact.contract();
    assert_eq!(c.entry_point, "saxpy4");
    assert_eq!(c.push_constant_bytes, 8);
    assert_eq!(c.workgroup_size, [256, 1, 1]);
    let b: Vec<_> = c
        .bindings
        .iter()
        .map(|b| (b.access, b.alignment, b.min_bytes))
        .collect();
    // vec4-declared bindings: 16-byte elements, at least one of them.
    assert_eq!(b, [(Access::Read, 16, 16), (Access::ReadWrite, 16, 16)]);
    assert_eq!(k.gpu.contract(), &c);
    // (Compiled only: its pipeline is built by the histogram test.)
    let h = hrx::loom::Compiler::for_target(None, &g.target)
        .and_then(|c| c.module(corpus!("histogram.loom")))
        .and_then(|m| m.compile(&spec("@histogram")))
        .expect("histogram");
    assert_eq!(h.contract().bindings[1].min_bytes, 256, "static extent");
    // An empty workload gives an empty grid: refused, not dispatched.
    let err = k
        .artifact
        .dispatch_args(&[idx(0), S::F32(1.0)], &[0])
        .unwrap_err();
    assert!(err.to_string().contains("empty grid"), "{err}");
    // Wrong scalar types are refused.
    assert!(k.artifact.dispatch_args(&[idx(4), idx(1)], &[4]).is_err());
}

#[test]
fn unpack_f16() {
    // Exact: every f16 (normals, subnormals, zeros, infinities) widens
    // exactly; NaNs stay NaN.
    use half::f16;
    let g = gpu();
    let k = g.kernel(corpus!("unpack_f16.loom"), &spec("@unpack_f16"));
    let mut rng = Rng::new(41);
    for quads in [1, 7, 64, 1000] {
        let halves = quads * 8;
        let mut h: Vec<f16> = (0..halves)
            .map(|_| f16::from_bits(rng.u32() as u16))
            .collect();
        h[0] = f16::from_bits(0x0001); // smallest subnormal
        h[1] = f16::NEG_INFINITY;
        let packed: Vec<u32> = h
            .chunks(2)
            .map(|p| u32::from(p[0].to_bits()) | (u32::from(p[1].to_bits()) << 16))
            .collect();
        let src = g.input(&packed);
        let dst = g.output(halves);
        g.run(
            &k,
            &[&src, &dst],
            &[idx(quads), idx(quads * 4), idx(halves)],
            &[quads as u64],
        );
        let got = read_f32("unpack_f16", &dst, halves);
        for (i, (v, w)) in got.iter().zip(&h).enumerate() {
            if w.is_nan() {
                assert!(v.is_nan(), "unpack_f16 [{i}]: {v} for a NaN");
            } else {
                assert_eq!(
                    v.to_bits(),
                    w.to_f32().to_bits(),
                    "unpack_f16 [{i}] of {halves}"
                );
            }
        }
    }
}

#[test]
fn last_group_sum() {
    // Exact: i32 sums. The counter must come back to zero after each run
    // (the last workgroup resets it), so the same counter serves every
    // run; a stale partial (a store the storage barrier failed to make
    // visible) would show as a wrong total.
    let g = gpu();
    let k = g.kernel(corpus!("last_group_sum.loom"), &spec("@last_group_sum"));
    let counter = g.input(&[0]);
    let mut rng = Rng::new(17);
    for n in SIZES.into_iter().chain([64 * 300, 64 * 1000 + 5]) {
        for _ in 0..2 {
            let groups = n.div_ceil(64);
            let values: Vec<i32> = (0..n).map(|_| (rng.u32() % 2001) as i32 - 1000).collect();
            let words: Vec<u32> = values.iter().map(|&v| v as u32).collect();
            let (vb, partials, total) = (g.input(&words), g.output(groups), g.output(1));
            g.run(
                &k,
                &[&vb, &partials, &counter, &total],
                &[idx(n), idx(groups)],
                &[n as u64],
            );
            let want: Vec<u32> = values
                .chunks(64)
                .map(|c| c.iter().sum::<i32>() as u32)
                .collect();
            assert_eq!(read("partials", &partials, groups), want, "n={n}");
            let sum: i32 = values.iter().sum();
            assert_eq!(read("total", &total, 1), [sum as u32], "n={n}");
            assert_eq!(read("counter", &counter, 1), [0], "counter reset, n={n}");
        }
    }
}
