//! Split-k decode matmul on cooperative matrices for few rows (up to 64):
//! many workgroups stream disjoint pieces of B (column slab x k range)
//! into f32 partial sums, which a second kernel sums with bias and
//! activation. See `kernels/matmul_coop_splitk.loom` and
//! `kernels/matmul_splitk_reduce.loom`.

use super::{
    Ops,
    matmul_gemv::{BLayout, BLoad, b_load},
    operand::{Operand, operand},
    registry::KernelKey,
};
use crate::{DType, TensorDesc};
use hrx_core::{Error, Result, Target};
use hrx_loom::ScalarValue;
use hrx_runtime::Graph;

const SPLITK: &str = include_str!("../../kernels/matmul_coop_splitk.loom");
const REDUCE: &str = include_str!("../../kernels/matmul_splitk_reduce.loom");

/// Most rows of A the kernel covers (four row fragments per subgroup).
const SPLITK_MAX_ROWS: usize = 64;
/// Columns per workgroup: one 16-column fragment for each of [`SGN`]
/// subgroups.
const BN: usize = 64;
/// k rows staged per step.
const BK: usize = 64;
/// Subgroups per workgroup.
const SGN: usize = 4;
/// Workgroups to aim for: about eight per SM on a 132-SM GPU, so each SM
/// has enough loads of B in flight to cover DRAM latency.
const WANT_WORKGROUPS: usize = 1024;

/// How a workgroup reads one operand's tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TileLoad {
    /// 16-byte loads of 8 consecutive f16 along the tile's inner axis.
    Quad,
    /// One f16 per load; `inner_fast` when consecutive work items should
    /// take consecutive elements of the tile's inner axis (the operand is
    /// contiguous along it).
    Scalar { inner_fast: bool },
}

/// The split-k plan for one matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SplitK {
    /// Rows of A rounded up to whole 16-row fragments.
    pub(crate) mp: usize,
    /// k ranges, each `ks` long (a multiple of the step), the last shorter.
    pub(crate) splits: usize,
    pub(crate) ks: usize,
    /// Columns of the scratch: n rounded up to whole workgroup slabs.
    pub(crate) npad: usize,
    /// Invocations per subgroup.
    sg: usize,
    a: TileLoad,
    b: TileLoad,
}

fn tile_load(layout: &BLayout) -> TileLoad {
    match b_load(DType::F16, layout) {
        BLoad::Quad16 => TileLoad::Quad,
        _ => TileLoad::Scalar {
            inner_fast: layout.n_stride == 1,
        },
    }
}

/// The split-k plan for `m x k` A (`a` describes it with k as its
/// columns, i.e. `n` = k and `n_stride` the k stride) and `k x n` B over
/// `batch`, or `None` when the kernel does not apply: no 16x16x16 f16 ->
/// f32 shape or a variable subgroup size (`coop` false), more than 64 rows,
/// no k, loads that do not divide evenly among the work items, or a
/// scratch beyond 32-bit indices.
pub(crate) fn splitk_plan(
    target: &Target,
    coop: bool,
    (m, n, k, batch): (usize, usize, usize, usize),
    a: &BLayout,
    b: &BLayout,
) -> Option<SplitK> {
    let sg = target.subgroup_size_max as usize;
    if !coop || m == 0 || m > SPLITK_MAX_ROWS || k == 0 || n == 0 || batch == 0 || sg == 0 {
        return None;
    }
    let threads = SGN * sg;
    let mp = m.div_ceil(16) * 16;
    let (a_load, b_load) = (tile_load(a), tile_load(b));
    let per_load = |load: TileLoad| if load == TileLoad::Quad { 8 } else { 1 };
    let even = (mp * BK / per_load(a_load)).is_multiple_of(threads)
        && (BK * BN / per_load(b_load)).is_multiple_of(threads);
    let fits = threads as u32 <= target.max_workgroup_invocations
        && threads as u32 <= target.max_workgroup_size[0]
        && shared_bytes(mp) as u64 <= u64::from(target.workgroup_memory_bytes);
    if !even || !fits {
        return None;
    }
    let npad = n.div_ceil(BN) * BN;
    let steps = k.div_ceil(BK);
    let slabs = (npad / BN) * batch;
    // Enough splits for the wanted workgroups, but the scratch (written
    // and read back once) at most a quarter of B's bytes.
    let want = WANT_WORKGROUPS.div_ceil(slabs);
    let cap = (k * n * 2 / 4 / (mp * npad * 4)).max(1);
    let per_split = steps.div_ceil(want.min(cap).clamp(1, steps));
    let splits = steps.div_ceil(per_split);
    let scratch = batch
        .checked_mul(splits)?
        .checked_mul(mp)?
        .checked_mul(npad)?;
    u32::try_from(scratch).ok()?;
    Some(SplitK {
        mp,
        splits,
        ks: per_split * BK,
        npad,
        sg,
        a: a_load,
        b: b_load,
    })
}

