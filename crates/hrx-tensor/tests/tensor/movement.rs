//! Copies, permutes, concatenation and a fixed padding case against host
//! references (exact: data movement only; padding in depth is in pad.rs).
//! Random shapes stay within 2^24 elements: four long axes (up to 65M
//! elements) would exceed the 128 MiB one binding reaches on lavapipe,
//! where the copy rightly refuses them with an error (about one CI run in
//! 2500 drew such a shape).

use crate::common::*;
use hrx_tensor::{DType, Ops, TensorDesc};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn permute_and_concat_match_reference(
        shape in prop::collection::vec(prop_oneof![1 => Just(0usize), 2 => Just(1usize), 5 => 2usize..7, 1 => 70usize..90], 1..5)
            .prop_filter("fits one lavapipe binding", |s| s.iter().product::<usize>() <= 1 << 24),
        seed in any::<u64>(),
    ) {
        let mut rng = Gen::new(seed);
        let n: usize = shape.iter().product();
        let dtype = [DType::F32, DType::I32][rng.below(2)];
        let v: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
        let placement = PLACEMENTS[rng.below(3)];
        let a = input(dtype, &shape, &v, placement);
        // A random permutation.
        let rank = shape.len();
        let mut axes: Vec<usize> = (0..rank).collect();
        for i in (1..rank).rev() { axes.swap(i, rng.below(i + 1)); }
        let view = Ops::permuted(&a, &axes).unwrap();
        let pshape = view.desc().shape().to_vec();
        let got = run(&[&a], TensorDesc::new(dtype, pshape.clone()).unwrap(), |g, out| ops().record_copy(g, &view, out)).unwrap();
        let want: Vec<f64> = (0..n).map(|i| {
            let pi = unravel(i, &pshape);
            let mut index = vec![0; rank];
            for (k, &ax) in axes.iter().enumerate() { index[ax] = pi[k]; }
            v[ravel_broadcast(&index, &shape)]
        }).collect();
        assert_close(&got, &want, 0.0, 0.0, &format!("permute {shape:?} by {axes:?} {placement:?}"));

        // Concatenate `a` with a second tensor along a random axis.
        let axis = rng.below(rank);
        let mut bshape = shape.clone();
        bshape[axis] = rng.below(4);
        let nb: usize = bshape.iter().product();
        let vb: Vec<f64> = (0..nb).map(|i| -(i as f64) - 1.0).collect();
        let b = input(dtype, &bshape, &vb, Placement::Contiguous);
        let cshape = Ops::concat_shape(&[&a, &b], axis).unwrap();
        let got = run(&[&a, &b], TensorDesc::new(dtype, cshape.clone()).unwrap(), |g, out| ops().record_concat(g, &[&a, &b], axis, out)).unwrap();
        let nc: usize = cshape.iter().product();
        let want: Vec<f64> = (0..nc).map(|i| {
            let mut index = unravel(i, &cshape);
            if index[axis] < shape[axis] { v[ravel_broadcast(&index, &shape)] } else {
                index[axis] -= shape[axis];
                vb[ravel_broadcast(&index, &bshape)]
            }
        }).collect();
        assert_close(&got, &want, 0.0, 0.0, &format!("concat {shape:?} + {bshape:?} on {axis}"));
    }
}

#[test]
fn pad_and_contiguous() {
    let a = input(
        DType::F32,
        &[2, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        Placement::Transposed,
    );
    let c = ops().contiguous(&a).unwrap();
    assert!(c.desc().is_contiguous());
    assert_eq!(c.to_values().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let p = ops().pad(&a, &[(1, 0), (0, 2)], -1.0).unwrap();
    assert_eq!(p.desc().shape(), [3, 5]);
    assert_eq!(
        p.to_values().unwrap(),
        [
            -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 2.0, 3.0, -1.0, -1.0, 4.0, 5.0, 6.0, -1.0, -1.0
        ]
    );
    let t = ops().permute(&c, &[1, 0]).unwrap();
    assert_eq!(t.to_values().unwrap(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert!(Ops::permuted(&c, &[0, 0]).is_err());
    assert!(ops().pad(&a, &[(1, 0)], 0.0).is_err());
    let i = input(DType::I32, &[2, 3], &[1.0; 6], Placement::Contiguous);
    let e = ops().concat(&[&c, &i], 0).unwrap_err();
    assert!(
        e.to_string()
            .contains("concat of [[2, 3], [2, 3]] along axis 0"),
        "{e}"
    );
}
