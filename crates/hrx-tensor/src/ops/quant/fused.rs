//! Work fused into a decode-sized quantised product, so that a decode
//! step spends no dispatch on it: the RMS norm of the product's input and
//! the residual add of its output.
//!
//! A decode step is bound by its count of dependent dispatches (each
//! costs a few microseconds however little it does), and a transformer
//! block's norms and residual adds sit between its products. The RMS
//! norm folds into the product that reads it: with `r = 1 / sqrt(mean_k
//! x_k^2 + eps)`, `sum_k w_jk (x_k g_k r) = r sum_k w_jk (x_k g_k)`, and
//! every subgroup already reads the whole row of x, so it sums the
//! squares in the same loop and scales its dot at the end; no pass over
//! x before the product. The residual is one load per output, issued
//! before the product's loop. A stacked query-key-value product can also
//! store its keys (turned by RoPE) and values into the caches, each
//! subgroup taking one RoPE pair of columns (`kv`).
//!
//! Only the matrix-vector kernel (up to `QUANT_GATED_MAX_ROWS` rows of x)
//! fuses; the tiled kernel's callers record the norm and the add as their
//! own operators.

use crate::ops::Rotary;
use crate::ops::attention::{cache_element, cache_shape, row_data};
use crate::ops::operand::{Operand, check_inputs, disjoint, operand, quad_offset};
use crate::ops::token::rope::rotation;
use crate::{DType, DeviceTensor};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_loom::ir::Scalar;
use hrx_runtime::{BufferView, Runtime};

/// RMS normalisation of each row of a product's input as the product
/// reads it: `x[i, k] * weight[k] / sqrt(mean_k x[i, k]^2 + eps)`.
#[derive(Clone, Copy, Debug)]
pub struct RowNorm<'a> {
    /// f32 `[cols]`, contiguous.
    pub weight: &'a DeviceTensor,
    /// Added to the mean square before its inverse square root.
    pub eps: f32,
}

/// What a decode-sized quantised product does besides the product
/// ([`Ops::record_quant_matmul_fused`](crate::ops::Ops::record_quant_matmul_fused)).
#[derive(Clone, Copy, Debug, Default)]
pub struct QuantFusion<'a> {
    /// Normalise each row of x first (the product of the normalised rows;
    /// x itself is not changed).
    pub norm: Option<RowNorm<'a>>,
    /// Add this f32 `[m, n]` (contiguous, not overlapping the output) to
    /// the product, after the gate of a gated product.
    pub residual: Option<&'a DeviceTensor>,
    /// Store the key and value columns of a stacked query-key-value
    /// product into caches, the keys turned by RoPE (not with a gate or a
    /// residual).
    pub kv_store: Option<KvStore<'a>>,
}

impl QuantFusion<'_> {
    /// Whether there is anything to fuse.
    pub fn is_empty(&self) -> bool {
        self.norm.is_none() && self.residual.is_none() && self.kv_store.is_none()
    }
}

/// The cache store of a stacked query-key-value product, whose `n`
/// output columns are `[queries (query_width) | keys | values]`, the keys
/// and values `kv_heads * head_dim` columns each (the caches' shape):
/// besides writing every column to the output as the plain product does,
/// the product does what [`Ops::record_rope_kv_store`] would do with the
/// output's key and value columns, bit for bit. `sequence`, `position`:
/// i32 `[m]`; caches: contiguous `[slots, kv_heads, capacity,
/// head_dim]` of one shape, both f32 or both f16 (each value rounded to
/// nearest), not overlapping each other or any other operand;
/// `query_width` and `head_dim` even.
///
/// [`Ops::record_rope_kv_store`]: crate::ops::Ops::record_rope_kv_store
#[derive(Clone, Copy, Debug)]
pub struct KvStore<'a> {
    /// Output columns before the keys.
    pub query_width: usize,
    /// Each row's cache slot; a row outside `0..slots` stores nothing.
    pub sequence: &'a DeviceTensor,
    /// Each row's position; a row outside `0..capacity` stores nothing.
    pub position: &'a DeviceTensor,
    /// The keys' rotation.
    pub rotary: Rotary,
    /// The key cache, written at `[sequence[i], head, position[i], :]`.
    pub k_cache: &'a DeviceTensor,
    /// The value cache, written like the key cache.
    pub v_cache: &'a DeviceTensor,
}

/// The fused operands bound: their launch scalars (after the product's)
/// and views (after x, the words and out), and whether the norm weight
/// may be read in quads.
pub(crate) struct FusedOperands {
    pub(crate) scalars: Vec<ScalarValue>,
    pub(crate) views: Vec<BufferView>,
    pub(crate) norm_quads: bool,
    /// The caches' element type, where the product stores into caches.
    pub(crate) cache: Option<Scalar>,
}

