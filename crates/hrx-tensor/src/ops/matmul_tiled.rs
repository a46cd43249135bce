//! The register-tiled workgroup-memory matmul kernel (any device): f32 or
//! f16 inputs, f32 accumulation. See `kernels/matmul.loom`.

use super::registry::{KernelKey, KernelSource};
use crate::DType;
use hrx_core::{DeviceKind, Target};

const MATMUL: &str = include_str!("../../kernels/matmul.loom");

/// A `bm x bn` tile of C per workgroup, k steps of `bk`, `tm x tn`
/// outputs per work item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiles {
    bm: usize,
    bn: usize,
    bk: usize,
    tm: usize,
    tn: usize,
}

impl Tiles {
    fn threads(&self) -> usize {
        (self.bm / self.tm) * (self.bn / self.tn)
    }
    fn bytes(&self) -> usize {
        4 * self.bk * (self.bm + 1 + self.bn)
    }
}

/// The largest tiling the target fits that still gives the device enough
/// workgroups: 128 x 128 tiles of 8 x 8 outputs on GPUs for large
/// matrices, 64 x 64 of 4 x 4 or 32 x 32 where bigger tiles would leave
/// fewer than [`GPU_WAVE`] workgroups (an encoder's 128-row matmuls ran 9
/// workgroups of 128 x 128 on an H200 at under 1 TFLOP/s); 32 x 32 on CPU
/// devices (lavapipe runs them as fast, and compiles the shorter unrolled
/// k step much faster); smaller fallbacks for tight limits.
fn tiles(target: &Target, (m, n, batch): (usize, usize, usize)) -> Tiles {
    let cpu = target.kind == DeviceKind::Cpu;
    let groups = |tile: usize| m.div_ceil(tile) * n.div_ceil(tile) * batch.max(1);
    let big = !cpu && m >= 128 && n >= 128 && groups(128) >= GPU_WAVE;
    let medium = !cpu && groups(64) >= GPU_WAVE;
    let t = |bm, bn, bk, tm, tn| Tiles { bm, bn, bk, tm, tn };
    let candidates = [
        (big, t(128, 128, 16, 8, 8)),
        (medium, t(64, 64, 16, 4, 4)),
        (true, t(32, 32, 8, 4, 4)),
        (true, t(16, 16, 8, 2, 2)),
    ];
    candidates
        .into_iter()
        .filter(|(ok, _)| *ok)
        .map(|(_, t)| t)
        .find(|t| {
            (t.threads() as u32) <= target.max_workgroup_invocations
                && (t.threads() as u32) <= target.max_workgroup_size[0]
                && t.bytes() as u64 <= u64::from(target.workgroup_memory_bytes)
        })
        .unwrap_or(t(8, 8, 4, 2, 2))
}

/// Workgroups below which a GPU tiling steps down to smaller tiles: about
/// one per multiprocessor of a large GPU.
const GPU_WAVE: usize = 128;

/// Lines mapping the flat index `%e` to a tile position, so consecutive
/// work items read consecutive addresses along the operand's fast axis.
fn pos(fast_inner: bool, rows: usize, cols: usize, r: &str, c: &str) -> String {
    if fast_inner {
        format!(
            "      %{r}_d = index.constant {cols} : index\n      %{r} = index.div %e, %{r}_d : index\n      %{c} = index.rem %e, %{r}_d : index"
        )
    } else {
        format!(
            "      %{r}_d = index.constant {rows} : index\n      %{r} = index.rem %e, %{r}_d : index\n      %{c} = index.div %e, %{r}_d : index"
        )
    }
}

