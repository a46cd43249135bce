//! Top-k with the softmax denominator against an f64 reference: indices
//! and values exact (ties by smaller index, NaN and -inf never taken),
//! the denominator within its rounding bound. Rows full of ties, strided and
//! transposed inputs, rows with fewer than `k` values, and an LLM-sized
//! row.

use crate::common::*;
use hrx_tensor::{DType, DeviceTensor, TensorDesc, ops::TOP_K_MAX};

/// The reference: the `k` first of the row's values above -inf in the
/// order larger value first, equal values by smaller index (index -1 and
/// -inf past the last), and the sum of `exp((x - top) / t)` over them.
fn reference(row: &[f64], k: usize, t: f64) -> (Vec<f64>, Vec<i64>, f64) {
    let mut order: Vec<usize> = (0..row.len())
        .filter(|&j| row[j] > f64::NEG_INFINITY)
        .collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let top = order.first().map(|&j| row[j]);
    let mass = top.map_or(0.0, |top| {
        order.iter().map(|&j| ((row[j] - top) / t).exp()).sum()
    });
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    for n in 0..k {
        match order.get(n) {
            Some(&j) => {
                values.push(row[j]);
                indices.push(j as i64);
            }
            None => {
                values.push(f64::NEG_INFINITY);
                indices.push(-1);
            }
        }
    }
    (values, indices, mass)
}

/// Runs top-k on `data` (`rows x cols`, laid out as `placement`) and
/// checks it against the reference.
fn check(rows: usize, cols: usize, k: usize, data: &[f64], placement: Placement, temps: &[f64]) {
    let what = format!("{rows}x{cols} k={k} {placement:?}");
    let x = input(DType::F32, &[rows, cols], data, placement);
    let rt = ops().runtime().clone();
    let t = DeviceTensor::from_values(&rt, DType::F32, vec![rows], temps).unwrap();
    let (values, indices, mass) = ops().top_k(&x, &t, k).unwrap();
    let (values, indices, mass) = (
        values.to_values().unwrap(),
        indices.to_values().unwrap(),
        mass.to_values().unwrap(),
    );
    for r in 0..rows {
        let row: Vec<f64> = data[r * cols..(r + 1) * cols].to_vec();
        let (want_v, want_i, want_m) = reference(&row, k, temps[r]);
        let got_i: Vec<i64> = indices[r * k..(r + 1) * k]
            .iter()
            .map(|&i| i as i64)
            .collect();
        assert_eq!(got_i, want_i, "{what}: indices of row {r}");
        assert_eq!(
            &values[r * k..(r + 1) * k],
            &want_v[..],
            "{what}: values of row {r}"
        );
        // The exponentials' error, plus the worst-case rounding of an f32
        // running sum over the row: a missed or doubled leading term, at
        // least 1 against a denominator of a few, still fails.
        let tolerance = (2e-5 + cols as f64 * 2f64.powi(-24)) * want_m;
        assert!(
            (mass[r] - want_m).abs() <= tolerance,
            "{what}: mass of row {r}: {} against {want_m}",
            mass[r]
        );
    }
}

#[test]
fn top_k_matches_the_reference_with_ties_and_strides() {
    let mut rng = Gen::new(7);
    let cases = [
        (1, 1, 1),
        (1, 5, 5),
        (3, 7, 10),
        (2, 300, 64),
        (5, 33, 4),
        (4, 1000, 17),
        (1, 2049, TOP_K_MAX),
    ];
    for (n, &(rows, cols, k)) in cases.iter().enumerate() {
        // Few distinct values, so rows are full of ties.
        let data: Vec<f64> = (0..rows * cols)
            .map(|_| (rng.below(9) as f64 - 4.0) * 0.5)
            .collect();
        let temps: Vec<f64> = (0..rows)
            .map(|_| rng.uniform(0.2, 2.0) as f32 as f64)
            .collect();
        check(rows, cols, k, &data, PLACEMENTS[n % 3], &temps);
    }
}

#[test]
fn nan_and_minus_infinity_are_never_taken() {
    let nan = f64::NAN;
    let ninf = f64::NEG_INFINITY;
    let rows = [
        vec![nan, 1.0, ninf, 3.0, nan, 1.0],
        vec![ninf, ninf, ninf, ninf, ninf, ninf],
        vec![nan, nan, nan, nan, nan, nan],
        vec![ninf, 2.0, nan, -7.0, ninf, 2.0],
    ];
    let data: Vec<f64> = rows.concat();
    for placement in PLACEMENTS {
        check(4, 6, 5, &data, placement, &[1.0, 1.0, 0.5, 2.0]);
    }
}