/// Check `fusion` against a product of `m` rows of `cols` into `n`
/// outputs written to `out`, and bind its operands.
#[allow(clippy::too_many_arguments)]
pub(crate) fn bind(
    runtime: &Runtime,
    target: &Target,
    operation: &str,
    fusion: &QuantFusion,
    (m, cols, n, gated): (usize, usize, usize, bool),
    [x, words, out]: [&Operand; 3],
) -> Result<FusedOperands> {
    if fusion.kv_store.is_some() && (gated || fusion.residual.is_some()) {
        return Err(Error::Unsupported(format!(
            "{operation}: a cache store fuses with neither a gate nor a residual"
        )));
    }
    let mut bound = FusedOperands {
        scalars: Vec::new(),
        views: Vec::new(),
        norm_quads: true,
        cache: None,
    };
    let contiguous_f32 = |t: &DeviceTensor, what: &str, shape: &[usize]| {
        let d = t.desc();
        if d.dtype() != DType::F32 || d.shape() != shape || !d.is_contiguous() {
            return Err(Error::Message(format!(
                "{operation}: the {what} must be a contiguous f32 {shape:?}, got {d}"
            )));
        }
        Ok(())
    };
    let mut operands = Vec::new();
    if let Some(norm) = fusion.norm {
        check_inputs(runtime, operation, &[norm.weight])?;
        contiguous_f32(norm.weight, "norm weight", &[cols])?;
        if !norm.eps.is_finite() || norm.eps < 0.0 {
            return Err(Error::Message(format!(
                "{operation}: the norm's eps {} is not a finite non-negative number",
                norm.eps
            )));
        }
        let weight = operand(norm.weight, target, operation)?;
        bound.norm_quads = quad_offset(&weight).is_some();
        bound.scalars.push(ScalarValue::F32(norm.eps));
        bound.scalars.extend(weight.scalars());
        operands.push(("the norm weight", weight));
    }
    if let Some(residual) = fusion.residual {
        check_inputs(runtime, operation, &[residual])?;
        contiguous_f32(residual, "residual", &[m, n])?;
        let residual = operand(residual, target, operation)?;
        bound.scalars.extend(residual.scalars());
        operands.push(("the residual", residual));
    }
    for (what, operand) in &operands {
        disjoint(operation, ("the output", out), (what, operand))?;
    }
    bound
        .views
        .extend(operands.into_iter().map(|(_, o)| o.view));
    if let Some(store) = fusion.kv_store {
        let read = [("the output", out), ("x", x), ("the weights", words)];
        bind_kv_store(
            runtime,
            target,
            operation,
            &store,
            (m, n),
            &read,
            &mut bound,
        )?;
    }
    Ok(bound)
}

/// Checks a cache store against the product and binds its operands after
/// the others; `read` are the product's operands the caches must not
/// overlap.
fn bind_kv_store(
    runtime: &Runtime,
    target: &Target,
    operation: &str,
    store: &KvStore,
    (m, n): (usize, usize),
    read: &[(&str, &Operand)],
    bound: &mut FusedOperands,
) -> Result<()> {
    let KvStore {
        query_width,
        sequence,
        position,
        rotary,
        k_cache,
        v_cache,
    } = *store;
    check_inputs(runtime, operation, &[sequence, position, k_cache, v_cache])?;
    let shape = k_cache.desc().shape();
    let &[_, kvh, _, hd] = shape else {
        return Err(Error::Message(format!(
            "{operation}: k_cache {} must be [slots, kv_heads, capacity, head_dim]",
            k_cache.desc()
        )));
    };
    let (slots, cap) = cache_shape(operation, "k_cache", k_cache, kvh, hd)?;
    cache_shape(operation, "v_cache", v_cache, kvh, hd)?;
    bound.cache = Some(cache_element(operation, target, k_cache, v_cache)?);
    if v_cache.desc().shape() != shape {
        return Err(Error::Message(format!(
            "{operation}: v_cache {} must have the shape of k_cache {}",
            v_cache.desc(),
            k_cache.desc()
        )));
    }
    let kv = kvh * hd;
    if query_width.checked_add(2 * kv) != Some(n) || query_width % 2 != 0 || hd % 2 != 0 {
        return Err(Error::Message(format!(
            "{operation}: {n} output columns are not an even query width and keys and \
             values of {kvh} heads of an even {hd} (query width {query_width})"
        )));
    }
    row_data(operation, "sequence", sequence, m)?;
    row_data(operation, "position", position, m)?;
    let c = rotation(operation, rotary.dims, rotary.base, hd)?;
    let bind = |t: &DeviceTensor| operand(t, target, operation);
    let (ks, kp, kkc, kvc) = (
        bind(sequence)?,
        bind(position)?,
        bind(k_cache)?,
        bind(v_cache)?,
    );
    for (what, cache) in [("k_cache", &kkc), ("v_cache", &kvc)] {
        for &(other, operand) in read.iter().chain(&[("sequence", &ks), ("position", &kp)]) {
            disjoint(operation, (what, cache), (other, operand))?;
        }
    }
    disjoint(operation, ("k_cache", &kkc), ("v_cache", &kvc))?;
    let index = |v: usize| ScalarValue::Index(v as u64);
    bound
        .scalars
        .extend([query_width, kvh, hd, slots, cap, rotary.dims].map(index));
    bound.scalars.push(ScalarValue::F32(c));
    for o in [&ks, &kp, &kkc, &kvc] {
        bound.scalars.extend(o.scalars());
    }
    bound.views.extend([ks.view, kp.view, kkc.view, kvc.view]);
    Ok(())
}
