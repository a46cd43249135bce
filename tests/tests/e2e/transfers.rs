//! Upload, concatenate, copy_into and download round trips through the
//! facade, with the import paths a user's crate writes (`hrx::...`).

use hrx::{
    Completion, Error, Result, Runtime,
    execution::{Buffer, BufferView, ExecutableGraph, MemoryPlacement, RuntimeOptions},
    inference::ModelContext,
    loom::Compiler,
    tensor::{DType, DeviceTensor, TensorDesc},
};
use hrx_tests::{f32_bytes, f32_values, values};

fn desc(shape: &[usize]) -> Result<TensorDesc> {
    TensorDesc::new(DType::F32, shape.to_vec())
}

#[test]
fn the_facade_names_every_layer() {
    let runtime: Runtime = Runtime::with_options(RuntimeOptions::from_env().unwrap()).unwrap();
    let ready: Completion = Completion::ready();
    assert!(ready.validate_runtime(&runtime).is_ok());
    let cell = std::sync::Mutex::new(None);
    assert_eq!(hrx::cached_init(&cell, || Ok(3)).unwrap(), 3);
    let busy: Error = Error::Busy("full".into());
    assert!(busy.is_busy());
    // Types a user names in signatures.
    fn _signatures(
        _: &Buffer,
        _: &BufferView,
        _: &ExecutableGraph,
        _: &Compiler,
        _: &DeviceTensor,
    ) {
    }
    let _: MemoryPlacement = MemoryPlacement::HostVisible;
}

#[test]
fn upload_download_round_trip() -> Result<()> {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap())?;
    let x = values(7, 1000);
    let tensor = context.upload(desc(&[10, 100])?, &f32_bytes(&x))?;
    assert_eq!(f32_values(&context.download(&tensor)?.wait()?), x);
    Ok(())
}

#[test]
fn concatenate_and_copy_into_round_trip() -> Result<()> {
    let context = ModelContext::new(RuntimeOptions::from_env().unwrap())?;
    let (a, b) = (values(1, 6), values(2, 9));
    let ta = context.upload(desc(&[2, 3])?, &f32_bytes(&a))?;
    let empty = context.allocate(desc(&[0, 3])?)?;
    let tb = context.upload(desc(&[3, 3])?, &f32_bytes(&b))?;
    let joined = context.concatenate(&[ta, empty, tb.clone()])?;
    assert_eq!(joined.desc().shape(), [5, 3]);
    let expected: Vec<f32> = a.iter().chain(&b).copied().collect();
    assert_eq!(f32_values(&context.download(&joined)?.wait()?), expected);

    let mut target = context.allocate(desc(&[4, 3])?)?;
    context.copy_into(&mut target, 12, &tb)?;
    let mut expected = vec![0.0; 3];
    expected.extend(&b);
    assert_eq!(f32_values(&context.download(&target)?.wait()?), expected);
    Ok(())
}
