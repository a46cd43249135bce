//! Device tensors: construction checks, views, reshapes and slices without
//! copies, host round trips. Runs on lavapipe.

use hrx_runtime::{Completion, MemoryPlacement, Runtime};
use hrx_tensor::{DType, DeviceTensor, Layout, TensorDesc};
use std::sync::Arc;

fn desc(dtype: DType, shape: &[usize]) -> TensorDesc {
    TensorDesc::new(dtype, shape.to_vec()).unwrap()
}

#[test]
fn tensors_are_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<DeviceTensor>();
}

#[test]
fn empty_tensors_need_no_device() {
    let rt = Runtime::from_env().unwrap();
    let t = DeviceTensor::from_parts(
        rt.clone(),
        desc(DType::F32, &[0]),
        None,
        Completion::ready(),
    )
    .unwrap();
    assert!(t.binding().is_none());
    assert!(t.view(0, desc(DType::F32, &[])).is_err());
    assert!(t.view(0, desc(DType::F32, &[0, 3])).is_ok());
    assert!(t.reshape(vec![4, 0]).is_ok());
    assert!(t.download().unwrap().is_empty());
    assert!(!rt.is_open(), "empty tensors must not open the device");
}

#[test]
fn from_parts_checks_storage() {
    let rt = Runtime::from_env().unwrap();
    let other = Runtime::from_env().unwrap();
    let buf = rt.allocate(64, MemoryPlacement::GpuLocal).unwrap();
    let foreign = other.allocate(64, MemoryPlacement::GpuLocal).unwrap();
    let d = desc(DType::F32, &[4, 4]);
    let ok = DeviceTensor::from_parts(rt.clone(), d.clone(), Some(buf.view()), Completion::ready());
    assert_eq!(ok.unwrap().binding().unwrap().len(), 64);
    let cases = [
        (rt.clone(), d.clone(), None, "needs storage"),
        (
            rt.clone(),
            desc(DType::F32, &[0]),
            Some(buf.view()),
            "must not have storage",
        ),
        (
            rt.clone(),
            d.clone(),
            Some(foreign.view()),
            "another runtime",
        ),
        (
            rt.clone(),
            desc(DType::F32, &[17]),
            Some(buf.view()),
            "spans 68",
        ),
        (
            rt.clone(),
            desc(DType::F32, &[2]),
            Some(buf.view().slice(2..20).unwrap()),
            "multiple",
        ),
        (
            other.clone(),
            d.clone(),
            Some(buf.view()),
            "another runtime",
        ),
    ];
    for (runtime, d, view, why) in cases {
        let e = DeviceTensor::from_parts(runtime, d, view, Completion::ready()).unwrap_err();
        assert!(e.to_string().contains(why), "{e} should say {why}");
    }
    // A producer of another domain is refused.
    let mut g = other.graph();
    g.fill(foreign.view(), 0).unwrap();
    let foreign_producer = g.prepare().unwrap().submit().unwrap();
    assert!(DeviceTensor::from_parts(rt, d, Some(buf.view()), foreign_producer).is_err());
}

