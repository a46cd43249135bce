//! How the cooperative-matrix kernel copies tiles of A and B from storage
//! into its f16 workgroup tiles: 16 bytes per load as u32 words where the
//! layout allows ("wide"), each word unpacked into two halves; element by
//! element otherwise. Builds the kernel's operand views, the per-work-item
//! setup before the k loop, the first tile (prologue), the next tile's
//! loads (prefetch) and their stores (stage).
//!
//! A wide copy gives every work item a fixed column group (8 halves) and a
//! fixed set of tile rows, so all address arithmetic that involves a
//! division happens once before the k loop; per k step a work item adds one
//! word offset per operand. Each work item stores its four words in an
//! order rotated by its position (see `Rotation`) so that a subgroup's
//! halfword stores into the tile meet no bank conflicts. Only the
//! fragments' loads read the tiles, and they always do through f16 views
//! (NVIDIA's compiler rejects f16 fragments loaded through u32 views).

mod layout;
mod operands;
mod rotation;
mod scalar;
#[cfg(test)]
mod tests;
mod wide;

pub(crate) use layout::CoopLayout;

use super::CoopTiles;
use hrx_loom::build::{Buffer, Builder, Index, Num, Offset, Value, View};
use hrx_loom::ir::Scalar;
use operands::WideCopy;

/// Index constants the copies share.
#[derive(Clone, Copy)]
pub(super) struct Consts {
    pub(super) c0: Value<Index>,
    pub(super) c1: Value<Index>,
    pub(super) c2: Value<Index>,
    pub(super) c4: Value<Index>,
    pub(super) c8: Value<Index>,
    /// The lane indices 0..4 of a quad.
    pub(super) cq: [Value<Index>; 4],
}

/// The operand views and the constants defined with them.
pub(super) struct Views {
    pub(super) av: Value<View>,
    pub(super) bv: Value<View>,
    /// Word offset of one k step of a copy along k (A, B).
    kw: [Option<Value<Index>>; 2],
    pub(super) c2: Value<Index>,
    pub(super) c4: Value<Index>,
    pub(super) c8: Value<Index>,
    pub(super) cq: [Value<Index>; 4],
    pub(super) zq: Value<Num>,
}

/// Everything the copies read, defined by the kernel before them.
pub(super) struct Env {
    pub(super) c: Consts,
    /// A zero quad of words, and an f16 zero.
    pub(super) zq: Value<Num>,
    pub(super) hzero: Value<Num>,
    pub(super) tid: Value<Index>,
    pub(super) row0: Value<Index>,
    pub(super) col0: Value<Index>,
    pub(super) m: Value<Index>,
    pub(super) n: Value<Index>,
    pub(super) k: Value<Index>,
    pub(super) sam: Value<Index>,
    pub(super) sak: Value<Index>,
    pub(super) sbn: Value<Index>,
    pub(super) sbk: Value<Index>,
    pub(super) basea: Value<Index>,
    pub(super) baseb: Value<Index>,
    /// Elements of the tiles of A and B, and the work items.
    pub(super) ca: Value<Index>,
    pub(super) cb: Value<Index>,
    pub(super) cth: Value<Index>,
    pub(super) av: Value<View>,
    pub(super) bv: Value<View>,
    pub(super) ta: Value<View>,
    pub(super) tb: Value<View>,
}

/// One operand's copy, set up.
pub(super) enum OperandCopy {
    /// Element by element; `fast` orders the elements along the operand's
    /// contiguous axis.
    Scalar { fast: bool },
    /// 16 bytes at a time.
    Wide(WideCopy),
}

/// Which operand.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Operand {
    A,
    B,
}

impl CoopTiles {
    /// `layout` with the wide copies this tiling cannot map to fixed
    /// column groups turned off.
    pub(super) fn usable(&self, layout: CoopLayout) -> CoopLayout {
        let wide_b = layout.wide_b && self.wide_b().fits();
        CoopLayout {
            wide_a: layout.wide_a && self.wide_a().fits(),
            wide_b,
            wide_bt: layout.wide_bt && !wide_b && self.wide_bt().fits(),
            ..layout
        }
    }

