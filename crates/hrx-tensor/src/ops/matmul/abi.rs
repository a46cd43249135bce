//! The launch arguments the matmul kernels share (decode, row-dot, tiled
//! and cooperative-matrix): declared once, in the order `Launch` pushes
//! them, so the kernels cannot drift from the recording side or from each
//! other. (Split-k adds its own and declares them itself.) Also the f32
//! epilogue (bias, activation, bounds-checked store) of the two
//! register-tiled kernels.

use crate::ops::{UnaryOp, operand::quad_aligned};
use hrx_loom::build::{
    Body, Bool, Buffer, Builder, Fragment, Index, KernelBuilder, Num, Value, View, passes,
};
use hrx_loom::ir::Scalar;

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

/// The launch of a kernel `name` of output tiles `bm x bn`, for the
/// matmul workload `m, n, batch`: `ceil(n / bn) x ceil(m / bm) x batch`
/// workgroups of `threads` work items (column tiles along x), with the
/// shared arguments declared (`inputs_readonly` as for
/// [`MatmulArgs::declare`]).
pub(crate) fn tile_launch(
    name: &str,
    (bm, bn): (usize, usize),
    threads: usize,
    inputs_readonly: bool,
) -> (Body, MatmulArgs) {
    let n64 = |v: usize| v as u64;
    let mut k = KernelBuilder::new(name);
    let [wm, wn, batch] = ["m", "n", "batch"].map(|name| k.workload(name));
    let one = k.index(1);
    let [bm_l, bn_l] = [bm, bn].map(|v| k.index(n64(v)));
    let gy = k.div_ceil(wm, bm_l);
    let gx = k.div_ceil(wn, bn_l);
    let wg = k.index(n64(threads));
    let mut k = k.launch_config([gx, gy, batch], [wg, one, one]);
    let args = MatmulArgs::declare(&mut k, inputs_readonly);
    (k, args)
}

/// The f32 epilogue of the register-tiled kernels (plain and quad):
/// `C[bi, row, col] = act(value + bias[col])` for the elements inside C.
pub(crate) struct F32Epilogue {
    bias: Value<View>,
    sbias: Value<Index>,
    obias: Value<Index>,
    c: Value<View>,
    n: Value<Index>,
    scb: Value<Index>,
    oc: Value<Index>,
    batch: Value<Index>,
    act: Option<Fragment>,
    /// The activation's 4-lane form, where it has one.
    quad_act: Option<Option<Fragment>>,
}

impl F32Epilogue {
    /// The epilogue of batch entry `batch` over `args`' bias and C, both
    /// f32, with `act` after the bias.
    pub(crate) fn new(
        k: &mut Builder,
        args: &MatmulArgs,
        batch: Value<Index>,
        act: Option<UnaryOp>,
    ) -> F32Epilogue {
        let zero = k.offset(0);
        let bias = k.buffer_view(args.bias, zero, [args.lbias.into()], Scalar::F32);
        let c = k.buffer_view(args.c, zero, [args.lc.into()], Scalar::F32);
        F32Epilogue {
            bias,
            sbias: args.sbias,
            obias: args.obias,
            c,
            n: args.n,
            scb: args.scb,
            oc: args.oc,
            batch,
            act: act.map(|op| op.fragment(Scalar::F32)),
            quad_act: act.map(|op| passes::vectorize(&op.fragment(Scalar::F32), 4).ok()),
        }
    }

    /// C's element offset of row `row`, column 0.
    pub(crate) fn row_start(&self, b: &mut Builder, row: Value<Index>) -> Value<Index> {
        let crow = b.madd(row, self.n, self.oc);
        b.madd(self.batch, self.scb, crow)
    }

    /// Store `value` at column `col` of the row starting at `start`, where
    /// `inside`.
    pub(crate) fn store(
        &self,
        b: &mut Builder,
        inside: Value<Bool>,
        (start, col): (Value<Index>, Value<Index>),
        value: Value<Num>,
    ) {
        b.if_(inside, |b| {
            let at_bias = b.madd(col, self.sbias, self.obias);
            let bj = b.load(self.bias, &[at_bias]);
            let x = b.addf(value, bj);
            let y = match &self.act {
                Some(f) => b.inline(f, &[x])[0],
                None => x,
            };
            let at = b.add(start, col);
            b.store(y, self.c, &[at]);
        });
    }

    /// Store the quad `value` at columns `col..col + 4` of the row
    /// starting at `start`, where `inside`: one 4-lane bias load and one
    /// 16-byte store. The caller guarantees that the columns, C's row
    /// start and the bias's offset are multiples of 4 and the bias
    /// contiguous (or absent, its stride 0); otherwise, or where the
    /// activation has no 4-lane form, it stores lane by lane.
    pub(crate) fn store_quad(
        &self,
        b: &mut Builder,
        inside: Value<Bool>,
        (start, col): (Value<Index>, Value<Index>),
        value: Value<Num>,
    ) {
        let act = match &self.quad_act {
            Some(Some(f)) => Some(f),
            None => None,
            Some(None) => {
                for l in 0..4 {
                    let at = b.index(l);
                    let c = b.add(col, at);
                    let x = b.extract(value, at);
                    self.store(b, inside, (start, c), x);
                }
                return;
            }
        };
        b.if_(inside, |b| {
            let at_bias = b.madd(col, self.sbias, self.obias);
            let at_bias = quad_aligned(b, at_bias);
            let bj = b.vector_load(self.bias, &[at_bias], 4);
            let x = b.addf(value, bj);
            let y = match act {
                Some(f) => b.inline(f, &[x])[0],
                None => x,
            };
            let at = b.add(start, col);
            let at = quad_aligned(b, at);
            b.vector_store(y, self.c, &[at]);
        });
    }
}
