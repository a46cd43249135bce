//! Pad (`record_pad` and the eager `pad`) against a host reference: ranks
//! 0 to 3 with empty, size-1, small and long (partial workgroup) axes,
//! random widths including 0 on every side, contiguous, padded (gapped and
//! unaligned), transposed and axis-reversed inputs, f32, i32 and u32.
//! Tolerance: exact for every dtype (data movement only; the pad value is
//! compared as the dtype stores it). Outputs start at a random element of
//! a larger poisoned buffer, so an element left unwritten, or a fill
//! spilling over the output's ends, shows.

use crate::common::*;
use hrx_runtime::{Completion, MemoryPlacement};
use hrx_tensor::{DType, DeviceTensor, Error, Ops, TensorDesc};
use proptest::prelude::*;

const DTYPES: [DType; 3] = [DType::F32, DType::I32, DType::U32];

/// Shapes of rank 0 to 3; at most one long axis keeps padded sizes small.
fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![1 => Just(0usize), 2 => Just(1usize), 5 => 2usize..6, 1 => 60usize..90],
        0..=3,
    )
    .prop_map(|mut shape| {
        let mut long = false;
        for d in shape.iter_mut().filter(|d| **d >= 60) {
            if long {
                *d = 4;
            }
            long = true;
        }
        shape
    })
}

/// Non-zero values `dtype` holds exactly (f32: rounded; integers: whole,
/// positive for u32).
fn data(rng: &mut Gen, dtype: DType, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| match dtype {
            DType::F32 => f64::from(rng.nonzero(-100.0, 100.0) as f32),
            DType::U32 => 1.0 + rng.below(1 << 20) as f64,
            _ => {
                let v = rng.below(2000) as f64 - 1000.0;
                if v == 0.0 { 7.0 } else { v }
            }
        })
        .collect()
}

/// `values` (row-major for `shape`) stored with the axes reversed and
/// viewed back in `shape`'s order: every stride differs from a packed
/// tensor's once the rank is 2 or more.
fn reversed(dtype: DType, shape: &[usize], values: &[f64]) -> DeviceTensor {
    let rev: Vec<usize> = shape.iter().rev().copied().collect();
    let mut stored = vec![0.0; values.len()];
    for (i, v) in values.iter().enumerate() {
        let index: Vec<usize> = unravel(i, shape).into_iter().rev().collect();
        stored[ravel_broadcast(&index, &rev)] = *v;
    }
    let t = DeviceTensor::from_values(ops().runtime(), dtype, rev, &stored).unwrap();
    let axes: Vec<usize> = (0..shape.len()).rev().collect();
    Ops::permuted(&t, &axes).unwrap()
}

/// The reference: `value` wherever an index falls in the padding, else the
/// input element it lands on.
fn reference(shape: &[usize], v: &[f64], pads: &[(usize, usize)], value: f64) -> Vec<f64> {
    let out = Ops::pad_shape(&TensorDesc::new(DType::F32, shape.to_vec()).unwrap(), pads).unwrap();
    (0..out.iter().product())
        .map(|i| {
            let index = unravel(i, &out);
            let inner: Option<Vec<usize>> = index
                .iter()
                .zip(pads)
                .zip(shape)
                .map(|((&x, &(before, _)), &d)| x.checked_sub(before).filter(|&y| y < d))
                .collect();
            inner.map_or(value, |inner| v[ravel_broadcast(&inner, shape)])
        })
        .collect()
}

/// A word-aligned output of `desc` starting `lead` elements into poisoned
/// storage with one poisoned element after it, and that whole storage as
/// a flat tensor (to read the guards back).
fn guarded_output(desc: &TensorDesc, lead: usize) -> (DeviceTensor, DeviceTensor) {
    let rt = &ops().runtime().clone();
    let total = lead + desc.elements() + 1;
    let storage = rt.allocate(total * 4, MemoryPlacement::GpuLocal).unwrap();
    let flat_desc = TensorDesc::new(desc.dtype(), vec![total]).unwrap();
    let mut flat = DeviceTensor::from_parts(
        rt.clone(),
        flat_desc,
        Some(storage.view()),
        Completion::ready(),
    )
    .unwrap();
    let mut graph = rt.graph();
    graph.fill(storage.view(), poison(desc.dtype())).unwrap();
    flat.set_producer(graph.prepare().unwrap().submit().unwrap());
    let out = flat.view(lead * 4, desc.clone()).unwrap();
    (flat, out)
}