/// The tiled kernel for `m x n` outputs of `input` elements; `a_k_fast` /
/// `b_n_fast` say which axis of A and B is contiguous.
pub(crate) fn tiled_key(
    target: &Target,
    input: DType,
    (m, n, batch): (usize, usize, usize),
    (a_k_fast, b_n_fast): (bool, bool),
    act: String,
    result: &str,
) -> KernelKey {
    let tl = tiles(target, (m, n, batch));
    let Tiles { bm, bn, bk, tm, tn } = tl;
    let (txs, tys) = (bn / tn, bm / tm);
    let pa = bm + 1;
    let (elem, widen_a, ya, widen_b, yb) = if input == DType::F16 {
        (
            "f16",
            "        %fa = scalar.extf %xa : f16 -> f32",
            "%fa",
            "        %fb = scalar.extf %xb : f16 -> f32",
            "%fb",
        )
    } else {
        ("f32", "", "%xa", "", "%xb")
    };
    let outs: Vec<(usize, usize)> = (0..tm).flat_map(|i| (0..tn).map(move |j| (i, j))).collect();
    let mut setup = String::new();
    for i in 0..tm {
        setup += &format!(
            "  %ro_c{i} = index.constant {} : index\n  %ro_{i} = index.add %ty, %ro_c{i} : index\n",
            i * tys
        );
    }
    for j in 0..tn {
        setup += &format!(
            "  %co_c{j} = index.constant {} : index\n  %co_{j} = index.add %tx, %co_c{j} : index\n",
            j * txs
        );
    }
    let carried = outs
        .iter()
        .map(|(i, j)| format!("%acc_{i}_{j} = %mm_zero : f32"))
        .collect::<Vec<_>>()
        .join(", ");
    let types = vec!["f32"; outs.len()].join(", ");
    let results = outs
        .iter()
        .map(|(i, j)| format!("%res_{i}_{j}"))
        .collect::<Vec<_>>()
        .join(", ");
    let name = |i: usize, j: usize, q: usize| {
        if q == 0 {
            format!("%acc_{i}_{j}")
        } else {
            format!("%s{q}_{i}_{j}")
        }
    };
    let mut body = String::new();
    for q in 0..bk {
        body += &format!("    %kq_{q} = index.constant {q} : index\n");
        for i in 0..tm {
            body += &format!(
                "    %a{q}_{i} = view.load %ta[%kq_{q}, %ro_{i}] : view<{bk}x{pa}xf32> -> f32\n"
            );
        }
        for j in 0..tn {
            body += &format!(
                "    %b{q}_{j} = view.load %tb[%kq_{q}, %co_{j}] : view<{bk}x{bn}xf32> -> f32\n"
            );
        }
        for &(i, j) in &outs {
            body += &format!(
                "    {} = scalar.fmaf %a{q}_{i}, %b{q}_{j}, {} : f32\n",
                name(i, j, q + 1),
                name(i, j, q)
            );
        }
    }
    let yields = outs
        .iter()
        .map(|&(i, j)| name(i, j, bk))
        .collect::<Vec<_>>()
        .join(", ");
    let mut epilogue = String::new();
    for &(i, j) in &outs {
        epilogue += &format!(
            "  %er_{i}_{j} = index.add %row0, %ro_{i} : index
  %ec_{i}_{j} = index.add %col0, %co_{j} : index
  %eok_r_{i}_{j} = index.cmp ult, %er_{i}_{j}, %m : index
  %eok_c_{i}_{j} = index.cmp ult, %ec_{i}_{j}, %n : index
  %eok_{i}_{j} = scalar.andi %eok_r_{i}_{j}, %eok_c_{i}_{j} : i1
  scf.if %eok_{i}_{j} {{
    %pbias = index.madd %ec_{i}_{j}, %sbias, %obias : index
    %bj = view.load %biasv[%pbias] : view<[%lbias]xf32> -> f32
    %x = scalar.addf %res_{i}_{j}, %bj : f32
{act}
    %crow = index.madd %er_{i}_{j}, %n, %oc : index
    %cbase = index.madd %bi, %scb, %crow : index
    %cidx = index.add %cbase, %ec_{i}_{j} : index
    view.store {result}, %cv[%cidx] : f32, view<[%lc]xf32>
  }}
"
        );
    }
    KernelKey {
        source: KernelSource::Template {
            template: MATMUL,
            substitutions: vec![
                ("BM1", (bm - 1).to_string()),
                ("BN1", (bn - 1).to_string()),
                ("BK1", (bk - 1).to_string()),
                ("BM", bm.to_string()),
                ("BN", bn.to_string()),
                ("BK", bk.to_string()),
                ("PA", pa.to_string()),
                ("THREADS", tl.threads().to_string()),
                ("TXS", txs.to_string()),
                ("A_ELEMS", (bm * bk).to_string()),
                ("B_ELEMS", (bk * bn).to_string()),
                ("A_BYTES", (4 * bk * pa).to_string()),
                ("B_BYTES", (4 * bk * bn).to_string()),
                ("IN", elem.into()),
                ("WIDEN_A", widen_a.into()),
                ("YA", ya.into()),
                ("WIDEN_B", widen_b.into()),
                ("YB", yb.into()),
                ("A_POS", pos(a_k_fast, bm, bk, "ar", "ac")),
                ("B_POS", pos(b_n_fast, bk, bn, "br", "bc")),
                ("SETUP", setup),
                ("CARRIED", carried),
                ("TYPES", types),
                ("RESULTS", results),
                ("BODY", body),
                ("YIELDS", yields),
                ("EPILOGUE", epilogue),
            ],
        },
        symbol: "matmul",
        config: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hrx_loom::{Compiler, Specialization};

    #[test]
    fn every_tiling_compiles_for_both_targets() {
        for target in [Target::lavapipe(), Target::hopper()] {
            let compiler = Compiler::for_target(None, &target).unwrap();
            for (dtype, mn, fast) in [
                (DType::F32, (8192, 8192, 1), (true, true)),
                (DType::F16, (100, 8192, 1), (false, true)),
                (DType::F32, (128, 384, 1), (true, true)),
                (DType::F32, (20, 20, 3), (true, false)),
            ] {
                let key = tiled_key(&target, dtype, mn, fast, String::new(), "%x");
                compiler
                    .module(&key.source())
                    .and_then(|m| m.compile_uncached(&Specialization::new("@matmul")))
                    .unwrap_or_else(|e| panic!("{} {dtype} {mn:?}: {e}", target.name));
            }
        }
    }
}
