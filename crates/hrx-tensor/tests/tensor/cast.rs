//! Casts between f32, f16, bf16 and i32 against CPU references (the `half`
//! crate, Rust `as`), compared exactly: ties round to even, NaN stays NaN
//! (i32: NaN gives 0, out-of-range values saturate), infinities stay.
//! f16 cases run only where the device has f16 and 16-bit storage.
//! Inputs are contiguous, padded, transposed or gapped along every axis;
//! the last keep up to five axes apart, past the kernel's four.

use crate::common::{
    cases::{Layout, MAX_AXES, assert_refused, laid_out, merged_axes, shape_strategy},
    *,
};
use half::{bf16, f16};
use hrx_tensor::{DType, DeviceTensor, TensorDesc};
use proptest::prelude::*;

fn has_f16() -> bool {
    let target = ops().runtime().gpu().unwrap().target().clone();
    target.shader_f16 && target.storage_16bit
}

fn dtypes() -> Vec<DType> {
    let mut all = vec![DType::F32, DType::BF16, DType::I32];
    if has_f16() {
        all.push(DType::F16);
    }
    all
}

/// The CPU reference of casting `s` (a value of the source dtype) to `to`.
fn reference(s: f64, to: DType) -> f64 {
    let x = s as f32;
    match to {
        DType::F32 => f64::from(x),
        DType::F16 => f16::from_f32(x).to_f64(),
        DType::BF16 => bf16::from_f32(x).to_f64(),
        DType::I32 => f64::from(x as i32),
        other => unreachable!("{other}"),
    }
}

/// A contiguous input whose storage has a spare element after it, so odd
/// bf16 lengths still end inside a whole word.
fn spare_input(dtype: DType, shape: &[usize], values: &[f64]) -> DeviceTensor {
    let n = values.len();
    let mut data = values.to_vec();
    data.push(9.0);
    let t = DeviceTensor::from_values(ops().runtime(), dtype, vec![n + 1], &data).unwrap();
    t.slice(0, 0..n).unwrap().reshape(shape.to_vec()).unwrap()
}

fn check_pair(from: DType, to: DType, shape: &[usize], seed: u64) {
    let mut rng = Gen::new(seed);
    let n: usize = shape.iter().product();
    let raw: Vec<f64> = if from == DType::I32 {
        (0..n)
            .map(|_| {
                let v = rng.uniform(-70000.0, 70000.0).round();
                if v == 0.0 { 3.0 } else { v }
            })
            .collect()
    } else {
        values(&mut rng, n, -300.0, 300.0)
    };
    // The values the source actually holds.
    let stored = hrx_tensor::decode(
        &TensorDesc::new(from, vec![n]).unwrap(),
        &hrx_tensor::encode(from, &raw),
    )
    .unwrap();
    let want: Vec<f64> = stored.iter().map(|&s| reference(s, to)).collect();
    let layouts = PLACEMENTS.map(Layout::Placed);
    for layout in layouts.into_iter().chain([Layout::Gapped]) {
        // bf16 sources other than slices get a spare element after them
        // (an exact-size odd bf16 tensor cannot be read as words).
        let a = match layout {
            Layout::Placed(Placement::Padded) | Layout::Gapped if !shape.is_empty() => {
                laid_out(from, shape, &raw, layout)
            }
            Layout::Placed(Placement::Transposed) if from != DType::BF16 => {
                laid_out(from, shape, &raw, layout)
            }
            _ => spare_input(from, shape, &raw),
        };
        let desc = TensorDesc::new(to, shape.to_vec()).unwrap();
        let record = |g: &mut hrx_runtime::Graph, out: &DeviceTensor| ops().record_cast(g, &a, out);
        if merged_axes(shape, &[a.desc().strides().to_vec()]) > MAX_AXES && n > 0 {
            assert_refused(desc, &format!("cast of {} to {to}", a.desc()), record);
            continue;
        }
        let got = run(&[&a], desc, record).unwrap();
        assert_close(
            &got,
            &want,
            0.0,
            0.0,
            &format!("{from} -> {to} {shape:?} {layout:?}"),
        );
    }
}

#[test]
fn four_unmergeable_axes_reach_the_outermost_index() {
    // Gapped inputs keep every axis apart: the outermost (extent 3) is the
    // kernel's first index.
    let shape = [3, 2, 1, 4, 5];
    let probe = laid_out(DType::F32, &shape, &[1.0; 120], Layout::Gapped);
    assert_eq!(merged_axes(&shape, &[probe.desc().strides().to_vec()]), 4);
    for from in dtypes() {
        for to in dtypes() {
            check_pair(from, to, &shape, 5);
        }
    }
}