/// Workgroup memory of the kernel for `mp` rows: the A and B tiles (rows
/// padded by 8 halves).
fn shared_bytes(mp: usize) -> usize {
    mp * (BK + 8) * 2 + BK * (BN + 8) * 2
}

impl SplitK {
    fn threads(&self) -> usize {
        SGN * self.sg
    }

    /// The kernel's template substitutions.
    fn substitutions(&self) -> Vec<(&'static str, String)> {
        let (mp, threads) = (self.mp, self.threads());
        let (pa, pb) = (BK + 8, BN + 8);
        let ta = format!("view<{mp}x{pa}xf16>");
        let tb = format!("view<{BK}x{pb}xf16>");
        let mf = mp / 16;
        let mut prep = vec![
            "  %cq = index.constant 8 : index".to_string(),
            "  %c4 = index.constant 4 : index".into(),
            "  %uzs = scalar.constant 0 : u32".into(),
            "  %uz4 = vector.splat %uzs : u32 -> vector<4xu32>".into(),
            format!("  %caq = index.constant {} : index", BK / 8),
            format!("  %cbq = index.constant {} : index", BN / 8),
        ];
        prep.extend((0..4).map(|p| format!("  %l{p} = index.constant {p} : index")));
        prep.extend((0..4).map(|p| format!("  %ce{p} = index.constant {} : index", 2 * p)));
        let view = |name: &str, len: &str, load: TileLoad| match load {
            TileLoad::Quad => format!(
                "  %{name}_two = index.constant 2 : index
  %{len}w = index.div %{len}, %{name}_two : index
  %{name}v = buffer.view %{name}[%zero] : buffer -> view<[%{len}w]xu32>"
            ),
            TileLoad::Scalar { .. } => {
                format!("  %{name}v = buffer.view %{name}[%zero] : buffer -> view<[%{len}]xf16>")
            }
        };
        if self.a == TileLoad::Quad {
            prep.push("  %samq = index.div %sam, %cq : index".into());
            prep.push("  %baseaq = index.div %basea, %cq : index".into());
        }
        if self.b == TileLoad::Quad {
            prep.push("  %sbkq = index.div %sbk, %cq : index".into());
            prep.push("  %basebq = index.div %baseb, %cq : index".into());
        }
        // Copy positions are fixed per work item, so they are computed once
        // here; `stage` then gives the loads of the tiles at a k offset and
        // their stores (the prologue at the split's first step, the loop's
        // prefetch at the next step).
        let a_count = mp * BK / if self.a == TileLoad::Quad { 8 } else { 1 };
        let b_count = BK * BN / if self.b == TileLoad::Quad { 8 } else { 1 };
        let (a_slots, b_slots) = (a_count / threads, b_count / threads);
        // A: the tile is mp x BK, its inner axis k.
        for u in 0..a_slots {
            prep.push(format!(
                "  %acu_{u} = index.constant {} : index
  %ae_{u} = index.add %tid, %acu_{u} : index",
                u * threads
            ));
            prep.push(match self.a {
                TileLoad::Quad => format!(
                    "  %ar_{u} = index.div %ae_{u}, %caq : index
  %aq_{u} = index.rem %ae_{u}, %caq : index
  %ac_{u} = index.mul %aq_{u}, %cq : index
  %ap_{u} = index.madd %ar_{u}, %samq, %baseaq : index"
                ),
                TileLoad::Scalar { inner_fast } => format!(
                    "{}\n  %apr_{u} = index.madd %ar_{u}, %sam, %basea : index",
                    pos(inner_fast, "a", u, "%cmp", "%cbk")
                ),
            });
            prep.push(format!("  %aokr_{u} = index.cmp ult, %ar_{u}, %m : index"));
        }
        // B: the tile is BK x BN, its inner axis n.
        for u in 0..b_slots {
            prep.push(format!(
                "  %bcu_{u} = index.constant {} : index
  %be_{u} = index.add %tid, %bcu_{u} : index",
                u * threads
            ));
            prep.push(match self.b {
                TileLoad::Quad => format!(
                    "  %br_{u} = index.div %be_{u}, %cbq : index
  %bq_{u} = index.rem %be_{u}, %cbq : index
  %bc_{u} = index.mul %bq_{u}, %cq : index"
                ),
                TileLoad::Scalar { inner_fast } => pos(inner_fast, "b", u, "%cbk", "%cbn"),
            });
            prep.push(format!(
                "  %bgc_{u} = index.add %col0, %bc_{u} : index
  %bokc_{u} = index.cmp ult, %bgc_{u}, %n : index"
            ));
            prep.push(match self.b {
                TileLoad::Quad => format!(
                    "  %bcq_{u} = index.div %bgc_{u}, %cq : index
  %bcb_{u} = index.add %basebq, %bcq_{u} : index"
                ),
                TileLoad::Scalar { .. } => {
                    format!("  %bpc_{u} = index.madd %bgc_{u}, %sbn, %baseb : index")
                }
            });
        }
        let stage = |s: &str, k0: &str| {
            let (mut load, mut store) = (vec![], vec![]);
            for u in 0..a_slots {
                load.push(format!(
                    "    %agk{s}_{u} = index.add {k0}, %ac_{u} : index
    %aokk{s}_{u} = index.cmp ult, %agk{s}_{u}, %kend : index
    %aok{s}_{u} = scalar.andi %aokr_{u}, %aokk{s}_{u} : i1"
                ));
                match self.a {
                    TileLoad::Quad => {
                        load.push(format!(
                            "    %ax{s}_{u} = scf.if %aok{s}_{u} -> (vector<4xu32>) {{
      %akq{s}_{u} = index.div %agk{s}_{u}, %cq : index
      %aq2{s}_{u} = index.add %ap_{u}, %akq{s}_{u} : index
      %aw{s}_{u} = index.mul %aq2{s}_{u}, %c4 : index
      %av{s}_{u} = vector.load %av[%aw{s}_{u}] : view<[%law]xu32> -> vector<4xu32>
      scf.yield %av{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}"
                        ));
                        store.push(unpacked_stores(&format!("a{s}"), "a", u, ("%ta", &ta)));
                    }
                    TileLoad::Scalar { .. } => {
                        load.push(format!(
                            "    %ax{s}_{u} = scf.if %aok{s}_{u} -> (f16) {{
      %ap{s}_{u} = index.madd %agk{s}_{u}, %sak, %apr_{u} : index
      %av{s}_{u} = view.load %av[%ap{s}_{u}] : view<[%la]xf16> -> f16
      scf.yield %av{s}_{u} : f16
    }} else {{
      scf.yield %hzero : f16
    }}"
                        ));
                        store.push(format!(
                            "    view.store %ax{s}_{u}, %ta[%ar_{u}, %ac_{u}] : f16, {ta}"
                        ));
                    }
                }
            }
            for u in 0..b_slots {
                load.push(format!(
                    "    %bgk{s}_{u} = index.add {k0}, %br_{u} : index
    %bokk{s}_{u} = index.cmp ult, %bgk{s}_{u}, %kend : index
    %bok{s}_{u} = scalar.andi %bokk{s}_{u}, %bokc_{u} : i1"
                ));
                match self.b {
                    TileLoad::Quad => {
                        load.push(format!(
                            "    %bx{s}_{u} = scf.if %bok{s}_{u} -> (vector<4xu32>) {{
      %bq2{s}_{u} = index.madd %bgk{s}_{u}, %sbkq, %bcb_{u} : index
      %bw{s}_{u} = index.mul %bq2{s}_{u}, %c4 : index
      %bv{s}_{u} = vector.load %bv[%bw{s}_{u}] : view<[%lbw]xu32> -> vector<4xu32>
      scf.yield %bv{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}"
                        ));
                        store.push(unpacked_stores(&format!("b{s}"), "b", u, ("%tb", &tb)));
                    }
                    TileLoad::Scalar { .. } => {
                        load.push(format!(
                            "    %bx{s}_{u} = scf.if %bok{s}_{u} -> (f16) {{
      %bp{s}_{u} = index.madd %bgk{s}_{u}, %sbk, %bpc_{u} : index
      %bv{s}_{u} = view.load %bv[%bp{s}_{u}] : view<[%lb]xf16> -> f16
      scf.yield %bv{s}_{u} : f16
    }} else {{
      scf.yield %hzero : f16
    }}"
                        ));
                        store.push(format!(
                            "    view.store %bx{s}_{u}, %tb[%br_{u}, %bc_{u}] : f16, {tb}"
                        ));
                    }
                }
            }
            (load.join("\n"), store.join("\n"))
        };
        let (pro_load, pro_store) = stage("p", "%kbeg");
        let (pre_load, pre_store) = stage("l", "%kn");
        let ty_c = "coopmat<16x16xf32, c>";
        let frags: Vec<usize> = (0..mf).collect();
        let mut zeros = vec!["  %fco_0 = index.add %fcol, %c0 : index".to_string()];
        for i in &frags {
            zeros.push(format!(
                "  %fro_{i} = index.constant {} : index\n  %z_{i} = coop.zero : {ty_c}",
                16 * i
            ));
        }
        let name = |i: usize, s: usize| {
            if s == 0 {
                format!("%cc_{i}")
            } else {
                format!("%acc_{i}_{s}")
            }
        };
        let steps = BK / 16;
        let mut body = vec![];
        for s in 0..steps {
            body.push(format!(
                "    %ko_{s} = index.constant {} : index
    %fb_{s} = coop.load<row_major> %tb[%ko_{s}, %fco_0] : {tb} -> coopmat<16x16xf16, b>",
                16 * s
            ));
            for &i in &frags {
                body.push(format!(
                    "    %fa_{s}_{i} = coop.load<row_major> %ta[%fro_{i}, %ko_{s}] : {ta} -> coopmat<16x16xf16, a>
    {} = coop.mma %fa_{s}_{i}, %fb_{s}, {} : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, {ty_c}",
                    name(i, s + 1),
                    name(i, s)
                ));
            }
        }
        // The scratch is padded to whole fragments (MP rows per split,
        // NPAD a multiple of BN columns), so the sums go straight to it.
        let epilogue: Vec<String> = frags
            .iter()
            .map(|&i| {
                format!(
                    "  %wr_{i} = index.add %wrow0, %fro_{i} : index
  coop.store<row_major> %res_{i}, %wv[%wr_{i}, %wcol] : {ty_c}, view<[%wrows]x[%npad]xf32>"
                )
            })
            .collect();
        let join = |v: Vec<String>| v.join("\n");
        let list = |f: &dyn Fn(usize) -> String| {
            frags.iter().map(|&i| f(i)).collect::<Vec<_>>().join(", ")
        };
        vec![
            ("BN", BN.to_string()),
            ("BN1", (BN - 1).to_string()),
            ("BK", BK.to_string()),
            ("BK1", (BK - 1).to_string()),
            ("MP", mp.to_string()),
            ("PA", pa.to_string()),
            ("PB", pb.to_string()),
            ("THREADS", threads.to_string()),
            ("FNC", "16".into()),
            ("A_BYTES", (mp * pa * 2).to_string()),
            ("B_BYTES", (BK * pb * 2).to_string()),
            ("AVIEW", view("a", "la", self.a)),
            ("BVIEW", view("b", "lb", self.b)),
            ("PREP", join(prep)),
            ("ZEROS", join(zeros)),
            ("CARRIED", list(&|i| format!("%cc_{i} = %z_{i} : {ty_c}"))),
            ("TYPES", list(&|_| ty_c.to_string())),
            ("RESULTS", list(&|i| format!("%res_{i}"))),
            ("YIELDS", list(&|i| name(i, steps))),
            ("PROLOGUE", format!("{pro_load}\n{pro_store}")),
            ("PREFETCH", pre_load),
            ("STAGE", pre_store),
            ("BODY", join(body)),
            ("EPILOGUE", join(epilogue)),
        ]
    }

    fn key(&self) -> KernelKey {
        KernelKey {
            template: SPLITK,
            substitutions: self.substitutions(),
            symbol: "matmul_splitk",
            config: Vec::new(),
        }
    }
}

