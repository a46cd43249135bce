//! Row gather (embedding lookup) against a CPU reference, compared exactly:
//! strided and unaligned tables, indices of several ranks, out-of-range
//! indices (negative or past the last row) giving rows of zeros.

use crate::common::*;
use hrx_tensor::{DType, DeviceTensor, TensorDesc};
use proptest::prelude::*;

fn dtypes() -> Vec<DType> {
    let target = ops().runtime().gpu().unwrap().target().clone();
    let mut all = vec![DType::F32, DType::I32];
    if target.shader_f16 && target.storage_16bit {
        all.extend([DType::F16, DType::BF16]);
    }
    all
}

fn indices(shape: &[usize], values: &[i32]) -> DeviceTensor {
    let v: Vec<f64> = values.iter().map(|&x| f64::from(x)).collect();
    DeviceTensor::from_values(ops().runtime(), DType::I32, shape.to_vec(), &v).unwrap()
}

fn index_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1 => Just(0usize), 6 => 1usize..6], 0..3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gather_matches_reference(
        rows in 1usize..20,
        d in prop_oneof![4 => 1usize..9, 1 => 60usize..90],
        ishape in index_shape(),
        seed in any::<u64>(),
    ) {
        let mut rng = Gen::new(seed);
        let n: usize = ishape.iter().product();
        // About one index in five out of range, on either side.
        let idx: Vec<i32> = (0..n)
            .map(|_| rng.below(rows + 6) as i32 - 3)
            .collect();
        let ind = indices(&ishape, &idx);
        let mut oshape = ishape.clone();
        oshape.push(d);
        for dtype in dtypes() {
            let raw: Vec<f64> = if dtype == DType::I32 {
                // Non-zero integers.
                values(&mut rng, rows * d, -1000.0, 1000.0)
                    .into_iter()
                    .map(|v| v.trunc() + v.signum())
                    .collect()
            } else {
                values(&mut rng, rows * d, -4.0, 4.0)
            };
            let stored = hrx_tensor::decode(
                &TensorDesc::new(dtype, vec![rows * d]).unwrap(),
                &hrx_tensor::encode(dtype, &raw),
            )
            .unwrap();
            let want: Vec<f64> = idx
                .iter()
                .flat_map(|&k| {
                    (0..d).map(move |j| (k, j))
                })
                .map(|(k, j)| {
                    if k >= 0 && (k as usize) < rows {
                        stored[k as usize * d + j]
                    } else {
                        0.0
                    }
                })
                .collect();
            for placement in PLACEMENTS {
                let table = input(dtype, &[rows, d], &raw, placement);
                let desc = TensorDesc::new(dtype, oshape.clone()).unwrap();
                let got = run(&[&table, &ind], desc, |g, out| {
                    ops().record_gather(g, &table, &ind, out)
                })
                .unwrap();
                assert_close(&got, &want, 0.0, 0.0, &format!("{dtype} {rows}x{d} by {ishape:?} {placement:?}"));
            }
        }
    }
}

#[test]
fn out_of_range_and_extreme_indices_give_zero_rows() {
    let table = input(
        DType::F32,
        &[3, 2],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        Placement::Contiguous,
    );
    let ind = indices(&[6], &[2, -1, 3, i32::MIN, i32::MAX, 0]);
    let got = run(
        &[&table, &ind],
        TensorDesc::new(DType::F32, vec![6, 2]).unwrap(),
        |g, out| ops().record_gather(g, &table, &ind, out),
    )
    .unwrap();
    assert_eq!(
        got,
        [5.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]
    );
    // A table without rows: every index is out of range.
    let empty = input(DType::F32, &[0, 2], &[], Placement::Contiguous);
    let got = run(
        &[&empty, &ind],
        TensorDesc::new(DType::F32, vec![6, 2]).unwrap(),
        |g, out| ops().record_gather(g, &empty, &ind, out),
    )
    .unwrap();
    assert_eq!(got, [0.0; 12]);
    // Eager form.
    let got = ops().gather(&table, &ind).unwrap();
    assert_eq!(got.desc().shape(), [6, 2]);
    assert_eq!(got.to_values().unwrap()[..2], [5.0, 6.0]);
}

#[test]
fn mismatches_are_errors_and_record_nothing() {
    let table = input(DType::F32, &[3, 2], &[1.0; 6], Placement::Contiguous);
    let flat = input(DType::F32, &[6], &[1.0; 6], Placement::Contiguous);
    let ind = indices(&[4], &[0, 1, 2, 0]);
    let find = input(DType::F32, &[4], &[0.0; 4], Placement::Contiguous);
    let out = ops()
        .output(TensorDesc::new(DType::F32, vec![4, 2]).unwrap())
        .unwrap();
    let mut graph = ops().runtime().graph();
    let e = ops()
        .record_gather(&mut graph, &flat, &ind, &out)
        .unwrap_err();
    assert!(e.to_string().contains("gather of f32[6] by i32[4]"), "{e}");
    assert!(e.to_string().contains("rank 2"), "{e}");
    let e = ops()
        .record_gather(&mut graph, &table, &find, &out)
        .unwrap_err();
    assert!(e.to_string().contains("must be i32"), "{e}");
    let wrong = ops()
        .output(TensorDesc::new(DType::F32, vec![4, 3]).unwrap())
        .unwrap();
    let e = ops()
        .record_gather(&mut graph, &table, &ind, &wrong)
        .unwrap_err();
    assert!(e.to_string().contains("output f32[4, 3]"), "{e}");
    let wide = indices(&[2, 4], &[0; 8]);
    let strided = wide.slice(1, 0..2).unwrap();
    let e = ops()
        .record_gather(
            &mut graph,
            &table,
            &strided,
            &ops()
                .output(TensorDesc::new(DType::F32, vec![2, 2, 2]).unwrap())
                .unwrap(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("contiguous"), "{e}");
    let other = hrx_tensor::Ops::new(&hrx_runtime::Runtime::from_env().unwrap());
    let e = other.gather(&table, &ind).unwrap_err();
    assert!(e.to_string().contains("another runtime domain"), "{e}");
    assert!(graph.is_empty());
}
