//! The decode matmul for a B contiguous along k (a transposed B, as linear
//! layers store weights): each output a dot product of an A row and a B
//! row, one subgroup per output column, 16-byte loads along k. See
//! `kernels/matmul_dot.loom`.

use super::{
    matmul_gemv::{BLayout, BLoad, b_load},
    registry::KernelKey,
};
use crate::DType;
use hrx_core::Target;

const MATMUL_DOT: &str = include_str!("../../kernels/matmul_dot.loom");

/// Work items per workgroup.
const WG: usize = 256;
/// Most rows of A per workgroup (row tiles beyond run in grid y).
const MAX_ROWS: usize = 8;
/// Loads of B each lane has in flight per k step.
const UNROLL: usize = 4;

/// The largest m the dot kernel is chosen for. Each B quad meets one A
/// quad per row, so its loads grow with m: on the H200 (k = n = 4096) it
/// took 23 / 35 / 62 us for 1 / 2 / 4 rows, where the split-k kernel
/// takes about 58 us for any m up to 16. Without cooperative matrices it
/// replaces element-by-element decode loads up to the decode threshold.
pub(crate) fn dot_max_rows(coop: bool) -> usize {
    if coop { 2 } else { 64 }
}

/// Whether the dot kernel can run: subgroup reductions on `target`, f16
/// inputs, A and B both contiguous along k with every quad of 8 halves
/// aligned (`a` and `b` as `Ops::record_matmul` describes them: A with k
/// as its columns, B with n as its columns).
pub(crate) fn dot_applies(
    target: &Target,
    input: DType,
    k: usize,
    a: &BLayout,
    b: &BLayout,
) -> bool {
    target.subgroup_ops.arithmetic
        && input == DType::F16
        && k > 0
        && b_load(input, a) == BLoad::Quad16
        && b_load(input, &b.along_k(k)) == BLoad::Quad16
}

