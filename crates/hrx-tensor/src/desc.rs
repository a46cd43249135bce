//! Tensor descriptors: dtype, shape, element strides and a layout label.

use crate::{DType, Layout};
use hrx_core::{Error, Result};
use std::fmt;

/// What a tensor is, without its storage: element type, shape, element
/// strides and a [`Layout`] label.
///
/// Invariants, checked by every constructor:
/// - the empty shape is a scalar of one element; a zero dimension makes an
///   empty tensor of 0 bytes;
/// - strides count elements, one per axis; the layout never overlaps
///   (sorted by stride, every axis of extent > 1 steps over everything the
///   smaller-stride axes span, which holds for every slice and permutation
///   of a contiguous tensor);
/// - `bytes()` covers gaps: `(largest element offset + 1) * dtype bytes`;
/// - every size computation is overflow-checked and fails instead of
///   wrapping, so the accessors below never fail.
///
/// ```
/// use hrx_tensor::{DType, Layout, TensorDesc};
/// let d = TensorDesc::new(DType::F32, vec![2, 3])?.with_layout(Layout::Rows)?;
/// assert_eq!((d.strides(), d.bytes(), d.elements()), (&[3, 1][..], 24, 6));
/// let t = TensorDesc::strided(DType::F32, vec![3, 2], vec![1, 3])?;
/// assert!(!t.is_contiguous());
/// assert!(TensorDesc::strided(DType::F32, vec![2, 2], vec![1, 1]).is_err());
/// # Ok::<(), hrx_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorDesc {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    layout: Layout,
    elements: usize,
    bytes: usize,
}

fn overflow(what: &str, shape: &[usize]) -> Error {
    Error::Message(format!("tensor descriptor {shape:?}: {what} overflows"))
}

/// Row-major element strides for `shape`. A zero dimension counts as one, so
/// the strides of an empty tensor are those of its non-empty neighbours.
pub fn contiguous_strides(shape: &[usize]) -> Result<Vec<usize>> {
    let mut strides = vec![0; shape.len()];
    let mut step = 1usize;
    for (stride, &dim) in strides.iter_mut().zip(shape).rev() {
        *stride = step;
        step = step
            .checked_mul(dim.max(1))
            .ok_or_else(|| overflow("the element count", shape))?;
    }
    Ok(strides)
}

impl TensorDesc {
    /// A contiguous row-major descriptor.
    pub fn new(dtype: DType, shape: Vec<usize>) -> Result<Self> {
        let strides = contiguous_strides(&shape)?;
        Self::strided(dtype, shape, strides)
    }

    /// A descriptor with explicit element strides. Fails when the ranks
    /// differ, the layout overlaps itself, or a size overflows.
    pub fn strided(dtype: DType, shape: Vec<usize>, strides: Vec<usize>) -> Result<Self> {
        if shape.len() != strides.len() {
            return Err(Error::Message(format!(
                "tensor descriptor: shape {shape:?} and strides {strides:?} differ in rank"
            )));
        }
        let mut elements = 1usize;
        for &dim in &shape {
            elements = elements
                .checked_mul(dim)
                .ok_or_else(|| overflow("the element count", &shape))?;
        }
        let bytes = if elements == 0 {
            0
        } else {
            check_no_overlap(&shape, &strides)?;
            let mut last = 0usize;
            for (&dim, &stride) in shape.iter().zip(&strides) {
                last = (dim - 1)
                    .checked_mul(stride)
                    .and_then(|d| last.checked_add(d))
                    .ok_or_else(|| overflow("the largest offset", &shape))?;
            }
            last.checked_add(1)
                .and_then(|n| n.checked_mul(dtype.bytes()))
                .ok_or_else(|| overflow("the byte size", &shape))?
        };
        Ok(TensorDesc {
            dtype,
            shape,
            strides,
            layout: Layout::Any,
            elements,
            bytes,
        })
    }

    /// The same descriptor with a layout label, checked against the rank.
    pub fn with_layout(mut self, layout: Layout) -> Result<Self> {
        layout
            .check_rank(self.shape.len())
            .map_err(|e| Error::Message(format!("tensor descriptor {:?}: {e}", self.shape)))?;
        self.layout = layout;
        Ok(self)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The extent of each axis (empty for a scalar).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element stride of each axis.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The layout label.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The number of elements (1 for a scalar, 0 when a dimension is 0).
    pub fn elements(&self) -> usize {
        self.elements
    }

    /// Bytes of storage the tensor spans, gaps included (0 when empty).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.elements == 0
    }

    /// Whether elements are packed in row-major order with no gaps. Strides
    /// of axes of extent 1 do not matter; an empty tensor is contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.is_empty() {
            return true;
        }
        let mut step = 1;
        for (&dim, &stride) in self.shape.iter().zip(&self.strides).rev() {
            if dim != 1 && stride != step {
                return false;
            }
            step *= dim;
        }
        true
    }

    /// The element offset of a multi-index, or `None` when out of range.
    pub fn offset_of(&self, index: &[usize]) -> Option<usize> {
        if index.len() != self.shape.len() {
            return None;
        }
        let mut offset = 0;
        for ((&i, &dim), &stride) in index.iter().zip(&self.shape).zip(&self.strides) {
            if i >= dim {
                return None;
            }
            offset += i * stride;
        }
        Some(offset)
    }
}

impl fmt::Display for TensorDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)?;
        if !self.is_contiguous() {
            write!(f, " strides {:?}", self.strides)?;
        }
        if self.layout != Layout::Any {
            write!(f, " {}", self.layout)?;
        }
        Ok(())
    }
}

/// Reject layouts in which two indices could share an element. Only called
/// for non-empty shapes, so every extent is at least 1.
fn check_no_overlap(shape: &[usize], strides: &[usize]) -> Result<()> {
    let mut axes: Vec<(usize, usize)> = shape
        .iter()
        .zip(strides)
        .filter(|(dim, _)| **dim > 1)
        .map(|(&dim, &stride)| (stride, dim))
        .collect();
    axes.sort_unstable();
    // `span` is one past the largest offset the smaller-stride axes reach.
    let mut span = 1usize;
    for (stride, dim) in axes {
        if stride < span {
            return Err(Error::Message(format!(
                "tensor descriptor: shape {shape:?} with strides {strides:?} overlaps itself"
            )));
        }
        span = (dim - 1)
            .checked_mul(stride)
            .and_then(|d| d.checked_add(span))
            .ok_or_else(|| overflow("the largest offset", shape))?;
    }
    Ok(())
}
