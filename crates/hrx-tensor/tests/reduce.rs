//! Sum / max / mean over any axis and argmax over the last axis, against
//! f64 references, with strided inputs and size-1 / empty axes.
//! Tolerance (f32): sum and mean within 1e-5 + rtol 1e-5 plus the
//! worst-case rounding of an f32 running sum, `len * 2^-24 * sum |x|` (over
//! `len` for the mean), so long axes with cancelling terms cannot fail by
//! chance (the seeds are random) while a missed or doubled element, off by
//! about |x|, still does; max and argmax exact.

mod common;

use common::*;
use hrx_tensor::{DType, TensorDesc, ops::Reduction};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn reductions_match_reference(
        // At most 2^24 elements: three long axes would exceed lavapipe's
        // 128 MiB storage-binding limit, which the operator reports as an
        // error rather than a result to compare.
        shape in prop::collection::vec(prop_oneof![1 => Just(0usize), 2 => Just(1usize), 5 => 2usize..9, 1 => 300usize..400], 1..4)
            .prop_filter("at most 2^24 elements", |s| s.iter().product::<usize>() <= 1 << 24),
        seed in any::<u64>(),
    ) {
        let mut rng = Gen::new(seed);
        let axis = rng.below(shape.len());
        let reduction = [Reduction::Sum, Reduction::Max, Reduction::Mean][rng.below(3)];
        let n: usize = shape.iter().product();
        let v: Vec<f64> = values(&mut rng, n, -3.0, 3.0).iter().map(|x| (*x as f32) as f64).collect();
        let placement = PLACEMENTS[rng.below(3)];
        let a = input(DType::F32, &shape, &v, placement);
        let mut out_shape = shape.clone();
        out_shape.remove(axis);
        let got = run(&[&a], TensorDesc::new(DType::F32, out_shape.clone()).unwrap(), |g, out| {
            ops().record_reduce(g, reduction, &a, axis, out)
        }).unwrap();
        let m: usize = out_shape.iter().product();
        let (want, rounding): (Vec<f64>, Vec<f64>) = (0..m).map(|o| {
            let mut index = unravel(o, &out_shape);
            index.insert(axis, 0);
            let items: Vec<f64> = (0..shape[axis]).map(|k| { index[axis] = k; v[ravel_broadcast(&index, &shape)] }).collect();
            let len = items.len() as f64;
            let bound = len * f64::from(f32::EPSILON) / 2.0 * items.iter().map(|x| x.abs()).sum::<f64>();
            match reduction {
                Reduction::Sum => (items.iter().sum(), bound),
                Reduction::Max => (items.iter().cloned().fold(f64::NEG_INFINITY, f64::max), 0.0),
                Reduction::Mean => (items.iter().sum::<f64>() / len, bound / len.max(1.0)),
            }
        }).unzip();
        let what = format!("{reduction:?} axis {axis} {shape:?} {placement:?}");
        if reduction == Reduction::Max {
            assert_close(&got, &want, 1e-5, 1e-5, &what);
        } else {
            for (i, ((g, w), r)) in got.iter().zip(&want).zip(&rounding).enumerate() {
                // The mean of an empty axis is NaN on both sides.
                let tol = 1e-5 + 1e-5 * w.abs() + r;
                let ok = if w.is_nan() { g.is_nan() } else { (g - w).abs() <= tol };
                prop_assert!(ok, "{what}: element {i}: got {g}, want {w} (tolerance {tol})");
            }
        }

        if shape[shape.len() - 1] > 0 {
            let got = run(&[&a], TensorDesc::new(DType::I32, shape[..shape.len() - 1].to_vec()).unwrap(), |g, out| {
                ops().record_argmax(g, &a, out)
            }).unwrap();
            let cols = shape[shape.len() - 1];
            let want: Vec<f64> = v.chunks(cols).map(|row| {
                let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                row.iter().position(|&x| x == max).unwrap() as f64
            }).collect();
            assert_close(&got, &want, 0.0, 0.0, &format!("argmax {shape:?} {placement:?}"));
        }
    }
}

#[test]
fn reduction_errors() {
    let a = input(DType::F32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let e = ops().reduce(Reduction::Sum, &a, 2).unwrap_err();
    assert!(
        e.to_string()
            .contains("sum of f32[2, 3] over axis 2: axis 2 is out of range"),
        "{e}"
    );
    let empty = input(DType::F32, &[2, 0], &[], Placement::Contiguous);
    assert!(ops().argmax(&empty).is_err());
    let s = ops()
        .reduce(Reduction::Sum, &empty, 1)
        .unwrap()
        .to_values()
        .unwrap();
    assert_eq!(s, [0.0, 0.0]);
    let arg = ops().argmax(&a).unwrap();
    assert_eq!(arg.desc().dtype(), DType::I32);
    assert_eq!(arg.to_values().unwrap(), [0.0, 0.0]);
}

/// An empty input whose axes do not merge (a padded slice with a zero
/// dimension) reduces like any empty input: it reads nothing. Found on the
/// H200 tier, where proptest drew `mean of f32[0, 8, 6] over axis 0`.
#[test]
fn empty_strided_inputs_reduce_without_packing() {
    let a = input(DType::F32, &[0, 8, 6], &[], Placement::Padded);
    for (reduction, want) in [
        (Reduction::Sum, 0.0f64),
        (Reduction::Max, f64::NEG_INFINITY),
    ] {
        let got = run(
            &[&a],
            TensorDesc::new(DType::F32, vec![8, 6]).unwrap(),
            |g, out| ops().record_reduce(g, reduction, &a, 0, out),
        )
        .unwrap();
        assert!(got.iter().all(|&x| x == want), "{reduction:?}: {got:?}");
    }
    let mean = run(
        &[&a],
        TensorDesc::new(DType::F32, vec![8, 6]).unwrap(),
        |g, out| ops().record_reduce(g, Reduction::Mean, &a, 0, out),
    )
    .unwrap();
    assert_eq!(mean.len(), 48);
}
