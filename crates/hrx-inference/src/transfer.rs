//! Per-slot host staging: created on first use, reused by every request.

use crate::ModelContext;
use hrx_core::Result;
use hrx_runtime::{BufferView, Completion, ExecutableGraph, Graph, MemoryPlacement, Runtime};
use hrx_tensor::DeviceTensor;

/// Which way a [`Transfer`] moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Host staging to the slot's input tensors.
    Upload,
    /// The slot's output tensors to host staging.
    Download,
}

/// Host-visible storage for each of a slot's IO tensors, and the prepared
/// graph that copies between it and the tensors. Tensors that are already
/// host-visible are used directly (no staging, no copy); empty tensors have
/// no storage at all.
pub(crate) struct Transfer {
    /// One entry per tensor: where the host reads or writes its bytes.
    pub(crate) buffers: Vec<Option<BufferView>>,
    /// The copies, or `None` when every tensor is host-visible or empty.
    graph: Option<ExecutableGraph>,
    /// The same copies as `(destination, source)` pairs, to record them
    /// again in front of another graph.
    copies: Vec<(BufferView, BufferView)>,
}

impl Transfer {
    /// Allocate staging for `tensors` and record the copies, once.
    pub(crate) fn prepare(
        context: &ModelContext,
        tensors: &[DeviceTensor],
        direction: Direction,
    ) -> Result<Self> {
        let runtime = context.runtime();
        let mut copies = Vec::new();
        let mut buffers = Vec::with_capacity(tensors.len());
        for tensor in tensors {
            let Some(device) = tensor.binding() else {
                buffers.push(None);
                continue;
            };
            if device.is_host_visible() {
                buffers.push(Some(device));
                continue;
            }
            let host = runtime
                .allocate(device.len(), MemoryPlacement::HostVisible)?
                .view();
            copies.push(match direction {
                Direction::Upload => (device, host.clone()),
                Direction::Download => (host.clone(), device),
            });
            buffers.push(Some(host));
        }
        // Uploads are recorded in front of the slot's graph instead
        // (`Slot::upload_then_run`); downloads run on their own.
        let graph = match (direction, copy_graph(runtime, &copies)?) {
            (Direction::Download, Some(graph)) => Some(graph.prepare()?),
            _ => None,
        };
        Ok(Transfer {
            buffers,
            graph,
            copies,
        })
    }

    /// The copies recorded into a new graph, or `None` when there are none.
    pub(crate) fn copy_graph(&self, runtime: &Runtime) -> Result<Option<Graph>> {
        copy_graph(runtime, &self.copies)
    }

    /// Queue the copies after `dependencies`; `None` when there is nothing
    /// to copy (the host works on the tensors' own storage).
    pub(crate) fn submit_after(&self, dependencies: &[Completion]) -> Result<Option<Completion>> {
        self.graph
            .as_ref()
            .map(|graph| graph.submit_after(dependencies))
            .transpose()
    }

    /// `Ok` unless a native failure disabled the copy graph.
    pub(crate) fn usable(&self) -> Result<()> {
        self.graph.as_ref().map_or(Ok(()), ExecutableGraph::usable)
    }
}

fn copy_graph(runtime: &Runtime, copies: &[(BufferView, BufferView)]) -> Result<Option<Graph>> {
    if copies.is_empty() {
        return Ok(None);
    }
    let mut graph = runtime.graph();
    for (destination, source) in copies {
        graph.copy(destination.clone(), source.clone())?;
    }
    Ok(Some(graph))
}