#[test]
fn views_reshapes_and_slices_share_storage() {
    let rt = Runtime::from_env().unwrap();
    let values: Vec<f64> = (0..24).map(|v| v as f64 + 1.0).collect();
    let t = DeviceTensor::from_values(&rt, DType::F32, vec![2, 3, 4], &values).unwrap();
    assert_eq!(t.to_values().unwrap(), values);

    let r = t.reshape(vec![6, 4]).unwrap();
    assert_eq!(r.desc().shape(), [6, 4]);
    assert!(r.binding().unwrap().same_region(&t.binding().unwrap()));
    assert!(t.reshape(vec![5, 5]).is_err());

    // Middle-axis slice: strided, starts one row of 4 in.
    let s = t.slice(1, 1..3).unwrap();
    assert_eq!(s.desc().shape(), [2, 2, 4]);
    assert!(!s.desc().is_contiguous());
    assert_eq!(s.binding().unwrap().offset(), 16);
    let expect: Vec<f64> = (0..2)
        .flat_map(|a| {
            (1..3).flat_map(move |b| (0..4).map(move |c| (a * 12 + b * 4 + c) as f64 + 1.0))
        })
        .collect();
    assert_eq!(s.to_values().unwrap(), expect);
    assert!(
        s.reshape(vec![16])
            .unwrap_err()
            .to_string()
            .contains("not contiguous")
    );
    // Last-axis slice of the slice: unaligned start (byte 20).
    let ss = s.slice(2, 1..2).unwrap();
    assert_eq!(ss.binding().unwrap().offset(), 20);
    let (storage, offset) = ss.storage().unwrap();
    assert_eq!((storage.offset(), offset), (0, 20));
    assert_eq!(ss.to_values().unwrap(), [6.0, 10.0, 18.0, 22.0]);
    assert!(t.slice(3, 0..1).is_err());
    assert!(t.slice(1, 2..4).is_err());
    let empty = t.slice(0, 1..1).unwrap();
    assert!(empty.binding().is_none() && empty.desc().is_empty());

    // Byte views: a row of the tensor, checked extent and alignment.
    let row = t.view(16, desc(DType::F32, &[4])).unwrap();
    assert_eq!(row.to_values().unwrap(), [5.0, 6.0, 7.0, 8.0]);
    let halves = t.view(2, desc(DType::F16, &[2])).unwrap();
    assert_eq!(halves.binding().unwrap().offset(), 2);
    assert!(t.view(2, desc(DType::F32, &[1])).is_err());
    assert!(t.view(92, desc(DType::F32, &[2])).is_err());
    assert!(t.view(usize::MAX, desc(DType::F32, &[2])).is_err());
}

#[test]
fn producer_and_lease_travel_with_views() {
    let rt = Runtime::from_env().unwrap();
    let mut t = DeviceTensor::allocate(&rt, desc(DType::F32, &[4, 4]), MemoryPlacement::GpuLocal)
        .unwrap()
        .view(
            0,
            desc(DType::F32, &[4, 4]).with_layout(Layout::Rows).unwrap(),
        )
        .unwrap();
    let token: Arc<dyn std::any::Any + Send + Sync> = Arc::new(7u32);
    t.set_lease(Some(token.clone()));
    let failed = Completion::failed(hrx_tensor::Error::msg("boom"));
    t.set_producer(failed);
    let s = t.slice(0, 1..2).unwrap();
    assert_eq!(s.desc().layout(), Layout::Rows);
    assert!(Arc::ptr_eq(s.lease().unwrap(), &token));
    assert!(s.completion().wait().is_err());
    assert!(
        s.download().is_err(),
        "a failed producer fails the readback"
    );
    t.set_lease(None);
    assert!(t.lease().is_none());
}

#[test]
fn odd_length_half_tensors_own_whole_words() {
    let rt = Runtime::from_env().unwrap();
    for (dtype, shape) in [
        (DType::F16, vec![3]),
        (DType::BF16, vec![5, 1]),
        (DType::U8, vec![7]),
    ] {
        let d = desc(dtype, &shape);
        let t = DeviceTensor::allocate(&rt, d.clone(), MemoryPlacement::GpuLocal).unwrap();
        let (storage, offset) = t.storage().unwrap();
        assert_eq!(offset, 0);
        assert_eq!(storage.len(), d.bytes().next_multiple_of(4), "{d}");
        assert_eq!(t.binding().unwrap().len(), d.bytes(), "{d}");
        // Word-wise work on the whole storage (what kernels and fills do)
        // must be legal: it fails validation when the last word is cut.
        let mut graph = rt.graph();
        graph.fill(storage.clone(), 0x3c00_3c00).unwrap();
        graph.prepare().unwrap().submit().unwrap().wait().unwrap();
        let bytes = t.download().unwrap();
        assert_eq!(bytes.len(), d.bytes());
        assert!(bytes.chunks(2).all(|h| h.len() < 2 || h == [0x00, 0x3c]));
    }
    let values = [1.0, -2.0, 0.5];
    let t = DeviceTensor::from_values(&rt, DType::F16, vec![3], &values).unwrap();
    assert_eq!(t.storage().unwrap().0.len(), 8);
    assert_eq!(t.to_values().unwrap(), values);
}