/// The kernel for `m` rows on `target`, with the activation lines `act`
/// producing `result`.
pub(crate) fn dot_key(target: &Target, m: usize, act: String, result: &str) -> KernelKey {
    let mt = m.clamp(1, MAX_ROWS).next_power_of_two();
    let cols = WG / (target.subgroup_size_min as usize).max(1);
    let rows = 0..mt;
    let chains = || rows.clone().flat_map(|r| (0..4).map(move |p| (r, p)));
    let name = |(r, p): (usize, usize), u: usize| {
        if u == 0 {
            format!("%acc_{r}_{p}")
        } else {
            format!("%acc_{r}_{p}_{u}")
        }
    };
    let mut setup = String::new();
    for u in 0..UNROLL {
        setup += &format!(
            "  %du_{u} = index.constant {u} : index\n  %o_{u} = index.mul %sgsize, %du_{u} : index\n"
        );
    }
    for r in rows.clone() {
        setup += &format!(
            "  %dr_{r} = index.constant {r} : index
  %ar_{r} = index.add %row0, %dr_{r} : index
  %arc_{r} = index.min %ar_{r}, %m1 : index
  %ap_{r} = index.madd %arc_{r}, %sam, %abase : index
  %qa_{r} = index.div %ap_{r}, %c8 : index
"
        );
    }
    let mut body = String::new();
    for u in 0..UNROLL {
        body += &format!(
            "      %i_{u} = index.add %kk, %o_{u} : index
      %ok_{u} = index.cmp ult, %i_{u}, %q : index
      %ic_{u} = index.min %i_{u}, %q1 : index
      %bq_{u} = index.add %qb, %ic_{u} : index
      %bw_{u} = index.mul %bq_{u}, %c4 : index
      %bx_{u} = vector.load %bv[%bw_{u}] : view<[%lbw]xu32> -> vector<4xu32>
"
        );
        for r in rows.clone() {
            body += &format!(
                "      %aq_{u}_{r} = index.add %qa_{r}, %ic_{u} : index
      %aw_{u}_{r} = index.mul %aq_{u}_{r}, %c4 : index
      %ax_{u}_{r} = vector.load %av[%aw_{u}_{r}] : view<[%law]xu32> -> vector<4xu32>
"
            );
        }
    }
    // Words past k are zeroed in both operands (a clamped A word may hold
    // an infinity, and infinity times zero is not zero).
    let half_pair = |v: &str, ok: &str, p: usize, out: &str| {
        format!(
            "      {out}_d = vector.extract {v}, %c{p} : vector<4xu32> -> u32
      {out}_s = scalar.select {ok}, {out}_d, %zu : u32
      {out} = vector.unpackf16 {out}_s : u32 -> vector<2xf32>
"
        )
    };
    for u in 0..UNROLL {
        for p in 0..4 {
            body += &half_pair(
                &format!("%bx_{u}"),
                &format!("%ok_{u}"),
                p,
                &format!("%bf_{u}_{p}"),
            );
            for r in rows.clone() {
                let af = format!("%af_{u}_{r}_{p}");
                body += &half_pair(&format!("%ax_{u}_{r}"), &format!("%ok_{u}"), p, &af);
                body += &format!(
                    "      {} = scalar.fmaf {af}, %bf_{u}_{p}, {} : vector<2xf32>\n",
                    name((r, p), u + 1),
                    name((r, p), u)
                );
            }
        }
    }
    let list =
        |f: &dyn Fn((usize, usize)) -> String| chains().map(f).collect::<Vec<_>>().join(", ");
    let mut sums = String::new();
    let mut stores = String::new();
    for r in rows.clone() {
        sums += &format!(
            "    %sa_{r} = scalar.addf %res_{r}_0, %res_{r}_1 : vector<2xf32>
    %sb_{r} = scalar.addf %res_{r}_2, %res_{r}_3 : vector<2xf32>
    %sc_{r} = scalar.addf %sa_{r}, %sb_{r} : vector<2xf32>
    %sx_{r} = vector.extract %sc_{r}, %c0 : vector<2xf32> -> f32
    %sy_{r} = vector.extract %sc_{r}, %c1 : vector<2xf32> -> f32
    %ss_{r} = scalar.addf %sx_{r}, %sy_{r} : f32
    %tot_{r} = kernel.subgroup.reduce<addf> %ss_{r} : f32
"
        );
        stores += &format!(
            "      %rok_{r} = index.cmp ult, %ar_{r}, %m : index
      scf.if %rok_{r} {{
        %x = scalar.addf %tot_{r}, %bj : f32
{act}
        %crow = index.madd %ar_{r}, %n, %cbase : index
        %ci = index.add %crow, %j : index
        view.store {result}, %cv[%ci] : f32, view<[%lc]xf32>
      }}
"
        );
    }
    let substitutions = vec![
        ("COLS1", (cols - 1).to_string()),
        ("COLS", cols.to_string()),
        ("MT1", (mt - 1).to_string()),
        ("MT", mt.to_string()),
        ("WG", WG.to_string()),
        ("U", UNROLL.to_string()),
        ("ROWS", setup),
        (
            "CARRIED",
            list(&|c| format!("{} = %z2 : vector<2xf32>", name(c, 0))),
        ),
        ("TYPES", list(&|_| "vector<2xf32>".to_string())),
        ("RESULTS", list(&|(r, p)| format!("%res_{r}_{p}"))),
        ("YIELDS", list(&|c| name(c, UNROLL))),
        ("BODY", body),
        ("SUMS", sums),
        ("STORES", stores),
    ];
    KernelKey {
        template: MATMUL_DOT,
        substitutions,
        symbol: "matmul_dot",
        config: Vec::new(),
    }
}

/// The dot kernel's loom source for `target` and `m` rows (for offline
/// compilation and SPIR-V checks).
#[cfg(feature = "kernel-sources")]
pub fn dot_matmul_source(target: &Target, m: usize, activation: Option<super::UnaryOp>) -> String {
    let (act, result) = match activation {
        None => (String::new(), "%x"),
        Some(op) => (op.body("f32"), "%r"),
    };
    dot_key(target, m, act, result).source()
}
