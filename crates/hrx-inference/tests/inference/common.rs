//! Shared helpers for the inference tests: contexts, small WGSL models
//! compiled with naga at test time, and byte conversions.

#![allow(dead_code)]

pub use hrx_test_support::wgsl::spirv;

use hrx_core::Result;
use hrx_inference::{InferenceGraph, ModelContext, PreparedModel};
use hrx_runtime::{
    Access, BindingContract, Completion, GpuKernel, KernelContract, MemoryPlacement, RuntimeOptions,
};
use hrx_tensor::{DType, DeviceTensor, TensorDesc};

/// A context on the default device (lavapipe in CI).
pub fn context() -> ModelContext {
    ModelContext::new(RuntimeOptions::from_env().unwrap()).expect("context")
}

/// A context whose runtime accepts injected faults.
pub fn faulty_context() -> ModelContext {
    ModelContext::new(RuntimeOptions::from_env().unwrap().with_fault_injection()).expect("context")
}

/// A `[n]` tensor descriptor of u32.
pub fn words_desc(n: usize) -> TensorDesc {
    TensorDesc::new(DType::U32, vec![n]).expect("desc")
}

/// Little-endian bytes of `words`.
pub fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Words of little-endian `bytes`.
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn kernel(context: &ModelContext, wgsl: &str, access: &[Access]) -> GpuKernel {
    let contract = KernelContract {
        entry_point: "main".into(),
        bindings: access
            .iter()
            .map(|&access| BindingContract {
                min_bytes: 4,
                alignment: 4,
                access,
            })
            .collect(),
        push_constant_bytes: 4,
        workgroup_size: [64, 1, 1],
    };
    GpuKernel::new(context.runtime(), &spirv(wgsl), contract).expect("kernel")
}

const AFFINE: &str = r"
struct Params { n: u32 }
var<immediate> params: Params;
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < params.n) {
        y[i] = x[i] * 3u + w[i];
    }
}
";

const ACCUMULATE: &str = r"
struct Params { n: u32 }
var<immediate> params: Params;
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < params.n) {
        y[i] = y[i] + x[i];
    }
}
";

/// The weights the affine model shares between slots.
pub fn weights(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| i.wrapping_mul(7) ^ 0x55).collect()
}

/// CPU reference of the affine model: `y = 3 x + w`.
pub fn affine_reference(x: &[u32]) -> Vec<u32> {
    x.iter()
        .zip(weights(x.len()))
        .map(|(&x, w)| x.wrapping_mul(3).wrapping_add(w))
        .collect()
}

fn groups(n: usize) -> [u32; 3] {
    [n.div_ceil(64) as u32, 1, 1]
}

/// A slot builder of the affine model `y = 3 x + w` over `n` words, with
/// one weight tensor uploaded once and shared by every slot.
pub fn affine_builder(
    context: &ModelContext,
    n: usize,
    placement: MemoryPlacement,
) -> impl FnMut(&ModelContext) -> Result<InferenceGraph> + use<> {
    let kernel = kernel(
        context,
        AFFINE,
        &[Access::Read, Access::Read, Access::Write],
    );
    let weights = context
        .upload(words_desc(n), &bytes(&weights(n)))
        .expect("weights");
    move |context: &ModelContext| {
        let x = context.allocate_with(words_desc(n), placement)?;
        let y = context.allocate_with(words_desc(n), placement)?;
        let mut graph = context.runtime().graph();
        let views = [binding(&x)?, binding(&weights)?, binding(&y)?];
        graph.dispatch(&kernel, &views, &(n as u32).to_le_bytes(), groups(n))?;
        Ok(InferenceGraph {
            inputs: vec![x],
            outputs: vec![y],
            graph: graph.prepare()?,
        })
    }
}

/// The affine model with `capacity` slots.
pub fn affine_model(
    context: &ModelContext,
    capacity: usize,
    n: usize,
    placement: MemoryPlacement,
) -> PreparedModel {
    PreparedModel::prepare(context, capacity, affine_builder(context, n, placement))
        .expect("prepare")
}

/// A model whose output accumulates its input (`y += x`) on every
/// execution, so an execution that should not have happened is visible.
pub fn accumulate_model(context: &ModelContext, capacity: usize, n: usize) -> PreparedModel {
    let kernel = kernel(context, ACCUMULATE, &[Access::Read, Access::ReadWrite]);
    PreparedModel::prepare(context, capacity, move |context: &ModelContext| {
        let x = context.allocate_with(words_desc(n), MemoryPlacement::HostVisible)?;
        let y = context.allocate_with(words_desc(n), MemoryPlacement::HostVisible)?;
        let mut graph = context.runtime().graph();
        graph.dispatch(
            &kernel,
            &[binding(&x)?, binding(&y)?],
            &(n as u32).to_le_bytes(),
            groups(n),
        )?;
        Ok(InferenceGraph {
            inputs: vec![x],
            outputs: vec![y],
            graph: graph.prepare()?,
        })
    })
    .expect("prepare")
}

/// The storage of a non-empty tensor.
pub fn binding(tensor: &DeviceTensor) -> Result<hrx_runtime::BufferView> {
    tensor
        .binding()
        .ok_or_else(|| hrx_core::Error::msg("empty tensor has no storage"))
}

/// A `[n]` u32 tensor holding `words`, produced only after `after`: a
/// device input whose producer is still pending (or failed).
pub fn produced_after(context: &ModelContext, words: &[u32], after: &Completion) -> DeviceTensor {
    produce(context, words, after, false)
}

/// A `[n]` u32 tensor whose producer fails natively (injected fault).
pub fn failed_tensor(context: &ModelContext, words: &[u32]) -> DeviceTensor {
    produce(context, words, &Completion::ready(), true)
}

fn produce(context: &ModelContext, words: &[u32], after: &Completion, fail: bool) -> DeviceTensor {
    // Host-visible storage only: device-local memory on a discrete GPU is
    // zeroed by a fill queued behind whatever is pending (a closed gate,
    // say), so the tensor would also wait for that.
    let desc = words_desc(words.len());
    let staged = context
        .allocate_with(desc.clone(), MemoryPlacement::HostVisible)
        .expect("allocate");
    binding(&staged)
        .unwrap()
        .map_write()
        .expect("map")
        .copy_from_slice(&bytes(words));
    let target = context
        .allocate_with(desc, MemoryPlacement::HostVisible)
        .expect("allocate");
    let mut graph = context.runtime().graph();
    graph
        .copy(binding(&target).unwrap(), binding(&staged).unwrap())
        .expect("copy");
    let graph = graph.prepare().expect("prepare");
    if fail {
        context
            .runtime()
            .inject_fault(hrx_runtime::Fault::FailNextExecution)
            .expect("fault");
    }
    let done = graph
        .submit_after(&[after.clone(), staged.completion().clone()])
        .expect("submit");
    context
        .tensor(words_desc(words.len()), binding(&target).unwrap(), done)
        .expect("tensor")
}

/// Download a tensor and return its words (waits).
pub fn read(context: &ModelContext, tensor: &DeviceTensor) -> Result<Vec<u32>> {
    Ok(words(&context.download(tensor)?.wait()?))
}
