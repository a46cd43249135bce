//! Which operands the cooperative-matrix kernel copies 16 bytes at a time
//! (the alignment is the decode kernel's 16-byte f16 loads', checked where
//! the kernel is chosen), and the axis order of A and B.

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
    /// C's rows and the bias lie in aligned quads (`n` a multiple of 4;
    /// C's offset, batch stride and binding aligned; the bias contiguous
    /// and aligned, or absent), so the epilogue moves four elements at a
    /// time.
    pub(crate) wide_c: bool,
}
