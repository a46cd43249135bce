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

mod activation;
mod argmax_kernel;
mod attention;
mod attention_kernels;
mod biased_softmax;
mod biased_softmax_kernel;
mod cast;
mod cast_kernel;
mod copy_kernels;
mod elementwise;
mod elementwise_kernels;
mod embedding_norm;
mod encoder_attention;
mod encoder_attention_coop;
mod encoder_attention_kernel;
mod gather;
mod indexing;
mod matmul;
mod matmul_abi;
mod matmul_coop;
mod matmul_dot;
mod matmul_gemv;
mod matmul_quads;
mod matmul_splitk;
mod matmul_tiled;
mod movement;
mod norm_rows_kernel;
mod operand;
mod quant;
mod quant_fused;
mod quant_kernels;
mod quant_kv;
mod quant_logits;
mod quant_logits_kernel;
mod quant_resident;
mod quant_spans;
mod quant_tiled;
mod reduce;
mod reduce_kernel;
mod registry;
mod rope;
mod rotation;
mod rows;
mod rows_kernels;
mod split_count;
mod swiglu;
mod token_kernels;
mod top_k;
mod top_k_kernel;
mod tuning;

pub use attention::AttentionOutput;
pub use elementwise::{BinaryOp, UnaryOp};
pub use embedding_norm::EmbeddingNorm;
pub use encoder_attention::ENCODER_ATTENTION_MAX_HEAD;
#[cfg(feature = "kernel-sources")]
pub use encoder_attention_coop::encoder_attention_coop_source;
pub use indexing::broadcast_shapes;
pub use matmul::MatmulOptions;
#[cfg(feature = "kernel-sources")]
pub use matmul::decode_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul_coop::coop_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul_dot::dot_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul_quads::quads_matmul_source;
#[cfg(feature = "kernel-sources")]
pub use matmul_splitk::{SplitKOperands, coop_splitk_source};
pub use quant::{QUANT_GATED_MAX_ROWS, QuantFormat, QuantMatrix};
pub use quant_fused::{KvStore, QuantFusion, RowNorm};
pub use quant_logits::QUANT_LOGITS_MAX_PICKS;
pub use reduce::Reduction;
pub use rope::Rotary;
pub use top_k::TOP_K_MAX;
pub use tuning::{CoopTiling, QuantTiling, SplitKShape, Tuning};

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