    /// The views of A and B for `layout` (already passed through
    /// `usable`): u32 words for wide copies, f16 elements otherwise.
    pub(super) fn copy_views(
        &self,
        b: &mut Builder,
        layout: CoopLayout,
        zero: Value<Offset>,
        [a, bb]: [Value<Buffer>; 2],
        [la, lb]: [Value<Index>; 2],
    ) -> Views {
        let [c8, c4, c2] = [8, 4, 2].map(|v| b.index(v));
        let cq = [0, 1, 2, 3].map(|v| b.index(v));
        let zu = b.int(0, Scalar::U32);
        let zq = b.splat(zu, 4);
        let words = |b: &mut Builder, buf, len| {
            let lw = b.div(len, c2);
            b.buffer_view(buf, zero, [lw.into()], Scalar::U32)
        };
        let mut kw = [None, None];
        let av = if layout.wide_a {
            let v = words(b, a, la);
            kw[0] = Some(b.index(self.bk as u64 / 2));
            v
        } else {
            b.buffer_view(a, zero, [la.into()], Scalar::F16)
        };
        let bv = if layout.wide_b {
            words(b, bb, lb)
        } else if layout.wide_bt {
            let v = words(b, bb, lb);
            kw[1] = Some(b.index(self.bk as u64 / 2));
            v
        } else {
            b.buffer_view(bb, zero, [lb.into()], Scalar::F16)
        };
        Views {
            av,
            bv,
            kw,
            c2,
            c4,
            c8,
            cq,
            zq,
        }
    }

    /// The per-work-item setup of both copies (A, then B), before the k
    /// loop.
    pub(super) fn copy_setup(
        &self,
        b: &mut Builder,
        env: &Env,
        layout: CoopLayout,
        views: &Views,
    ) -> [OperandCopy; 2] {
        let a = if layout.wide_a {
            let kw = views.kw[0].unwrap_or(env.c.c0);
            OperandCopy::Wide(self.wide_a_copy(b, env, kw))
        } else {
            OperandCopy::Scalar {
                fast: layout.a_k_fast,
            }
        };
        let bc = if layout.wide_b {
            OperandCopy::Wide(self.wide_b_copy(b, env))
        } else if layout.wide_bt {
            let kw = views.kw[1].unwrap_or(env.c.c0);
            OperandCopy::Wide(self.wide_bt_copy(b, env, kw))
        } else {
            OperandCopy::Scalar {
                fast: layout.b_n_fast,
            }
        };
        [a, bc]
    }

    /// The copy of `operand`'s tile at `k0` (step 0) before the loop.
    pub(super) fn prologue(
        &self,
        b: &mut Builder,
        env: &Env,
        (operand, copy): (Operand, &OperandCopy),
        k0: Value<Index>,
    ) {
        match copy {
            OperandCopy::Wide(w) => {
                let x = w.fetch(b, env, k0, env.c.c0);
                w.store(b, env, &x);
            }
            OperandCopy::Scalar { fast } => self.scalar(b, env, operand, *fast, k0),
        }
    }

    /// The wide loads of the tile at `kn` (step `t1`), issued before the
    /// current step's products; none for element copies.
    pub(super) fn prefetch(
        &self,
        b: &mut Builder,
        env: &Env,
        copy: &OperandCopy,
        (kn, t1): (Value<Index>, Value<Index>),
    ) -> Vec<Value<Num>> {
        match copy {
            OperandCopy::Wide(w) => w.fetch(b, env, kn, t1),
            OperandCopy::Scalar { .. } => Vec::new(),
        }
    }

    /// The tile at `kn` into workgroup memory: the prefetched quads, or
    /// an element copy.
    pub(super) fn stage(
        &self,
        b: &mut Builder,
        env: &Env,
        (operand, copy): (Operand, &OperandCopy),
        kn: Value<Index>,
        fetched: &[Value<Num>],
    ) {
        match copy {
            OperandCopy::Wide(w) => w.store(b, env, fetched),
            OperandCopy::Scalar { fast } => self.scalar(b, env, operand, *fast, kn),
        }
    }

    fn scalar(&self, b: &mut Builder, env: &Env, operand: Operand, fast: bool, k0: Value<Index>) {
        match operand {
            Operand::A => self.scalar_a(b, env, fast, k0),
            Operand::B => self.scalar_b(b, env, fast, k0),
        }
    }
}