#[test]
fn more_than_four_unmergeable_axes_are_refused() {
    let shape = [2, 3, 2, 3, 2];
    for from in dtypes() {
        let a = laid_out(from, &shape, &[1.5; 72], Layout::Gapped);
        for to in dtypes() {
            let desc = TensorDesc::new(to, shape.to_vec()).unwrap();
            assert_refused(desc, &format!("cast of {} to {to}", a.desc()), |g, out| {
                ops().record_cast(g, &a, out)
            });
        }
    }
    let a = laid_out(DType::F32, &shape, &[1.5; 72], Layout::Gapped);
    let e = ops().cast(&a, DType::I32).unwrap_err();
    assert!(e.to_string().contains("more than 4 axes remain"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn casts_match_reference(shape in shape_strategy(), seed in any::<u64>()) {
        for from in dtypes() {
            for to in dtypes() {
                check_pair(from, to, &shape, seed);
            }
        }
    }
}

/// f32 bit patterns as a contiguous tensor.
fn f32_bits(bits: &[u32]) -> DeviceTensor {
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let desc = TensorDesc::new(DType::F32, vec![bits.len()]).unwrap();
    DeviceTensor::upload(ops().runtime(), desc, &bytes).unwrap()
}

fn cast_bits(a: &DeviceTensor, to: DType) -> Vec<u8> {
    let out = ops().cast(a, to).unwrap();
    let mut bytes = out.download().unwrap();
    bytes.truncate(out.desc().bytes());
    bytes
}

#[test]
fn rounding_ties_specials_and_saturation() {
    let bits: Vec<u32> = vec![
        0x3F80_8000, // 1 + 2^-8: bf16 tie, to even (1.0)
        0x3F81_8000, // 1 + 3 * 2^-8: bf16 tie, to even (up)
        0x3F80_8001, // just above a bf16 tie: up
        0x3F80_1000, // 1 + 2^-11: f16 tie, to even (1.0)
        0x3F80_3000, // 1 + 3 * 2^-11: f16 tie, to even (up)
        0x7F7F_FFFF, // f32::MAX: bf16 and f16 overflow to inf
        0x4788_B800, // 70000: f16 inf, bf16 finite
        0x7F80_0000, // +inf
        0xFF80_0000, // -inf
        0x7FC0_0000, // quiet NaN
        0xFFA0_0001, // negative signalling NaN
        0x8000_0000, // -0.0
        0x4F00_0000, // 2^31: i32 saturates to MAX
        0xCF00_0001, // below -2^31: i32 saturates to MIN
        0xC0B0_0000, // -5.5: i32 truncates to -5
        0x3F7F_FFFF, // just below 1
    ];
    let mut rng = Gen::new(7);
    let mut all = bits.clone();
    // Random finite normal f32 patterns (no denormals: devices may flush).
    all.extend((0..200).map(|_| {
        let b = rng.next() as u32;
        let exp = ((b >> 23) & 0xFF).clamp(1, 254);
        (b & 0x807F_FFFF) | (exp << 23)
    }));
    let a = f32_bits(&all);
    let floats: Vec<f32> = all.iter().map(|&b| f32::from_bits(b)).collect();

    let got = cast_bits(&a, DType::BF16);
    for (i, x) in floats.iter().enumerate() {
        let g = u16::from_le_bytes([got[2 * i], got[2 * i + 1]]);
        let w = bf16::from_f32(*x).to_bits();
        assert_eq!(
            g, w,
            "bf16 of {x:e} ({:#x}): got {g:#x}, want {w:#x}",
            all[i]
        );
    }
    let got = cast_bits(&a, DType::I32);
    for (i, x) in floats.iter().enumerate() {
        let g = i32::from_le_bytes(got[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!(g, *x as i32, "i32 of {x:e}");
    }
    if has_f16() {
        let got = cast_bits(&a, DType::F16);
        for (i, x) in floats.iter().enumerate() {
            let g = f16::from_bits(u16::from_le_bytes([got[2 * i], got[2 * i + 1]]));
            let w = f16::from_f32(*x);
            if w.is_nan() {
                assert!(g.is_nan(), "f16 of NaN: got {g}");
            } else if w.to_f32().abs() >= f32::from(f16::MIN_POSITIVE) || w.to_f32() == 0.0 {
                assert_eq!(g.to_bits(), w.to_bits(), "f16 of {x:e}: got {g}, want {w}");
            }
        }
    }
    // bf16 -> f32 is exact, NaN and infinities included.
    let b = ops().cast(&a, DType::BF16).unwrap();
    let back = cast_bits(&b, DType::F32);
    for (i, x) in floats.iter().enumerate() {
        let g = f32::from_le_bytes(back[4 * i..4 * i + 4].try_into().unwrap());
        let w = bf16::from_f32(*x).to_f32();
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{x:e}"
        );
    }
}

#[test]
fn bf16_writes_leave_neighbouring_halves_alone() {
    // Output: elements 1..6 of a poisoned 8-element bf16 tensor (starts
    // and ends half-way through words).
    let big = ops()
        .output(TensorDesc::new(DType::BF16, vec![8]).unwrap())
        .unwrap();
    let out = big.slice(0, 1..6).unwrap();
    let a = input(
        DType::F32,
        &[5],
        &[1.5, -2.0, 3.25, 100.0, -0.5],
        Placement::Contiguous,
    );
    let mut graph = ops().runtime().graph();
    graph.fill(big.binding().unwrap(), 0x7E01_7E01).unwrap();
    ops().record_cast(&mut graph, &a, &out).unwrap();
    let done = graph
        .prepare()
        .unwrap()
        .submit_after(&[a.completion().clone()])
        .unwrap();
    let mut big = big;
    big.set_producer(done);
    let bytes = big.download().unwrap();
    let halves: Vec<u16> = bytes[..16]
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let want: Vec<u16> = [1.5f32, -2.0, 3.25, 100.0, -0.5]
        .iter()
        .map(|&x| bf16::from_f32(x).to_bits())
        .collect();
    assert_eq!(halves[0], 0x7E01);
    assert_eq!(&halves[1..6], &want[..]);
    assert_eq!(&halves[6..], &[0x7E01, 0x7E01]);
}

#[test]
fn mismatches_are_errors_and_record_nothing() {
    let f = input(DType::F32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let mut graph = ops().runtime().graph();
    let wrong = ops()
        .output(TensorDesc::new(DType::BF16, vec![3, 2]).unwrap())
        .unwrap();
    let e = ops().record_cast(&mut graph, &f, &wrong).unwrap_err();
    assert!(e.to_string().contains("cast of f32[2, 3] to bf16"), "{e}");
    assert!(e.to_string().contains("output bf16[3, 2]"), "{e}");
    let u = ops()
        .output(TensorDesc::new(DType::U32, vec![2, 3]).unwrap())
        .unwrap();
    let e = ops().record_cast(&mut graph, &f, &u).unwrap_err();
    assert!(e.to_string().contains("dtype u32 is not supported"), "{e}");
    let strided = ops()
        .output(TensorDesc::new(DType::I32, vec![3, 2]).unwrap())
        .unwrap();
    let strided = hrx_tensor::Ops::permuted(&strided, &[1, 0]).unwrap();
    assert!(ops().record_cast(&mut graph, &f, &strided).is_err());
    // An odd-length bf16 tensor filling exact-size storage of the caller's
    // cannot be read as words (tensors hrx allocates own whole words).
    let runtime = ops().runtime().clone();
    let storage = runtime
        .allocate(6, hrx_runtime::MemoryPlacement::HostVisible)
        .unwrap();
    let odd = DeviceTensor::from_parts(
        runtime,
        TensorDesc::new(DType::BF16, vec![3]).unwrap(),
        Some(storage.view()),
        hrx_runtime::Completion::ready(),
    )
    .unwrap();
    let out = ops()
        .output(TensorDesc::new(DType::F32, vec![3]).unwrap())
        .unwrap();
    let e = ops().record_cast(&mut graph, &odd, &out).unwrap_err();
    assert!(e.to_string().contains("half-way"), "{e}");
    let other = hrx_tensor::Ops::new(&hrx_runtime::Runtime::from_env().unwrap());
    let e = other.cast(&f, DType::I32).unwrap_err();
    assert!(e.to_string().contains("another runtime domain"), "{e}");
    assert!(graph.is_empty());
    // Empty tensors need no work.
    let empty = input(DType::F32, &[0, 3], &[], Placement::Contiguous);
    assert_eq!(
        ops().cast(&empty, DType::BF16).unwrap().desc().elements(),
        0
    );
}