/// Whether `x` is the poison pattern of `dtype` read back.
fn poisoned(dtype: DType, x: f64) -> bool {
    let word = poison(dtype);
    match dtype {
        DType::F32 => x.is_nan(),
        DType::I32 => x == f64::from(word as i32),
        _ => x == f64::from(word),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn pad_matches_reference(shape in shape_strategy(), seed in any::<u64>()) {
        let mut rng = Gen::new(seed);
        let dtype = DTYPES[rng.below(DTYPES.len())];
        let n: usize = shape.iter().product();
        let v = data(&mut rng, dtype, n);
        // Widths of 0 half of the time, so unpadded sides and fully
        // unpadded tensors (no fill at all) come up.
        let pads: Vec<(usize, usize)> = shape
            .iter()
            .map(|_| {
                let mut width = || if rng.below(2) == 0 { 0 } else { 1 + rng.below(4) };
                (width(), width())
            })
            .collect();
        let value = data(&mut rng, dtype, 1)[0];
        let layout = rng.below(4);
        let a = match layout {
            3 => reversed(dtype, &shape, &v),
            p => input(dtype, &shape, &v, PLACEMENTS[p]),
        };
        let out_shape = Ops::pad_shape(a.desc(), &pads).unwrap();
        let desc = TensorDesc::new(dtype, out_shape.clone()).unwrap();
        let want = reference(&shape, &v, &pads, value);
        let what = format!("pad of {dtype}{shape:?} (layout {layout}) by {pads:?} with {value}");

        let lead = rng.below(3);
        let (mut flat, out) = guarded_output(&desc, lead);
        let mut graph = ops().runtime().graph();
        ops().record_pad(&mut graph, &a, &pads, value, &out).unwrap();
        let deps = [a.completion().clone(), flat.completion().clone()];
        flat.set_producer(graph.prepare().unwrap().submit_after(&deps).unwrap());
        let all = flat.to_values().unwrap();
        let (before, rest) = all.split_at(lead);
        let (got, after) = rest.split_at(want.len());
        prop_assert!(before.iter().chain(after).all(|&x| poisoned(dtype, x)), "{}: guards overwritten: {:?} {:?}", what, before, after);
        assert_close(got, &want, 0.0, 0.0, &what);

        // The eager form runs the same recording.
        if rng.below(3) == 0 {
            let eager = ops().pad(&a, &pads, value).unwrap();
            prop_assert_eq!(eager.desc().shape(), &out_shape[..]);
            assert_close(&eager.to_values().unwrap(), &want, 0.0, 0.0, &format!("eager {what}"));
        }
    }
}

/// Fixed edge cases the random ones reach only sometimes: an empty input
/// padded into a non-empty output (all fill, no copy), no padding at all
/// on a transposed input (all copy, no fill), a scalar, a value that
/// converts (f32 rounding, i32 truncation), and an empty output.
#[test]
fn pad_edge_cases() {
    use Placement::{Contiguous, Padded, Transposed};
    let mut rng = Gen::new(5);
    // `stored` is `value` as the dtype holds it.
    let mut check = |dtype, shape: &[usize], placement, pads: &[(usize, usize)], value, stored| {
        let v = data(&mut rng, dtype, shape.iter().product());
        let a = input(dtype, shape, &v, placement);
        let desc = TensorDesc::new(dtype, Ops::pad_shape(a.desc(), pads).unwrap()).unwrap();
        let got = run(&[&a], desc, |g, out| {
            ops().record_pad(g, &a, pads, value, out)
        })
        .unwrap();
        let want = reference(shape, &v, pads, stored);
        assert_close(
            &got,
            &want,
            0.0,
            0.0,
            &format!("{dtype}{shape:?} by {pads:?}"),
        );
    };
    check(DType::F32, &[0, 3], Contiguous, &[(1, 1), (0, 0)], 2.5, 2.5);
    check(DType::I32, &[3, 0], Padded, &[(0, 2), (1, 2)], -4.0, -4.0);
    check(DType::F32, &[5, 7], Transposed, &[(0, 0), (0, 0)], 1.0, 1.0);
    check(DType::F32, &[], Contiguous, &[], 9.0, 9.0);
    check(
        DType::F32,
        &[2, 3],
        Transposed,
        &[(2, 0), (1, 3)],
        0.1,
        f64::from(0.1f32),
    );
    check(DType::I32, &[70], Padded, &[(3, 0)], -2.9, -2.0);
    let a = input(DType::F32, &[2, 0], &[], Placement::Contiguous);
    let out = ops().pad(&a, &[(1, 1), (0, 0)], 1.0).unwrap();
    assert_eq!(out.desc().shape(), [4, 0]);
    assert!(out.to_values().unwrap().is_empty());
}

/// Record `pad` into a fresh graph and return the error, checking that
/// nothing was recorded.
fn refused(a: &DeviceTensor, pads: &[(usize, usize)], out: &DeviceTensor) -> Error {
    let mut graph = ops().runtime().graph();
    let e = ops().record_pad(&mut graph, a, pads, 1.0, out).unwrap_err();
    assert!(graph.is_empty(), "{e}: recorded work");
    e
}

#[test]
fn pad_errors_name_the_operation_and_queue_nothing() {
    let a = input(DType::F32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let pads = [(1, 0), (0, 2)];
    let out = |dtype: DType, shape: Vec<usize>| {
        ops()
            .output(TensorDesc::new(dtype, shape).unwrap())
            .unwrap()
    };
    let good = out(DType::F32, vec![3, 5]);

    let e = refused(&a, &[(1, 0)], &good);
    assert_eq!(
        e.to_string(),
        "pad of f32[2, 3] by [(1, 0)]: one (before, after) pair per axis is required (2 axes, 1 pairs)"
    );
    let e = refused(&a, &[(usize::MAX, 1), (0, 0)], &good);
    assert!(
        e.to_string().ends_with(": the padded shape overflows"),
        "{e}"
    );
    // Within usize, but not as a byte size.
    let e = refused(&a, &[(usize::MAX / 4, 0), (0, 0)], &good);
    assert!(
        e.to_string().ends_with(": the padded shape overflows"),
        "{e}"
    );

    let contiguous = "pad of f32[2, 3] by [(1, 0), (0, 2)]: output";
    let e = refused(&a, &pads, &out(DType::F32, vec![3, 4]));
    assert_eq!(
        e.to_string(),
        format!("{contiguous} f32[3, 4] must be a contiguous f32[3, 5]")
    );
    let e = refused(&a, &pads, &out(DType::I32, vec![3, 5]));
    assert_eq!(
        e.to_string(),
        format!("{contiguous} i32[3, 5] must be a contiguous f32[3, 5]")
    );
    let transposed = Ops::permuted(&out(DType::F32, vec![5, 3]), &[1, 0]).unwrap();
    let e = refused(&a, &pads, &transposed);
    assert!(
        e.to_string()
            .starts_with(&format!("{contiguous} f32[3, 5] strides [1, 3] must be")),
        "{e}"
    );

    // Only 4-byte dtypes (the padding is filled by words).
    let h = input(DType::F16, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let e = refused(&h, &pads, &out(DType::F16, vec![3, 5]));
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert!(e.to_string().contains("pad of f16[2, 3] by"), "{e}");

    // Five axes that do not merge: the copy refuses after the fill would
    // have been recorded, so this checks the fill is not left behind.
    let wide =
        DeviceTensor::from_values(ops().runtime(), DType::F32, vec![3; 5], &[1.5; 243]).unwrap();
    let mut gapped = wide;
    for axis in 0..5 {
        gapped = gapped.slice(axis, 0..2).unwrap();
    }
    let pads5 = [(0, 0), (0, 0), (0, 0), (0, 0), (0, 1)];
    let e = refused(&gapped, &pads5, &out(DType::F32, vec![2, 2, 2, 2, 3]));
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("unsupported: pad of f32[2, 2, 2, 2, 2] strides [81, 27, 9, 3, 1] by")
            && e.to_string()
                .ends_with(": more than 4 axes remain after merging"),
        "{e}"
    );

    // The eager form fails the same way, before allocating.
    let e = ops().pad(&a, &[(1, 0)], 0.0).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("pad of f32[2, 3] by [(1, 0)]: one"),
        "{e}"
    );
}
