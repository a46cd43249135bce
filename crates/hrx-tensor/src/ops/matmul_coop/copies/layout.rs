//! Which operands the cooperative-matrix kernel may copy 16 bytes at a
//! time: the axis order of A and B and the alignment a wide copy needs.

/// Which axis of A and B is contiguous, and whether each is copied wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoopLayout {
    /// A's k axis has element stride 1 (consecutive work items then load
    /// consecutive elements of a row on the element path).
    pub(crate) a_k_fast: bool,
    /// B's n axis has element stride 1.
    pub(crate) b_n_fast: bool,
    /// A is copied as 16-byte groups of 8 halves along k.
    pub(crate) wide_a: bool,
    /// B is copied as 16-byte groups of 8 halves along n.
    pub(crate) wide_b: bool,
    /// B is contiguous along k (transposed, as linear layers store
    /// weights) and copied as 16-byte groups along k into an n-major
    /// tile, whose fragments are loaded column-major. Only without
    /// `wide_b`.
    pub(crate) wide_bt: bool,
}

/// What a wide copy needs of one operand: its contiguous axis has stride
/// 1, and every group of 8 halves along it starts 16-byte aligned and lies
/// wholly inside or wholly outside the matrix.
pub(crate) struct WideCheck {
    /// Element stride along the contiguous axis.
    pub(crate) fast_stride: usize,
    /// Element stride between rows (the other axis).
    pub(crate) row_stride: usize,
    /// Element stride between batch entries.
    pub(crate) batch_stride: usize,
    /// Extent of the contiguous axis.
    pub(crate) extent: usize,
    /// Element offset of the operand in its binding.
    pub(crate) offset: u64,
    /// Byte offset of the binding in its buffer.
    pub(crate) binding_offset: u64,
}

impl WideCheck {
    /// Whether 16-byte copies are exact for this operand.
    pub(crate) fn holds(&self) -> bool {
        self.fast_stride == 1
            && self.row_stride.is_multiple_of(8)
            && self.batch_stride.is_multiple_of(8)
            && self.extent.is_multiple_of(8)
            && self.offset.is_multiple_of(8)
            && self.binding_offset.is_multiple_of(16)
    }
}