/// Rows longer than a chunk (2,048 columns on a GPU, 4,096 on a CPU
/// device) are scanned in chunks and merged: ties across chunks go to the
/// smaller column, a last chunk of a few columns counts, and a row with
/// fewer values than `k` ends with -1.
#[test]
fn long_rows_merge_their_chunks() {
    let mut rng = Gen::new(3);
    let (rows, cols) = (3, 8_200);
    let mut data: Vec<f64> = (0..rows * cols)
        .map(|_| match rng.below(20) {
            0 => f64::NAN,
            1 => f64::NEG_INFINITY,
            v => (v % 7) as f64 * 0.25,
        })
        .collect();
    // Row 1: the largest value only in the last chunk's few columns.
    data[cols + cols - 3] = 9.0;
    // Row 2: three values, the rest -inf or NaN.
    for (j, v) in data[2 * cols..].iter_mut().enumerate() {
        *v = match j {
            5 => 1.0,
            4_500 => 1.0,
            8_199 => 2.0,
            _ if j % 2 == 0 => f64::NAN,
            _ => f64::NEG_INFINITY,
        };
    }
    let layouts = [
        (Placement::Contiguous, 64),
        (Placement::Padded, 7),
        (Placement::Transposed, 64),
    ];
    for (placement, k) in layouts {
        check(rows, cols, k, &data, placement, &[1.0, 0.5, 1.7]);
    }
}

#[test]
fn a_vocabulary_sized_row_of_random_logits() {
    let mut rng = Gen::new(11);
    let cols = 49_152;
    let data: Vec<f64> = (0..2 * cols)
        .map(|_| rng.uniform(-12.0, 12.0) as f32 as f64)
        .collect();
    check(2, cols, 64, &data, Placement::Contiguous, &[0.7, 1.3]);
}

#[test]
fn bad_shapes_and_sizes_are_refused_before_recording() {
    let rt = ops().runtime().clone();
    let f32s = |shape: Vec<usize>| {
        ops()
            .output(TensorDesc::new(DType::F32, shape).unwrap())
            .unwrap()
    };
    let i32s = |shape: Vec<usize>| {
        ops()
            .output(TensorDesc::new(DType::I32, shape).unwrap())
            .unwrap()
    };
    let x = DeviceTensor::from_values(&rt, DType::F32, vec![2, 8], &[0.5; 16]).unwrap();
    let t = DeviceTensor::from_values(&rt, DType::F32, vec![2], &[1.0, 1.0]).unwrap();
    let refused = |x: &DeviceTensor,
                   t: &DeviceTensor,
                   v: &DeviceTensor,
                   i: &DeviceTensor,
                   m: &DeviceTensor| {
        let mut g = rt.graph();
        let e = ops().record_top_k(&mut g, x, t, v, i, m).unwrap_err();
        assert_eq!(g.len(), 0, "{e}");
        e.to_string()
    };
    let (v, i, m) = (f32s(vec![2, 3]), i32s(vec![2, 3]), f32s(vec![2]));
    assert!(refused(&x, &t, &f32s(vec![2, 0]), &i32s(vec![2, 0]), &m).contains("k = 0"));
    let big = TOP_K_MAX + 1;
    assert!(refused(&x, &t, &f32s(vec![2, big]), &i32s(vec![2, big]), &m).contains("outside"));
    assert!(refused(&x, &f32s(vec![3]), &v, &i, &m).contains("temperature"));
    assert!(refused(&x, &t, &v, &f32s(vec![2, 3]), &m).contains("output"));
    assert!(refused(&x, &t, &v, &i, &f32s(vec![2, 1])).contains("output"));
    assert!(refused(&x, &t, &f32s(vec![6]), &i, &m).contains("values"));
    let flat = DeviceTensor::from_values(&rt, DType::F32, vec![16], &[0.5; 16]).unwrap();
    assert!(refused(&flat, &t, &v, &i, &m).contains("rank 2"));
    let empty_rows = ops()
        .output(TensorDesc::new(DType::F32, vec![2, 0]).unwrap())
        .unwrap();
    assert!(refused(&empty_rows, &t, &v, &i, &m).contains("non-empty"));
    // An output over the input.
    let shared = ops()
        .output(TensorDesc::new(DType::F32, vec![32]).unwrap())
        .unwrap();
    let over = shared
        .view(0, TensorDesc::new(DType::F32, vec![2, 3]).unwrap())
        .unwrap();
    let input = shared
        .view(0, TensorDesc::new(DType::F32, vec![2, 8]).unwrap())
        .unwrap();
    assert!(refused(&input, &t, &over, &i, &m).contains("overlap"));
}
