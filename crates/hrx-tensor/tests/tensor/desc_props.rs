//! Property tests for tensor descriptors: sizes, strides, overlap and
//! overflow checks, against a brute-force enumeration of element offsets.

use hrx_tensor::{DType, Layout, TensorDesc};
use proptest::prelude::*;
use std::collections::HashSet;

fn dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(DType::ALL.to_vec())
}

/// Every element offset of a (small) descriptor, by enumeration.
fn offsets(desc: &TensorDesc) -> Vec<usize> {
    let mut all = vec![0usize];
    for (&dim, &stride) in desc.shape().iter().zip(desc.strides()) {
        all = all
            .iter()
            .flat_map(|&base| (0..dim).map(move |i| base + i * stride))
            .collect();
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn contiguous_descriptors_pack_elements(dtype in dtype(), shape in prop::collection::vec(0usize..5, 0..5)) {
        let d = TensorDesc::new(dtype, shape.clone()).unwrap();
        let elements: usize = shape.iter().product();
        prop_assert_eq!(d.elements(), elements);
        prop_assert_eq!(d.bytes(), elements * dtype.bytes());
        prop_assert_eq!(d.is_empty(), elements == 0);
        prop_assert!(d.is_contiguous());
        prop_assert_eq!(d.layout(), Layout::Any);
        if !d.is_empty() {
            let mut o = offsets(&d);
            o.sort_unstable();
            prop_assert_eq!(o, (0..elements).collect::<Vec<_>>());
        }
    }

    /// Permuting and slicing a contiguous tensor gives accepted layouts whose
    /// `bytes()` is exactly one past the largest offset.
    #[test]
    fn permuted_slices_are_accepted(
        dtype in dtype(),
        shape in prop::collection::vec(1usize..5, 1..5),
        seed in any::<u64>(),
    ) {
        let base = TensorDesc::new(dtype, shape.clone()).unwrap();
        let rank = shape.len();
        let mut perm: Vec<usize> = (0..rank).collect();
        let mut s = seed;
        for i in (1..rank).rev() {
            perm.swap(i, (s % (i as u64 + 1)) as usize);
            s /= 7;
        }
        let new_shape: Vec<usize> = perm.iter().map(|&a| (shape[a] - (s as usize % shape[a])).max(1)).collect();
        let strides: Vec<usize> = perm.iter().map(|&a| base.strides()[a]).collect();
        let d = TensorDesc::strided(dtype, new_shape, strides).unwrap();
        let o = offsets(&d);
        let max = *o.iter().max().unwrap();
        prop_assert_eq!(d.bytes(), (max + 1) * dtype.bytes());
        prop_assert_eq!(o.iter().collect::<HashSet<_>>().len(), o.len());
        prop_assert!(d.bytes() <= base.bytes());
        let identity = perm.iter().enumerate().all(|(i, &a)| i == a || shape[a] == 1);
        if identity && d.shape() == base.shape() {
            prop_assert!(d.is_contiguous());
        }
    }

    /// Whatever strides are given, an accepted layout never maps two indices
    /// to one element; a rejected one is rejected with an error, not a panic.
    #[test]
    fn accepted_layouts_never_overlap(
        shape in prop::collection::vec(0usize..4, 0..4),
        strides in prop::collection::vec(0usize..12, 0..4),
    ) {
        let rank = shape.len().min(strides.len());
        let (shape, strides) = (shape[..rank].to_vec(), strides[..rank].to_vec());
        if let Ok(d) = TensorDesc::strided(DType::F32, shape.clone(), strides) {
            let o = offsets(&d);
            if d.is_empty() {
                prop_assert_eq!(d.bytes(), 0);
            } else {
                prop_assert_eq!(o.iter().collect::<HashSet<_>>().len(), o.len());
                prop_assert_eq!(d.bytes(), (o.iter().max().unwrap() + 1) * 4);
                if d.is_contiguous() {
                    prop_assert_eq!(d.bytes(), d.elements() * 4);
                }
            }
        }
    }

    /// Huge extents and strides fail cleanly.
    #[test]
    fn sizes_never_wrap(
        shape in prop::collection::vec(prop_oneof![0usize..3, Just(usize::MAX / 2), Just(1usize << 40), any::<usize>()], 0..5),
        strides in prop::collection::vec(prop_oneof![1usize..3, Just(usize::MAX), any::<usize>()], 0..5),
        dtype in dtype(),
    ) {
        if let Ok(d) = TensorDesc::new(dtype, shape.clone()) {
            let product = shape.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
            prop_assert_eq!(Some(d.elements()), product);
            prop_assert_eq!(d.bytes(), d.elements() * dtype.bytes());
        }
        let rank = shape.len().min(strides.len());
        let _ = TensorDesc::strided(dtype, shape[..rank].to_vec(), strides[..rank].to_vec());
    }
}

#[test]
fn scalars_empties_and_labels() {
    let scalar = TensorDesc::new(DType::F16, vec![]).unwrap();
    assert_eq!((scalar.elements(), scalar.bytes()), (1, 2));
    assert!(scalar.is_contiguous() && !scalar.is_empty());
    let empty = TensorDesc::new(DType::F32, vec![3, 0, 5]).unwrap();
    assert_eq!((empty.elements(), empty.bytes()), (0, 0));
    assert!(empty.is_empty());
    assert!(TensorDesc::new(DType::F32, vec![usize::MAX, 2]).is_err());
    assert!(TensorDesc::new(DType::F32, vec![usize::MAX / 2]).is_err());
    assert!(TensorDesc::strided(DType::F32, vec![2], vec![1, 1]).is_err());
    assert!(TensorDesc::strided(DType::F32, vec![2, 3], vec![0, 1]).is_err());
    // Broadcast-style stride 0 is fine on an axis of extent 1.
    let one = TensorDesc::strided(DType::F32, vec![1, 3], vec![0, 1]).unwrap();
    assert!(one.is_contiguous());
    let gap = TensorDesc::strided(DType::F32, vec![2, 2], vec![4, 1]).unwrap();
    assert_eq!(gap.bytes(), 24);
    assert!(!gap.is_contiguous());
    let rows = TensorDesc::new(DType::F32, vec![2, 3])
        .unwrap()
        .with_layout(Layout::Rows);
    assert_eq!(rows.unwrap().layout(), Layout::Rows);
    let err = TensorDesc::new(DType::F32, vec![2, 3])
        .unwrap()
        .with_layout(Layout::Nchw);
    assert!(err.unwrap_err().to_string().contains("nchw needs rank 4"));
    let a = TensorDesc::new(DType::F32, vec![2, 3]).unwrap();
    assert_ne!(a.clone().with_layout(Layout::Rows).unwrap(), a);
}
