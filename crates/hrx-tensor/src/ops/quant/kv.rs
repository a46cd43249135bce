//! The key/value cache store fused into the matrix-vector kernel (its
//! paired form, `GemvKey::kv_store`), on the [`hrx_loom::build`] builder.
//!
//! A stacked query-key-value product has output columns `[queries | keys
//! | values]`. In the paired form each subgroup computes two adjacent
//! columns, `2j` and `2j + 1` (weight rows `2j` and `2j + 1`), which are
//! one RoPE pair of a key head: the subgroup turns them by its row's
//! position with the fragment `rope_kv_store` uses (so the same bits) and
//! stores them into the key cache, or stores a value pair into the value
//! cache, besides writing both columns to the product's output. A row
//! whose slot or position is outside the caches stores nothing into them.
//! f16 caches take each value rounded to nearest (the output stays f32).

use crate::ops::token::kernels::{narrow, turned};
use hrx_loom::build::{Body, Builder, Index, Num, Value, View};
use hrx_loom::ir::{IntPredicate, Scalar};

/// The store's launch scalars, declared with the other fused scalars.
pub(crate) struct KvScalars {
    /// Query columns (where the keys start), kv heads, head size.
    qw: Value<Index>,
    kvh: Value<Index>,
    hd: Value<Index>,
    slots: Value<Index>,
    cap: Value<Index>,
    /// Rotated dimensions of a head, and the frequency exponent `c`.
    rope: Value<Index>,
    c: Value<Num>,
    /// Offsets and lengths: sequence, position, key cache, value cache.
    places: [Value<Index>; 8],
}

impl KvScalars {
    pub(crate) fn declare(k: &mut Body) -> KvScalars {
        let [qw, kvh, hd, slots, cap, rope] =
            ["qw", "kvh", "hd", "slots", "cap", "rope"].map(|a| k.arg_index(a));
        let c = k.arg_scalar("c", Scalar::F32);
        let places = ["os", "ls", "op", "lp", "okc", "lkc", "ovc", "lvc"].map(|a| k.arg_index(a));
        KvScalars {
            qw,
            kvh,
            hd,
            slots,
            cap,
            rope,
            c,
            places,
        }
    }
}

/// The store's arguments: scalars and views.
pub(crate) struct KvArgs {
    s: KvScalars,
    sequence: Value<View>,
    position: Value<View>,
    keys: Value<View>,
    values: Value<View>,
    /// The caches' element type.
    element: Scalar,
}

/// One row's cache place: its slot and position (i32), loaded before the
/// product.
#[derive(Clone, Copy)]
pub(crate) struct RowPlace {
    slot: Value<Num>,
    position: Value<Num>,
}

impl KvArgs {
    /// Declares the buffers (after the other fused buffers), the caches
    /// of `element` (f32, or f16 stored rounded to nearest).
    pub(crate) fn declare(k: &mut Body, s: KvScalars, element: Scalar) -> KvArgs {
        let [_, ls, _, lp, _, lkc, _, lvc] = s.places;
        let [sb, pb] = ["sequence", "position"].map(|a| k.arg_buffer(a, true));
        let [kb, vb] = ["k_cache", "v_cache"].map(|a| k.arg_buffer(a, false));
        let zero = k.offset(0);
        let view =
            |k: &mut Body, b, len: Value<Index>, ty| k.buffer_view(b, zero, [len.into()], ty);
        let sequence = view(k, sb, ls, Scalar::I32);
        let position = view(k, pb, lp, Scalar::I32);
        let keys = view(k, kb, lkc, element);
        let values = view(k, vb, lvc, element);
        KvArgs {
            s,
            sequence,
            position,
            keys,
            values,
            element,
        }
    }

    /// Row `rc`'s (clamped into the rows) slot and position.
    pub(crate) fn place(&self, b: &mut Builder, rc: Value<Index>) -> RowPlace {
        let [os, _, op, ..] = self.s.places;
        let at_s = b.add(os, rc);
        let at_p = b.add(op, rc);
        RowPlace {
            slot: b.load(self.sequence, &[at_s]),
            position: b.load(self.position, &[at_p]),
        }
    }

    /// Stores output columns `col` and `col + 1` (`col` even) of a row
    /// at `place`, `(y0, y1)`, into the caches where they are a key or a
    /// value pair and the row is inside the caches.
    pub(crate) fn store_pair(
        &self,
        b: &mut Builder,
        col: Value<Index>,
        place: RowPlace,
        (y0, y1): (Value<Num>, Value<Num>),
    ) {
        let (s, element) = (&self.s, self.element);
        let [_, _, _, _, okc, _, ovc, _] = s.places;
        let slot = b.bitcast(place.slot, Scalar::U32);
        let pos = b.bitcast(place.position, Scalar::U32);
        let slots = b.index_cast(s.slots, Scalar::U32);
        let cap = b.index_cast(s.cap, Scalar::U32);
        let in_slots = b.cmpi(IntPredicate::Ult, slot, slots);
        let in_cap = b.cmpi(IntPredicate::Ult, pos, cap);
        let kvw = b.mul(s.kvh, s.hd);
        let past_queries = b.cmp(IntPredicate::Uge, col, s.qw);
        let active = b.and(in_slots, in_cap);
        let store = b.and(active, past_queries);
        b.if_(store, |b| {
            let slot = b.to_index(slot);
            let p = b.to_index(pos);
            let e = b.sub(col, s.qw);
            let is_key = b.cmp(IntPredicate::Ult, e, kvw);
            let is_value = b.cmp(IntPredicate::Uge, e, kvw);
            // The column within the keys or the values.
            let c0 = b.index(0);
            let skip = b.select(is_key, c0, kvw);
            let e = b.sub(e, skip);
            let h = b.div(e, s.hd);
            let d = b.rem(e, s.hd);
            let row = b.madd(slot, s.kvh, h);
            let at = b.madd(row, s.cap, p);
            let first = b.madd(at, s.hd, d);
            let c1 = b.index(1);
            b.if_(is_key, |b| {
                // An active row's position is not negative: only the width
                // decides whether the pair turns.
                let inside = b.cmp(IntPredicate::Ult, d, s.rope);
                let turned = b.if_else(
                    inside,
                    |b| {
                        let c2 = b.index(2);
                        let i = b.div(d, c2);
                        let (z0, z1) = turned(b, (y0, y1), i, place.position, s.c);
                        vec![z0, z1]
                    },
                    |_| vec![y0, y1],
                );
                let p0 = b.add(first, okc);
                let p1 = b.add(p0, c1);
                let [z0, z1] = [turned[0], turned[1]].map(|z| narrow(b, z, element));
                b.store(z0, self.keys, &[p0]);
                b.store(z1, self.keys, &[p1]);
            });
            b.if_(is_value, |b| {
                let p0 = b.add(first, ovc);
                let p1 = b.add(p0, c1);
                let [v0, v1] = [y0, y1].map(|v| narrow(b, v, element));
                b.store(v0, self.values, &[p0]);
                b.store(v1, self.values, &[p1]);
            });
        });
    }
}
