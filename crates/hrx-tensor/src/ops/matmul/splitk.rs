//! Split-k decode matmul on cooperative matrices for few rows (up to 64):
//! many workgroups stream disjoint pieces of B (column slab x k range)
//! into f32 partial sums, and the last workgroup of each column slab sums
//! them with bias and activation, in one dispatch. The kernel is built in
//! `splitk/source.rs`.

mod finish;
mod loads;
mod plan;
mod source;
mod tiles;

pub(crate) use plan::splitk_plan;

#[cfg(feature = "kernel-sources")]
use super::gemv::BLayout;
use crate::ops::{Ops, operand::Operand};
use crate::{DType, TensorDesc};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

/// Columns per workgroup: one 16-column fragment for each of the four
/// subgroups of a row group.
const BN: usize = 64;
/// Column fragments per workgroup (one per subgroup of a row group).
const COL_FRAGS: usize = BN / 16;

/// How a workgroup reads one operand's tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileLoad {
    /// 16-byte loads of 8 consecutive f16 along the tile's inner axis.
    Quad,
    /// B only, contiguous along k (a transposed B, as linear layers store
    /// weights): its tile is staged n-major, `BN x BK`, with 16-byte loads
    /// along k, and its fragments are loaded column-major from there.
    QuadAlongK,
    /// One f16 per load; `inner_fast` when consecutive work items should
    /// take consecutive elements of the tile's inner axis (the operand is
    /// contiguous along it).
    Scalar { inner_fast: bool },
}

/// The split-k plan for one matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitK {
    /// Rows of A rounded up to whole 16-row fragments.
    pub(crate) mp: usize,
    /// k ranges, each `ks` long (a multiple of the step), the last shorter.
    pub(crate) splits: usize,
    pub(crate) ks: usize,
    /// Columns of the scratch: n rounded up to whole workgroup slabs.
    pub(crate) npad: usize,
    /// Invocations per subgroup.
    sg: usize,
    groups: usize,
    bk: usize,
    prefetch: bool,
    a: TileLoad,
    b: TileLoad,
}

/// One matmul as [`Ops::record_splitk`] takes it: operands bound, element
/// strides as the kernels take them.
pub(crate) struct SplitKCall<'a> {
    pub(crate) operation: &'a str,
    pub(crate) plan: SplitK,
    /// m, n, k and the merged batch.
    pub(crate) dims: (usize, usize, usize, usize),
    /// A and its batch, row and k strides.
    pub(crate) a: (Operand, [usize; 3]),
    /// B and its batch, k and column strides.
    pub(crate) b: (Operand, [usize; 3]),
    /// The bias (or zeros) and its stride.
    pub(crate) bias: (Operand, usize),
    /// The output and its batch stride.
    pub(crate) out: (Operand, usize),
    /// Applied after the bias.
    pub(crate) activation: Option<crate::ops::UnaryOp>,
}

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

impl Ops {
    /// Record the split-k kernel: partial sums into a scratch (the graph's
    /// scratch storage, shared with its other split-k matmuls, which
    /// therefore run one after another), finished into the output by the
    /// last workgroup of each column slab, counted on per-slab counters in
    /// the graph's zeroed scratch (which every run leaves at zero).
    pub(crate) fn record_splitk(&self, graph: &mut Graph, call: SplitKCall<'_>) -> Result<()> {
        let SplitKCall {
            operation,
            plan,
            dims: (m, n, k, batch),
            a: (ka, [sab, sam, sak]),
            b: (kb, [sbb, sbk, sbn]),
            bias,
            out,
            activation,
        } = call;
        let target = self.registry.target()?;
        let partials =
            TensorDesc::new(DType::F32, vec![batch * plan.splits * plan.mp * plan.npad])?;
        // Each slab's counter is back at zero when the kernel completes,
        // so all split-k matmuls of the graph share one zeroed storage.
        let slabs = batch * plan.npad / BN;
        let counter_bytes = 4 * slabs;
        fits_storage_range(&target, operation, partials.bytes())?;
        let kernel = self.registry.kernel(plan.key(activation))?;
        let ((kbias, bias_stride), (kc, out_batch_stride)) = (bias, out);
        // The scratch is bound whole from its storage's first byte (as
        // `Graph::scratch` hands it out): offset 0, every element.
        let scalars: Vec<ScalarValue> = [m, n, k, plan.ks, sab, sam, sak]
            .map(index)
            .into_iter()
            .chain(ka.scalars())
            .chain([sbb, sbk, sbn].map(index))
            .chain(kb.scalars())
            .chain([plan.splits, plan.npad].map(index))
            .chain([index(partials.elements())])
            .chain([index(bias_stride)])
            .chain(kbias.scalars())
            .chain([index(out_batch_stride)])
            .chain(kc.scalars())
            .chain([index(slabs)])
            .collect();
        let launch = kernel.launch(
            operation,
            &scalars,
            &[n as u64, plan.splits as u64, batch as u64],
        )?;
        // Scratch is taken from the caller's graph only now, so that none
        // of the failures above leaves it holding storage for a dispatch
        // that never comes.
        let storage = graph.scratch(partials.bytes())?;
        let counters = graph.zeroed_scratch(counter_bytes)?;
        launch.record(
            graph,
            &[ka.view, kb.view, storage, kbias.view, kc.view, counters],
        )
    }
}

/// Fail unless the partial sums' `bytes` can be bound as one storage
/// range on `target`: the scratch is the one binding the caller did not
/// size, so a plan too large for the device is reported as such before
/// the graph's scratch is taken.
fn fits_storage_range(target: &Target, operation: &str, bytes: usize) -> Result<()> {
    if bytes as u64 > target.max_storage_buffer_range {
        return Err(Error::Unsupported(format!(
            "{operation}: the split-k partial sums take {bytes} bytes, beyond the device's storage range of {}",
            target.max_storage_buffer_range
        )));
    }
    Ok(())
}

/// How the operands of [`coop_splitk_source`]'s kernel are laid out.
#[cfg(feature = "kernel-sources")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitKOperands {
    /// A and B row-major and aligned: 16-byte loads of both.
    Wide,
    /// B transposed (contiguous along k, as linear layers store weights):
    /// 16-byte loads of both, B's tile staged n-major.
    TransposedB,
    /// A of odd length along k, B with no contiguous axis: element loads.
    Elements,
}

/// The split-k kernel's loom source for `target`, `m` rows, operands laid
/// out as `operands` and `activation` (for offline compilation and SPIR-V
/// checks); `None` where the kernel does not apply.
#[cfg(feature = "kernel-sources")]
pub fn coop_splitk_source(
    target: &Target,
    m: usize,
    operands: SplitKOperands,
    activation: Option<crate::ops::UnaryOp>,
) -> Option<String> {
    let layout = |k_stride: usize, n_stride: usize, n: usize| BLayout {
        k_stride,
        n_stride,
        batch_stride: 0,
        offset: 0,
        binding_offset: 0,
        n,
    };
    let (a, b) = match operands {
        SplitKOperands::Wide => (layout(4096, 1, 4096), layout(4096, 1, 4096)),
        SplitKOperands::TransposedB => (layout(4096, 1, 4096), layout(1, 4096, 4096)),
        SplitKOperands::Elements => (layout(4096, 1, 4095), layout(4096, 4096, 4096)),
    };
    let coop = super::coop::coop_tiles(target, m.max(1)).is_some();
    let plan = splitk_plan(target, None, coop, (m, 4096, 4096, 1), &a, &b)?;
    Some(plan.key(activation).source())
}
