//! Per-slot graph building and weights shared by every slot.

use crate::{InferenceGraph, ModelContext};
use hrx_core::{Error, Result};
use hrx_runtime::{Completion, Graph};
use hrx_tensor::{DType, DeviceTensor, Ops, TensorDesc};
use std::collections::BTreeMap;

/// Builds one slot of a model: allocates the slot's private inputs,
/// outputs and scratch, and collects the tensor operators recorded into
/// the slot's graph; [`finish`](Self::finish) prepares that graph.
///
/// Inputs and outputs are the slot's fixed-address IO, in the order they
/// were allocated. Every allocation is private to this slot; shared,
/// read-only tensors (weights) come from [`SharedWeights`].
pub struct SlotBuilder<'a> {
    context: &'a ModelContext,
    ops: &'a Ops,
    graph: Graph,
    inputs: Vec<DeviceTensor>,
    outputs: Vec<DeviceTensor>,
}

impl<'a> SlotBuilder<'a> {
    /// A builder recording into a new graph of `context`'s runtime with
    /// operators from `ops` (which must belong to the same runtime; the
    /// operators check it).
    pub fn new(context: &'a ModelContext, ops: &'a Ops) -> SlotBuilder<'a> {
        SlotBuilder {
            context,
            ops,
            graph: context.runtime().graph(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    /// A private input at a fixed address, the next of the slot's inputs.
    pub fn input(&mut self, desc: TensorDesc) -> Result<DeviceTensor> {
        let tensor = self.context.allocate(desc)?;
        self.inputs.push(tensor.clone());
        Ok(tensor)
    }

    /// A private output at a fixed address, the next of the slot's outputs.
    pub fn output(&mut self, desc: TensorDesc) -> Result<DeviceTensor> {
        let tensor = self.context.allocate(desc)?;
        self.outputs.push(tensor.clone());
        Ok(tensor)
    }

    /// A private intermediate tensor (device-local, zeroed).
    pub fn scratch(&mut self, desc: TensorDesc) -> Result<DeviceTensor> {
        self.context.allocate(desc)
    }

    /// A private f32 intermediate of `shape`.
    pub fn scratch_f32(&mut self, shape: &[usize]) -> Result<DeviceTensor> {
        self.scratch(TensorDesc::new(DType::F32, shape.to_vec())?)
    }

    /// The operator library to record with. The reference outlives this
    /// borrow of the builder, so `ops().record_*(builder.graph(), ..)`
    /// works.
    pub fn ops(&self) -> &'a Ops {
        self.ops
    }

    /// The context the slot allocates from.
    pub fn context(&self) -> &'a ModelContext {
        self.context
    }

    /// The slot's graph: record operators here.
    pub fn graph(&mut self) -> &mut Graph {
        &mut self.graph
    }

    /// Prepare the graph and hand the slot over for
    /// [`PreparedModel::prepare`](crate::PreparedModel::prepare).
    pub fn finish(self) -> Result<InferenceGraph> {
        Ok(InferenceGraph {
            inputs: self.inputs,
            outputs: self.outputs,
            graph: self.graph.prepare()?,
        })
    }
}

/// Immutable weights uploaded once to the device and shared by every slot
/// (and every prepared model) built from them. Upload waits until the
/// weights are resident, so graphs that read them need no dependency on
/// the upload.
#[derive(Clone, Debug)]
pub struct SharedWeights {
    tensors: BTreeMap<String, DeviceTensor>,
    bytes: usize,
}

impl SharedWeights {
    /// Upload every `(name, descriptor, little-endian bytes)` as
    /// device-local storage and wait for the copies. Any dtype the
    /// descriptor names is accepted; a byte count that differs from the
    /// descriptor's or a repeated name is an error naming the tensor.
    pub fn upload<'w>(
        context: &ModelContext,
        tensors: impl IntoIterator<Item = (&'w str, TensorDesc, &'w [u8])>,
    ) -> Result<SharedWeights> {
        let mut uploaded: BTreeMap<String, DeviceTensor> = BTreeMap::new();
        let mut bytes = 0usize;
        for (name, desc, data) in tensors {
            if data.len() != desc.bytes() {
                return Err(Error::Message(format!(
                    "shared weight {name:?}: {} bytes given for {desc} ({} bytes)",
                    data.len(),
                    desc.bytes()
                )));
            }
            if uploaded.contains_key(name) {
                return Err(Error::Message(format!(
                    "shared weight {name:?} is given twice"
                )));
            }
            bytes = bytes
                .checked_add(desc.bytes())
                .ok_or_else(|| Error::Message("weights exceed the address space".into()))?;
            uploaded.insert(name.to_owned(), context.upload(desc, data)?);
        }
        for tensor in uploaded.values_mut() {
            tensor.completion().wait()?;
            // Holding the finished upload's completion forever would keep
            // the runtime from recycling its state, and replays would then
            // allocate new ones.
            tensor.set_producer(Completion::ready());
        }
        Ok(SharedWeights {
            tensors: uploaded,
            bytes,
        })
    }

    /// Upload f32 host tensors `(name, shape, values)`, as
    /// [`upload`](Self::upload) does.
    pub fn upload_f32<'w>(
        context: &ModelContext,
        tensors: impl IntoIterator<Item = (&'w str, &'w [usize], &'w [f32])>,
    ) -> Result<SharedWeights> {
        let encoded = tensors
            .into_iter()
            .map(|(name, shape, values)| {
                let desc = TensorDesc::new(DType::F32, shape.to_vec())?;
                Ok((
                    name,
                    desc,
                    values
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect::<Vec<u8>>(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        SharedWeights::upload(
            context,
            encoded
                .iter()
                .map(|(name, desc, bytes)| (*name, desc.clone(), bytes.as_slice())),
        )
    }

    /// The device tensor `name`, or an error naming it.
    pub fn get(&self, name: &str) -> Result<&DeviceTensor> {
        self.tensors
            .get(name)
            .ok_or_else(|| Error::Message(format!("shared weight {name:?} is missing")))
    }

    /// Device bytes held, counted once however many slots read them.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The tensor names, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }
}
