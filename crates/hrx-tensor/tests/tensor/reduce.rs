//! Sum / max / mean over any axis and argmax over the last axis, against
//! f64 references, with strided inputs and size-1 / empty axes.
//! Tolerance (f32): sum and mean within 1e-5 + rtol 1e-5 plus the
//! worst-case rounding of an f32 running sum, `len * 2^-24 * sum |x|` (over
//! `len` for the mean), so long axes with cancelling terms cannot fail by
//! chance (the seeds are random) while a missed or doubled element, off by
//! about |x|, still does; max and argmax exact.

use crate::common::*;
use hrx_tensor::{DType, DeviceTensor, TensorDesc, ops::Reduction};
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
        let bits = run_bits(&[&a], DType::F32, &out_shape, |g, out| {
            ops().record_reduce(g, reduction, &a, axis, out)
        }).unwrap();
        let got: Vec<f64> = bits.iter().map(|&b| f64::from(f32::from_bits(b))).collect();
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
                // The mean of an empty axis is NaN on both sides, but not
                // the poison NaN an unwritten element still holds.
                let tol = 1e-5 + 1e-5 * w.abs() + r;
                let ok = if w.is_nan() { written_nan(bits[i]) } else { (g - w).abs() <= tol };
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
    let e = ops().argmax(&empty).unwrap_err();
    assert!(
        e.to_string()
            .contains("argmax of f32[2, 0]: the last axis must be non-empty"),
        "{e}"
    );
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
    let mean = run_bits(&[&a], DType::F32, &[8, 6], |g, out| {
        ops().record_reduce(g, Reduction::Mean, &a, 0, out)
    })
    .unwrap();
    assert_eq!(mean.len(), 48);
    assert!(mean.iter().all(|&b| written_nan(b)), "{mean:x?}");
}

/// The mean of an empty axis is a NaN the kernel writes (0 / 0), told apart
/// from the poison NaN of an unwritten output by its bits.
#[test]
fn mean_of_an_empty_axis_is_written() {
    for placement in PLACEMENTS {
        let a = input(DType::F32, &[3, 0, 2], &[], placement);
        let got = run_bits(&[&a], DType::F32, &[3, 2], |g, out| {
            ops().record_reduce(g, Reduction::Mean, &a, 1, out)
        })
        .unwrap();
        assert!(
            got.len() == 6 && got.iter().all(|&b| written_nan(b)),
            "{placement:?}: {got:x?}"
        );
    }
}

/// A NaN that is not the poison pattern `run_bits` fills outputs with.
fn written_nan(bits: u32) -> bool {
    f32::from_bits(bits).is_nan() && bits != poison(DType::F32)
}