/// Lines mapping load slot `%{p}e_{u}` to tile row `%{p}r_{u}` and column
/// `%{p}c_{u}` of a `rows x cols` tile (constants named by `rows`,
/// `cols`): consecutive slots along the columns when `inner_fast`.
fn pos(inner_fast: bool, p: &str, u: usize, rows: &str, cols: &str) -> String {
    if inner_fast {
        format!(
            "    %{p}r_{u} = index.div %{p}e_{u}, {cols} : index\n    %{p}c_{u} = index.rem %{p}e_{u}, {cols} : index"
        )
    } else {
        format!(
            "    %{p}r_{u} = index.rem %{p}e_{u}, {rows} : index\n    %{p}c_{u} = index.div %{p}e_{u}, {rows} : index"
        )
    }
}

/// The stores of loaded quad `%{x}x_{u}` (8 halves as 4 words; `x` is
/// the operand's letter and stage) into row `%{p}r_{u}`, columns from
/// `%{p}c_{u}`, of the f16 tile `tile` of type `ty`.
fn unpacked_stores(x: &str, p: &str, u: usize, (tile, ty): (&str, &str)) -> String {
    let v = format!("%{}x{}_{u}", &x[..1], &x[1..]);
    (0..4)
        .map(|q| {
            format!(
                "    %{x}w_{u}_{q} = vector.extract {v}, %l{q} : vector<4xu32> -> u32
    %{x}f_{u}_{q} = vector.unpackf16 %{x}w_{u}_{q} : u32 -> vector<2xf32>
    %{x}h_{u}_{q} = scalar.truncf %{x}f_{u}_{q} : vector<2xf32> -> vector<2xf16>
    %{x}cq_{u}_{q} = index.add %{p}c_{u}, %ce{q} : index
    vector.store %{x}h_{u}_{q}, {tile}[%{p}r_{u}, %{x}cq_{u}_{q}] : vector<2xf16>, {ty}"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn reduce_key(act: String, result: &str) -> KernelKey {
    KernelKey {
        template: REDUCE,
        substitutions: vec![("ACT", act), ("R", result.to_string())],
        symbol: "matmul_splitk_reduce",
        config: Vec::new(),
    }
}

/// One matmul as [`Ops::record_splitk`] takes it: operands bound, element
/// strides as the kernels take them.
pub(crate) struct SplitKCall<'a> {
    pub(crate) operation: &'a str,
    pub(crate) plan: SplitK,
    /// m, n, k and the merged batch.
    pub(crate) dims: (usize, usize, usize, usize),
    /// A and its batch, row and k strides.
    pub(crate) a: (Operand, [usize; 3]),
    /// B and its batch, k and column strides.
    pub(crate) b: (Operand, [usize; 3]),
    /// The bias (or zeros) and its stride.
    pub(crate) bias: (Operand, usize),
    /// The output and its batch stride.
    pub(crate) out: (Operand, usize),
    /// The activation body and its result value, as in matmul.loom.
    pub(crate) act: String,
    pub(crate) result: &'a str,
}

fn index(v: usize) -> ScalarValue {
    ScalarValue::Index(v as u64)
}

impl Ops {
    /// Record the split-k kernel into a scratch of partial sums, allocated
    /// here and kept alive by `graph`, then the reduction into the output.
    pub(crate) fn record_splitk(&self, graph: &mut Graph, call: SplitKCall<'_>) -> Result<()> {
        let SplitKCall {
            operation,
            plan,
            dims: (m, n, k, batch),
            a: (ka, [sab, sam, sak]),
            b: (kb, [sbb, sbk, sbn]),
            bias,
            out,
            act,
            result,
        } = call;
        let target = self.registry.target()?;
        let scratch = self.output(TensorDesc::new(
            DType::F32,
            vec![batch * plan.splits * plan.mp * plan.npad],
        )?)?;
        let kw = operand(&scratch, &target, operation)?;
        if kw.offset != 0 {
            return Err(Error::Message(format!(
                "{operation}: the split-k scratch is not bound at its start"
            )));
        }
        let kernel = self.registry.kernel(plan.key())?;
        let scalars: Vec<ScalarValue> = [m, n, k, plan.ks, sab, sam, sak]
            .map(index)
            .into_iter()
            .chain(ka.scalars())
            .chain([sbb, sbk, sbn].map(index))
            .chain(kb.scalars())
            .chain([plan.splits, plan.npad].map(index))
            .chain([ScalarValue::Index(kw.len)])
            .collect();
        let workload = [n as u64, plan.splits as u64, batch as u64];
        kernel.record(
            graph,
            operation,
            &[ka.view, kb.view, kw.view.clone()],
            &scalars,
            &workload,
        )?;
        self.record_splitk_reduce(
            graph,
            operation,
            (m, n, batch, plan.splits, plan.mp, plan.npad),
            kw,
            bias,
            out,
            (act, result),
        )
    }

    /// Record `out[b, i, j] = act(sum_s w[b, s, i, j] + bias[j])` for a
    /// scratch `w` of `[batch, splits, mp, npad]` f32 (plain loom, runs on
    /// any device).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_splitk_reduce(
        &self,
        graph: &mut Graph,
        operation: &str,
        (m, n, batch, splits, mp, npad): (usize, usize, usize, usize, usize, usize),
        w: Operand,
        (kbias, bias_stride): (Operand, usize),
        (kc, out_batch_stride): (Operand, usize),
        (act, result): (String, &str),
    ) -> Result<()> {
        let kernel = self.registry.kernel(reduce_key(act, result))?;
        let scalars: Vec<ScalarValue> = [m, n, splits, mp, npad]
            .map(index)
            .into_iter()
            .chain([ScalarValue::Index(w.len)])
            .chain([index(bias_stride)])
            .chain(kbias.scalars())
            .chain([index(out_batch_stride)])
            .chain(kc.scalars())
            .collect();
        let workload = [m as u64, n as u64, batch as u64];
        kernel.record(
            graph,
            operation,
            &[w.view, kbias.view, kc.view],
            &scalars,
            &workload,
        )
    }
}

/// The split-k kernel's loom source for `target` and `m` rows with every
/// operand aligned for 16-byte loads (`quad`) or read element by element,
/// and its reduction's source for `activation` (for offline compilation
/// and SPIR-V checks); `None` where the kernel does not apply.
pub fn coop_splitk_source(
    target: &Target,
    m: usize,
    quad: bool,
    activation: Option<super::UnaryOp>,
) -> Option<(String, String)> {
    // Without `quad`: A contiguous along k but of odd length (element
    // loads, consecutive along k), B transposed (element loads along k).
    let layout = |n_stride: usize, n: usize| BLayout {
        k_stride: 4096,
        n_stride,
        batch_stride: 0,
        offset: 0,
        binding_offset: 0,
        n,
    };
    let (a, b) = if quad {
        (layout(1, 4096), layout(1, 4096))
    } else {
        (layout(1, 4095), layout(4096, 4096))
    };
    let coop = super::matmul_coop::coop_tiles(target, m.max(1)).is_some();
    let plan = splitk_plan(target, coop, (m, 4096, 4096, 1), &a, &b)?;
    let (act, result) = match activation {
        None => (String::new(), "%x"),
        Some(op) => (op.body("f32"), "%r"),
    };
    Some((plan.key().source(), reduce_key(act, result).source()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(k_stride: usize, n_stride: usize, n: usize) -> BLayout {
        BLayout {
            k_stride,
            n_stride,
            batch_stride: 0,
            offset: 0,
            binding_offset: 0,
            n,
        }
    }

    fn plan(m: usize, n: usize, k: usize, batch: usize) -> Option<SplitK> {
        splitk_plan(
            &Target::hopper(),
            true,
            (m, n, k, batch),
            &layout(k, 1, k),
            &layout(n, 1, n),
        )
    }

    #[test]
    fn decode_shapes_get_many_workgroups_and_a_small_scratch() {
        for (m, splits) in [(16, 16), (32, 16), (64, 8)] {
            let p = plan(m, 4096, 4096, 1).unwrap();
            assert_eq!((p.mp, p.splits, p.npad), (m, splits, 4096), "m={m}");
            assert_eq!(p.ks * p.splits, 4096);
            assert!(64 * p.splits >= 512);
            assert!(p.splits * p.mp * p.npad * 4 <= 4096 * 4096 * 2 / 4);
            assert_eq!((p.a, p.b), (TileLoad::Quad, TileLoad::Quad));
        }
    }

    #[test]
    fn partial_shapes_cover_k_and_n() {
        let p = plan(24, 520, 1000, 3).unwrap();
        assert_eq!((p.mp, p.npad), (32, 576));
        assert!(p.ks.is_multiple_of(BK) && p.ks * p.splits >= 1000);
        assert!(p.ks * (p.splits - 1) < 1000);
        // A single step of k still gets one split.
        let p = plan(9, 16, 1, 1).unwrap();
        assert_eq!((p.splits, p.ks), (1, BK));
    }

    #[test]
    fn layouts_pick_the_loads() {
        let t = Target::hopper();
        // Transposed B (k contiguous), odd n: element loads along k.
        let p = splitk_plan(
            &t,
            true,
            (20, 33, 50, 1),
            &layout(50, 1, 50),
            &layout(1, 50, 33),
        )
        .unwrap();
        assert_eq!(p.a, TileLoad::Scalar { inner_fast: true });
        assert_eq!(p.b, TileLoad::Scalar { inner_fast: false });
    }

    #[test]
    fn refused_where_it_does_not_apply() {
        let t = Target::hopper();
        let l = layout(64, 1, 64);
        assert!(splitk_plan(&t, false, (16, 64, 64, 1), &l, &l).is_none());
        assert!(splitk_plan(&t, true, (65, 64, 64, 1), &l, &l).is_none());
        assert!(splitk_plan(&t, true, (16, 64, 0, 1), &l, &l).is_none());
    }
}

#[cfg(test)]
mod reduce_tests {
    use super::*;
    use crate::DeviceTensor;
    use hrx_runtime::Runtime;

    /// The reduction on the local device (lavapipe in CI): partial sums of
    /// 3 splits, 2 batches, m = 5 of 16 padded rows, n = 70 of 128 padded
    /// columns, with bias and relu.
    #[test]
    fn reduce_sums_splits_adds_bias_and_activation() {
        let runtime = Runtime::new().unwrap();
        let ops = Ops::new(&runtime);
        let (m, n, batch, splits, mp, npad) = (5, 70, 2, 3, 16, 128);
        let len = batch * splits * mp * npad;
        let w: Vec<f64> = (0..len)
            .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
            .collect();
        let bias: Vec<f64> = (0..n).map(|j| j as f64 / 70.0 - 0.5).collect();
        let tw = DeviceTensor::from_values(&runtime, DType::F32, vec![len], &w).unwrap();
        let tb = DeviceTensor::from_values(&runtime, DType::F32, vec![n], &bias).unwrap();
        let out = ops
            .output(TensorDesc::new(DType::F32, vec![batch, m, n]).unwrap())
            .unwrap();
        let target = ops.registry.target().unwrap();
        let bind = |t: &DeviceTensor| operand(t, &target, "test").unwrap();
        let mut graph = runtime.graph();
        ops.record_splitk_reduce(
            &mut graph,
            "test",
            (m, n, batch, splits, mp, npad),
            bind(&tw),
            (bind(&tb), 1),
            (bind(&out), m * n),
            (super::super::UnaryOp::Relu.body("f32"), "%r"),
        )
        .unwrap();
        graph.prepare().unwrap().submit().unwrap().wait().unwrap();
        let got = out.to_values().unwrap();
        for b in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    let s: f64 = (0..splits)
                        .map(|s| w[((b * splits + s) * mp + i) * npad + j])
                        .sum();
                    let want = (s + bias[j]).max(0.0);
                    let g = got[(b * m + i) * n + j];
                    assert!((g - want).abs() < 1e-5, "({b}, {i}, {j}): {g} vs {want}");
                }
            }
        }
    }
}
