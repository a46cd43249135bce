//! The launch arguments the matmul kernels share (decode, row-dot, tiled
//! and cooperative-matrix): declared once, in the order `Launch` pushes
//! them, so the kernels cannot drift from the recording side or from each
//! other. (Split-k adds its own and declares them itself.)

use hrx_loom::build::{Body, Buffer, Index, Value};

/// Shapes, strides, offsets and lengths (in elements) of `C = A x B (+ bias)`,
/// then the four buffers.
pub(crate) struct MatmulArgs {
    pub m: Value<Index>,
    pub n: Value<Index>,
    pub k: Value<Index>,
    /// A's batch, row and column strides, offset and length.
    pub sab: Value<Index>,
    pub sam: Value<Index>,
    pub sak: Value<Index>,
    pub oa: Value<Index>,
    pub la: Value<Index>,
    /// B's batch, row and column strides, offset and length.
    pub sbb: Value<Index>,
    pub sbk: Value<Index>,
    pub sbn: Value<Index>,
    pub ob: Value<Index>,
    pub lb: Value<Index>,
    /// The bias's stride, offset and length.
    pub sbias: Value<Index>,
    pub obias: Value<Index>,
    pub lbias: Value<Index>,
    /// C's batch stride, offset and length.
    pub scb: Value<Index>,
    pub oc: Value<Index>,
    pub lc: Value<Index>,
    pub a: Value<Buffer>,
    pub b: Value<Buffer>,
    pub bias: Value<Buffer>,
    pub c: Value<Buffer>,
}

impl MatmulArgs {
    /// Declare the arguments on `body`; `inputs_readonly` marks A, B and
    /// the bias `{readonly}`.
    pub(crate) fn declare(body: &mut Body, inputs_readonly: bool) -> MatmulArgs {
        let [
            m,
            n,
            k,
            sab,
            sam,
            sak,
            oa,
            la,
            sbb,
            sbk,
            sbn,
            ob,
            lb,
            sbias,
            obias,
            lbias,
            scb,
            oc,
            lc,
        ] = [
            "m", "n", "k", "sab", "sam", "sak", "oa", "la", "sbb", "sbk", "sbn", "ob", "lb",
            "sbias", "obias", "lbias", "scb", "oc", "lc",
        ]
        .map(|name| body.arg_index(name));
        let [a, b, bias] = ["a", "b", "bias"].map(|name| body.arg_buffer(name, inputs_readonly));
        let c = body.arg_buffer("c", false);
        MatmulArgs {
            m,
            n,
            k,
            sab,
            sam,
            sak,
            oa,
            la,
            sbb,
            sbk,
            sbn,
            ob,
            lb,
            sbias,
            obias,
            lbias,
            scb,
            oc,
            lc,
            a,
            b,
            bias,
            c,
        }
    }
}