/// `common::run` for a 4-byte output of `dtype` and `shape`, returning the
/// raw bits of the elements: converting to f64 would keep only "some NaN",
/// which the poison is too.
fn run_bits(
    inputs: &[&DeviceTensor],
    dtype: DType,
    shape: &[usize],
    record: impl FnOnce(&mut hrx_runtime::Graph, &DeviceTensor) -> hrx_tensor::Result<()>,
) -> hrx_tensor::Result<Vec<u32>> {
    let mut out = ops().output(TensorDesc::new(dtype, shape.to_vec())?)?;
    let mut graph = ops().runtime().graph();
    if let Some(view) = out.binding() {
        graph.fill(view, poison(dtype))?;
    }
    record(&mut graph, &out)?;
    let deps: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
    out.set_producer(graph.prepare()?.submit_after(&deps)?);
    let bytes = out.download()?;
    Ok(bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}

/// An input whose axes do not merge needs a packing copy; an output that
/// fails to bind after it must still leave the caller's graph empty (no
/// copy queued for a dispatch that never comes).
#[test]
fn unbindable_output_after_packing_records_nothing() {
    let v: Vec<f64> = (0..24).map(f64::from).collect();
    // Padded [2, 3, 4]: axes 1 and 2 do not merge around axis 0.
    let padded = input(DType::F32, &[2, 3, 4], &v, Placement::Padded);
    for reduction in [Reduction::Sum, Reduction::Max, Reduction::Mean] {
        let mut graph = ops().runtime().graph();
        let out = unbindable(DType::F32, &[3, 4]);
        let e = ops()
            .record_reduce(&mut graph, reduction, &padded, 0, &out)
            .unwrap_err();
        let want = format!(
            "{} of f32[2, 3, 4] strides [21, 7, 1] over axis 0: tensor f32[3, 4] starts",
            format!("{reduction:?}").to_lowercase()
        );
        assert!(e.to_string().contains(&want), "{e}");
        assert!(graph.is_empty(), "{reduction:?}: {graph:?}");
    }
    // Transposed [2, 3, 4]: axes 0 and 1 do not merge before the last.
    let transposed = input(DType::F32, &[2, 3, 4], &v, Placement::Transposed);
    let mut graph = ops().runtime().graph();
    let out = unbindable(DType::I32, &[2, 3]);
    let e = ops()
        .record_argmax(&mut graph, &transposed, &out)
        .unwrap_err();
    let want = "argmax of f32[2, 3, 4] strides [12, 1, 3]: tensor i32[2, 3] starts";
    assert!(e.to_string().contains(want), "{e}");
    assert!(graph.is_empty(), "argmax: {graph:?}");
}

/// Every record form checks before recording: a non-f32 input, a wrong
/// output shape or dtype, or a tensor of another runtime domain is an error
/// naming the operator and the shapes, and the graph stays empty.
#[test]
fn record_errors_name_the_operator_and_record_nothing() {
    let a = input(DType::F32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let ints = input(DType::I32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let empty_rows = input(DType::F32, &[2, 0], &[], Placement::Contiguous);
    let other_rt = hrx_runtime::Runtime::from_env().unwrap();
    let other = hrx_tensor::Ops::new(&other_rt);
    let foreign = DeviceTensor::from_values(&other_rt, DType::F32, vec![2, 3], &[1.0; 6]).unwrap();
    let ours = |dtype, shape: &[usize]| {
        ops()
            .output(TensorDesc::new(dtype, shape.to_vec()).unwrap())
            .unwrap()
    };
    let theirs = |dtype, shape: &[usize]| {
        other
            .output(TensorDesc::new(dtype, shape.to_vec()).unwrap())
            .unwrap()
    };
    let domain = "belongs to another runtime domain";
    let mut graph = ops().runtime().graph();
    for reduction in [Reduction::Sum, Reduction::Max, Reduction::Mean] {
        let name = format!("{reduction:?}").to_lowercase();
        let cases = [
            (
                &ints,
                ours(DType::F32, &[2]),
                "i32[2, 3] over axis 1: f32 only".to_string(),
            ),
            (
                &a,
                ours(DType::F32, &[3]),
                "f32[2, 3] over axis 1: output f32[3] must be a contiguous f32[2]".into(),
            ),
            (
                &a,
                ours(DType::I32, &[2]),
                "f32[2, 3] over axis 1: output i32[2] must be a contiguous f32[2]".into(),
            ),
            (
                &foreign,
                ours(DType::F32, &[2]),
                format!("f32[2, 3] over axis 1: tensor f32[2, 3] {domain}"),
            ),
            (
                &a,
                theirs(DType::F32, &[2]),
                format!("f32[2, 3] over axis 1: tensor f32[2] {domain}"),
            ),
        ];
        for (x, out, want) in cases {
            let e = ops()
                .record_reduce(&mut graph, reduction, x, 1, &out)
                .unwrap_err();
            assert!(e.to_string().contains(&format!("{name} of {want}")), "{e}");
        }
    }
    let cases = [
        (
            &ints,
            ours(DType::I32, &[2]),
            "argmax of i32[2, 3]: f32 only".to_string(),
        ),
        (
            &a,
            ours(DType::I32, &[3]),
            "argmax of f32[2, 3]: output i32[3] must be a contiguous i32[2]".into(),
        ),
        (
            &a,
            ours(DType::F32, &[2]),
            "argmax of f32[2, 3]: output f32[2] must be a contiguous i32[2]".into(),
        ),
        (
            &foreign,
            ours(DType::I32, &[2]),
            format!("argmax of f32[2, 3]: tensor f32[2, 3] {domain}"),
        ),
        (
            &a,
            theirs(DType::I32, &[2]),
            format!("argmax of f32[2, 3]: tensor i32[2] {domain}"),
        ),
        (
            &empty_rows,
            ours(DType::I32, &[2]),
            "argmax of f32[2, 0]: the last axis must be non-empty".into(),
        ),
    ];
    for (x, out, want) in cases {
        let e = ops().record_argmax(&mut graph, x, &out).unwrap_err();
        assert!(e.to_string().contains(&want), "{e}");
    }
    assert!(graph.is_empty(), "{graph:?}");
}

/// More outputs than 65,535 workgroups of 256 invocations cover (the grid
/// limit of lavapipe and most devices): the last outputs are reached only
/// by a grid-stride loop. 2^24 outputs is the most lavapipe binds. The input
/// is fresh (zeroed) storage, so every output is 0 and an unwritten one is
/// still poison; to keep the test quick nothing is uploaded and only the
/// outputs around the end of the first grid are read back.
#[test]
fn more_outputs_than_one_grid_covers() {
    let n = 1usize << 24;
    let a = ops()
        .output(TensorDesc::new(DType::F32, vec![n, 1]).unwrap())
        .unwrap();
    let mut outs = [DType::F32, DType::I32].map(|dtype| {
        ops()
            .output(TensorDesc::new(dtype, vec![n]).unwrap())
            .unwrap()
    });
    let mut graph = ops().runtime().graph();
    for out in &outs {
        graph
            .fill(out.binding().unwrap(), poison(out.desc().dtype()))
            .unwrap();
    }
    ops()
        .record_reduce(&mut graph, Reduction::Max, &a, 1, &outs[0])
        .unwrap();
    ops().record_argmax(&mut graph, &a, &outs[1]).unwrap();
    let done = graph.prepare().unwrap().submit().unwrap();
    let first_grid = 65_535 * 256;
    for out in &mut outs {
        out.set_producer(done.clone());
        let tail = out.slice(0, first_grid - 1024..n).unwrap();
        let got = tail.to_values().unwrap();
        let wrong = got.iter().position(|&x| x != 0.0);
        assert_eq!(
            wrong,
            None,
            "{}: first wrong output past {}",
            out.desc(),
            first_grid - 1024
        );
    }
}

/// The first index of the largest value, NaN ignored, 0 where nothing is
/// above -inf: what argmax promises, written without its running compare.
fn argmax_reference(row: &[f64]) -> f64 {
    let max = row
        .iter()
        .filter(|x| !x.is_nan())
        .fold(f64::NEG_INFINITY, |m, &x| m.max(x));
    if max == f64::NEG_INFINITY {
        return 0.0;
    }
    row.iter().position(|&x| x == max).unwrap() as f64
}

/// Long rows (a language model's logits and shorter), which take the
/// row-parallel kernel from 256 columns on, next to rows just below that:
/// 1, 3 and 64 rows of 49,152, 1,000, 257, 256 and 255 seeded values, each
/// placement (the transposed one reads columns strided by the row count).
/// Rows in turn: plain; the maximum repeated over a run and at scattered
/// places (the first wins), in one row then beaten at the last column; NaNs scattered, one at column 0;
/// all -inf and all NaN (index 0); -inf and NaN with one finite value.
#[test]
fn long_rows_argmax_matches_reference() {
    let mut rng = Gen::new(0xA4_6A_A7);
    for cols in [49_152, 1000, 257, 256, 255] {
        for rows in [1, 3, 64] {
            let mut v: Vec<f64> = values(&mut rng, rows * cols, -3.0, 3.0)
                .iter()
                .map(|x| (*x as f32) as f64)
                .collect();
            for (r, row) in v.chunks_mut(cols).enumerate() {
                match (r + rows) % 7 {
                    1 | 4 => {
                        // A run of ties (several per work item and
                        // subgroup) and scattered ones, some before it.
                        let top = 3.5 + r as f64;
                        let start = rng.below(cols / 2);
                        row[start..start + cols / 3].fill(top);
                        for _ in 0..4 {
                            row[rng.below(cols)] = top;
                        }
                        if (r + rows) % 7 == 4 {
                            row[cols - 1] = top + 1.0;
                        }
                    }
                    2 => {
                        row[0] = f64::NAN;
                        for _ in 0..cols / 8 {
                            row[rng.below(cols)] = f64::NAN;
                        }
                        row[rng.below(cols)] = 5.0;
                        row[rng.below(cols)] = 5.0;
                    }
                    3 => row.fill(f64::NEG_INFINITY),
                    5 => row.fill(f64::NAN),
                    6 => {
                        for (i, x) in row.iter_mut().enumerate() {
                            *x = if i % 3 == 0 {
                                f64::NAN
                            } else {
                                f64::NEG_INFINITY
                            };
                        }
                        row[cols - 2] = -1e30;
                    }
                    _ => {}
                }
            }
            let want: Vec<f64> = v.chunks(cols).map(argmax_reference).collect();
            for placement in PLACEMENTS {
                let a = input(DType::F32, &[rows, cols], &v, placement);
                let got = run(
                    &[&a],
                    TensorDesc::new(DType::I32, vec![rows]).unwrap(),
                    |g, out| ops().record_argmax(g, &a, out),
                )
                .unwrap();
                let what = format!("argmax [{rows}, {cols}] {placement:?}");
                assert_close(&got, &want, 0.0, 0.0, &what);
            }
        }
    }
}
