//! The operator library: loom kernels compiled for the device at first use,
//! recorded into a caller's [`Graph`] or run eagerly.
//!
//! Every operator has two forms:
//! - `record_*(graph, inputs.., out)` checks everything, then records the
//!   work into `graph` writing the caller's `out` tensor (so a model is one
//!   prepared graph with fixed-address outputs). The caller submits the graph
//!   after the inputs' producers and sets the outputs' producer;
//! - the eager form allocates the output, records, prepares and submits
//!   after the inputs' producers, and returns the output with its producer.
//!
//! An error names the operator and the shapes, and leaves the graph as it
//! was (nothing is recorded before every check has passed).
//!
//! One folder per family of operators, each holding the operators (its
//! `mod.rs` and siblings) and the kernels they build (`*kernel*.rs`):
//!
//! - `elementwise`: binary and unary operators, their activation
//!   fragments, and casts;
//! - `movement`: strided copies, views made contiguous, row gathers;
//! - `reduce`: reductions over an axis, argmax and top-k;
//! - `rows`: softmax, layer and RMS norms (with fused residual adds),
//!   the biased softmax and the encoder's embedding norm;
//! - `matmul`: the float matrix products (matrix-vector, row-dot, tiled,
//!   quad, cooperative-matrix and split-k kernels);
//! - `quant`: quantised weight matrices and their products, with the
//!   fused norm, residual, gate, cache store and output head;
//! - `attention`: the decoder's cached attention and the encoder's
//!   bidirectional attention;
//! - `token`: a decoder's per-token rows: RoPE, the cache store, SwiGLU.
//!
//! Beside them, what every family uses: `operand` (binding tensors to
//! kernels), `registry` (the per-domain kernel cache), `tuning`,
//! `indexing` (shape arithmetic), `split_count` and `rotation`.

mod attention;
mod elementwise;
mod indexing;
mod matmul;
mod movement;
mod operand;
mod quant;
mod reduce;
mod registry;
mod rotation;
mod rows;
mod split_count;
mod token;
mod tuning;

pub use attention::AttentionOutput;
pub use attention::encoder::ENCODER_ATTENTION_MAX_HEAD;
#[cfg(feature = "kernel-sources")]
pub use attention::encoder_coop::encoder_attention_coop_source;
pub use elementwise::{BinaryOp, UnaryOp};
pub use indexing::broadcast_shapes;
pub use matmul::MatmulOptions;
#[cfg(feature = "kernel-sources")]
pub use matmul::coop::coop_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul::decode_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul::dot::dot_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul::quads::quads_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul::splitk::{SplitKOperands, coop_splitk_source};
pub use quant::fused::{KvStore, QuantFusion, RowNorm};
pub use quant::logits::QUANT_LOGITS_MAX_PICKS;
pub use quant::{QUANT_GATED_MAX_ROWS, QuantFormat, QuantMatrix};
pub use reduce::Reduction;
pub use reduce::top_k::TOP_K_MAX;
pub use rows::embedding_norm::EmbeddingNorm;
pub use token::rope::Rotary;
pub use tuning::{CoopTiling, EncoderBlock, QuantTiling, SplitKShape, Tuning};

use crate::{DeviceTensor, TensorDesc};
use hrx_core::Result;
use hrx_runtime::{Graph, MemoryPlacement, Runtime};
use registry::Registry;
use std::sync::Arc;

/// The operator library of one runtime domain: a loom compiler for the
/// device's target and the kernels built so far. Cheap to clone; clones
/// share the cache. Creating one touches no hardware.
#[derive(Clone)]
pub struct Ops {
    registry: Arc<Registry>,
    tuning: Tuning,
}

impl std::fmt::Debug for Ops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("runtime", self.registry.runtime())
            .finish_non_exhaustive()
    }
}

impl Ops {
    /// The library for `runtime`'s domain. Kernels compile on first use.
    pub fn new(runtime: &Runtime) -> Ops {
        Ops {
            registry: Arc::new(Registry::new(runtime.clone())),
            tuning: Tuning::default(),
        }
    }

    /// The library with `tuning`'s shapes forced on the matmul kernels
    /// (for tuning runs; see [`Tuning`]). It shares the kernel cache of
    /// `self`.
    pub fn with_tuning(self, tuning: Tuning) -> Ops {
        Ops { tuning, ..self }
    }

    /// The tuning in force (the default: none).
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// The domain the library records work for.
    pub fn runtime(&self) -> &Runtime {
        self.registry.runtime()
    }

    /// How many kernels this library (with its clones) has compiled and
    /// built so far: each distinct kernel counts once, however many
    /// operators and models use it.
    pub fn compiled_kernels(&self) -> usize {
        self.registry.kernel_count()
    }

    /// Allocate a device-local output tensor (nothing when empty). The
    /// storage is rounded up to whole 4-byte words, so 2-byte tensors can
    /// be bound as words (bf16).
    pub fn output(&self, desc: TensorDesc) -> Result<DeviceTensor> {
        DeviceTensor::allocate(self.runtime(), desc, MemoryPlacement::GpuLocal)
    }

    /// Run `record` eagerly: allocate `desc`, record into a fresh graph,
    /// submit it after every input's producer and return the output, whose
    /// producer is that submission. Failures of inputs propagate to it.
    pub fn eager(
        &self,
        inputs: &[&DeviceTensor],
        desc: TensorDesc,
        record: impl FnOnce(&mut Graph, &DeviceTensor) -> Result<()>,
    ) -> Result<DeviceTensor> {
        let mut out = self.output(desc)?;
        let mut graph = self.runtime().graph();
        record(&mut graph, &out)?;
        let dependencies: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
        out.set_producer(graph.prepare()?.submit_after(&dependencies)?);
        Ok(out)
    }
}
