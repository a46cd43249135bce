//! Split-k decode matmul on cooperative matrices for few rows (up to 64):
//! many workgroups stream disjoint pieces of B (column slab x k range)
//! into f32 partial sums, which a second kernel sums with bias and
//! activation. See `kernels/matmul_coop_splitk.loom` and
//! `kernels/matmul_splitk_reduce.loom`.

mod tiles;

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
use tiles::Tile;

const SPLITK: &str = include_str!("../../kernels/matmul_coop_splitk.loom");
const REDUCE: &str = include_str!("../../kernels/matmul_splitk_reduce.loom");

/// Most rows of A the kernel covers.
const SPLITK_MAX_ROWS: usize = 64;
/// Columns per workgroup: one 16-column fragment for each of the four
/// subgroups of a row group.
const BN: usize = 64;
/// Column fragments per workgroup (one per subgroup of a row group).
const COL_FRAGS: usize = BN / 16;
/// Work items to aim for: about eight workgroups of 128 per SM on a
/// 132-SM GPU, so each SM has enough loads of B in flight to cover DRAM
/// latency.
const WANT_THREADS: usize = 1024 * 128;
/// The scratch (written and read back once) is at most B's bytes over
/// this.
const SCRATCH_SHARE: usize = 8;
/// Splits up to which the reduction's loop is unrolled (all loads in
/// flight at once).
const REDUCE_UNROLL: usize = 32;

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

/// The kernel's shape apart from the matrix sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    /// Row groups: the subgroups are `groups x 4`, each multiplying
    /// `mp / 16 / groups` row fragments by one column fragment.
    groups: usize,
    /// k rows staged per step.
    bk: usize,
    /// Splits of k; 0 picks them from the workgroups wanted.
    splits: usize,
    /// Whether the global loads of step t + 1 are issued before the
    /// fragments of step t are multiplied.
    prefetch: bool,
}

/// The built-in shape for `mp` padded rows: up to 32 rows four subgroups
/// of all row fragments; 64 rows eight subgroups of two row fragments
/// each (half the accumulators and staged copies per work item of four
/// subgroups, so as many work items stay resident).
fn shape_for(mp: usize) -> Shape {
    Shape {
        groups: if mp == 64 { 2 } else { 1 },
        bk: 64,
        splits: 0,
        prefetch: true,
    }
}

/// `HRX_SPLITK=groups,bk,splits,prefetch` (prefetch 0 or 1, splits 0 for
/// automatic), read once: forces the shape for tuning on a device; ignored
/// unless well-formed and valid for the matmul.
fn forced_shape() -> Option<Shape> {
    static FORCED: std::sync::OnceLock<Option<Shape>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        let text = std::env::var("HRX_SPLITK").ok()?;
        let v: Vec<usize> = text
            .split(',')
            .map(|d| d.trim().parse().ok())
            .collect::<Option<_>>()?;
        let [groups, bk, splits, prefetch]: [usize; 4] = v.try_into().ok()?;
        Some(Shape {
            groups,
            bk,
            splits,
            prefetch: prefetch != 0,
        })
    })
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
    groups: usize,
    bk: usize,
    prefetch: bool,
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
    dims: (usize, usize, usize, usize),
    a: &BLayout,
    b: &BLayout,
) -> Option<SplitK> {
    let mp = dims.0.div_ceil(16) * 16;
    forced_shape()
        .and_then(|shape| plan_with(target, coop, dims, (a, b), shape))
        .or_else(|| plan_with(target, coop, dims, (a, b), shape_for(mp)))
}

fn plan_with(
    target: &Target,
    coop: bool,
    (m, n, k, batch): (usize, usize, usize, usize),
    (a, b): (&BLayout, &BLayout),
    shape: Shape,
) -> Option<SplitK> {
    let sg = target.subgroup_size_max as usize;
    if !coop || m == 0 || m > SPLITK_MAX_ROWS || k == 0 || n == 0 || batch == 0 || sg == 0 {
        return None;
    }
    let Shape {
        groups, bk, splits, ..
    } = shape;
    let mp = m.div_ceil(16) * 16;
    if groups == 0 || !(mp / 16).is_multiple_of(groups) || bk == 0 || !bk.is_multiple_of(16) {
        return None;
    }
    let mut plan = SplitK {
        mp,
        splits: 1,
        ks: bk,
        npad: n.div_ceil(BN) * BN,
        sg,
        groups,
        bk,
        prefetch: shape.prefetch,
        a: tile_load(a),
        b: tile_load(b),
    };
    let threads = plan.threads();
    let fits = threads as u32 <= target.max_workgroup_invocations
        && threads as u32 <= target.max_workgroup_size[0]
        && plan.shared_bytes() as u64 <= u64::from(target.workgroup_memory_bytes);
    if !plan.tile_a().fits() || !plan.tile_b().fits() || !fits {
        return None;
    }
    let steps = k.div_ceil(bk);
    let slabs = (plan.npad / BN) * batch;
    let wanted = if splits > 0 {
        splits
    } else {
        // Enough splits for the wanted work items, the scratch at most a
        // share of B's bytes.
        let want = (WANT_THREADS / threads).div_ceil(slabs);
        let cap = (k * n * 2 / SCRATCH_SHARE / (mp * plan.npad * 4)).max(1);
        want.min(cap)
    };
    let per_split = steps.div_ceil(wanted.clamp(1, steps));
    plan.splits = steps.div_ceil(per_split);
    plan.ks = per_split * bk;
    let scratch = batch
        .checked_mul(plan.splits)?
        .checked_mul(mp)?
        .checked_mul(plan.npad)?;
    u32::try_from(scratch).ok()?;
    Some(plan)
}

impl SplitK {
    fn threads(&self) -> usize {
        self.groups * COL_FRAGS * self.sg
    }

    fn tile_a(&self) -> Tile {
        Tile {
            name: "a",
            rows: self.mp,
            cols: self.bk,
            load: self.a,
            threads: self.threads(),
            sg: self.sg,
        }
    }

    fn tile_b(&self) -> Tile {
        Tile {
            name: "b",
            rows: self.bk,
            cols: BN,
            load: self.b,
            threads: self.threads(),
            sg: self.sg,
        }
    }

    /// Workgroup memory: the A and B tiles (rows padded by 8 halves).
    fn shared_bytes(&self) -> usize {
        (self.mp * (self.bk + 8) + self.bk * (BN + 8)) * 2
    }

    /// Per-work-item lines of A's global addressing (after its tile
    /// setup): `%aokr_{u}` says copy `u`'s row is inside A; quads get the
    /// quad index of the row's start `%ap_{u}`, elements the element index
    /// `%apr_{u}`.
    fn setup_a(&self) -> String {
        let quad = self.a == TileLoad::Quad;
        let mut l = String::new();
        if quad {
            l += "  %samq = index.div %sam, %cq : index\n  %baseaq = index.div %basea, %cq : index\n";
        }
        for u in 0..self.tile_a().slots() {
            l += &if quad {
                format!(
                    "  %aokr_{u} = index.cmp ult, %a_r{u}, %m : index
  %ap0_{u} = index.madd %a_r{u}, %samq, %baseaq : index
  %ap_{u} = index.add %ap0_{u}, %a_g : index
"
                )
            } else {
                format!(
                    "  %aokr_{u} = index.cmp ult, %ar_{u}, %m : index
  %apr_{u} = index.madd %ar_{u}, %sam, %basea : index
"
                )
            };
        }
        l
    }

    /// B's: `%bokc`/`%bokc_{u}` says the column is inside B; quads get the
    /// quad index of copy `u` at k = 0 of the whole matrix, `%bw0_{u}`;
    /// elements the column's element index `%bpc_{u}`.
    fn setup_b(&self) -> String {
        let mut l = String::new();
        if self.b == TileLoad::Quad {
            l += "  %sbkq = index.div %sbk, %cq : index
  %b_gc = index.add %col0, %b_col : index
  %bokc = index.cmp ult, %b_gc, %n : index
  %b_gh = index.add %baseb, %b_gc : index
  %b_gq = index.div %b_gh, %cq : index
";
            for u in 0..self.tile_b().slots() {
                l += &format!("  %bw0_{u} = index.madd %b_r{u}, %sbkq, %b_gq : index\n");
            }
        } else {
            for u in 0..self.tile_b().slots() {
                l += &format!(
                    "  %bgc_{u} = index.add %col0, %bc_{u} : index
  %bokc_{u} = index.cmp ult, %bgc_{u}, %n : index
  %bpc_{u} = index.madd %bgc_{u}, %sbn, %baseb : index
"
                );
            }
        }
        l
    }

    /// The global loads of the tiles at k offset `k0` into `%ax{s}_{u}`
    /// and `%bx{s}_{u}` (zero outside the matrices and past the split).
    fn fetch(&self, s: &str, k0: &str) -> String {
        let mut l = String::new();
        if self.a == TileLoad::Quad {
            l += &format!(
                "    %agk{s} = index.add {k0}, %a_col : index
    %aokk{s} = index.cmp ult, %agk{s}, %kend : index
    %akq{s} = index.div {k0}, %cq : index
"
            );
        }
        for u in 0..self.tile_a().slots() {
            l += &match self.a {
                TileLoad::Quad => format!(
                    "    %aok{s}_{u} = scalar.andi %aokr_{u}, %aokk{s} : i1
    %ax{s}_{u} = scf.if %aok{s}_{u} -> (vector<4xu32>) {{
      %aq{s}_{u} = index.add %ap_{u}, %akq{s} : index
      %aw{s}_{u} = index.mul %aq{s}_{u}, %c4 : index
      %av{s}_{u} = vector.load %av[%aw{s}_{u}] : view<[%law]xu32> -> vector<4xu32>
      scf.yield %av{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}
"
                ),
                TileLoad::Scalar { .. } => format!(
                    "    %agk{s}_{u} = index.add {k0}, %ac_{u} : index
    %aokk{s}_{u} = index.cmp ult, %agk{s}_{u}, %kend : index
    %aok{s}_{u} = scalar.andi %aokr_{u}, %aokk{s}_{u} : i1
    %ax{s}_{u} = scf.if %aok{s}_{u} -> (f16) {{
      %ap{s}_{u} = index.madd %agk{s}_{u}, %sak, %apr_{u} : index
      %av{s}_{u} = view.load %av[%ap{s}_{u}] : view<[%la]xf16> -> f16
      scf.yield %av{s}_{u} : f16
    }} else {{
      scf.yield %hzero : f16
    }}
"
                ),
            };
        }
        if self.b == TileLoad::Quad {
            l += &format!("    %bkw{s} = index.mul {k0}, %sbkq : index\n");
        }
        for u in 0..self.tile_b().slots() {
            l += &match self.b {
                TileLoad::Quad => format!(
                    "    %bgk{s}_{u} = index.add {k0}, %b_r{u} : index
    %bokk{s}_{u} = index.cmp ult, %bgk{s}_{u}, %kend : index
    %bok{s}_{u} = scalar.andi %bokk{s}_{u}, %bokc : i1
    %bx{s}_{u} = scf.if %bok{s}_{u} -> (vector<4xu32>) {{
      %bq{s}_{u} = index.add %bw0_{u}, %bkw{s} : index
      %bw{s}_{u} = index.mul %bq{s}_{u}, %c4 : index
      %bv{s}_{u} = vector.load %bv[%bw{s}_{u}] : view<[%lbw]xu32> -> vector<4xu32>
      scf.yield %bv{s}_{u} : vector<4xu32>
    }} else {{
      scf.yield %uz4 : vector<4xu32>
    }}
"
                ),
                TileLoad::Scalar { .. } => format!(
                    "    %bgk{s}_{u} = index.add {k0}, %br_{u} : index
    %bokk{s}_{u} = index.cmp ult, %bgk{s}_{u}, %kend : index
    %bok{s}_{u} = scalar.andi %bokk{s}_{u}, %bokc_{u} : i1
    %bx{s}_{u} = scf.if %bok{s}_{u} -> (f16) {{
      %bp{s}_{u} = index.madd %bgk{s}_{u}, %sbk, %bpc_{u} : index
      %bv{s}_{u} = view.load %bv[%bp{s}_{u}] : view<[%lb]xf16> -> f16
      scf.yield %bv{s}_{u} : f16
    }} else {{
      scf.yield %hzero : f16
    }}
"
                ),
            };
        }
        l
    }

    /// The kernel's template substitutions.
    fn substitutions(&self) -> Vec<(&'static str, String)> {
        let (mp, bk, threads) = (self.mp, self.bk, self.threads());
        let (ta, tb) = (self.tile_a(), self.tile_b());
        let (ty_a, ty_b) = (ta.ty(), tb.ty());
        // Row fragments per subgroup.
        let mf = mp / 16 / self.groups;
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
        // Subgroup g takes column fragment g % 4 and row group g / 4.
        let mut prep = format!(
            "  %cq = index.constant 8 : index
  %c4 = index.constant 4 : index
  %uzs = scalar.constant 0 : u32
  %uz4 = vector.splat %uzs : u32 -> vector<4xu32>
  %sgc = index.rem %sg, %c4 : index
  %fcol = index.mul %sgc, %cfn : index
  %sgr = index.div %sg, %c4 : index
  %crg = index.constant {} : index
  %frow = index.mul %sgr, %crg : index
",
            16 * mf
        );
        for p in 0..4 {
            prep += &format!(
                "  %l{p} = index.constant {p} : index\n  %ce{p} = index.constant {} : index\n",
                2 * p
            );
        }
        prep += &ta.setup();
        prep += &tb.setup();
        prep += &self.setup_a();
        prep += &self.setup_b();

        let ty_c = "coopmat<16x16xf32, c>";
        let frags: Vec<usize> = (0..mf).collect();
        let mut zeros = vec!["  %fco_0 = index.add %fcol, %c0 : index".to_string()];
        for i in &frags {
            zeros.push(format!(
                "  %froc_{i} = index.constant {} : index
  %fro_{i} = index.add %frow, %froc_{i} : index
  %z_{i} = coop.zero : {ty_c}",
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
        let ksteps = bk / 16;
        let mut body = vec![];
        for s in 0..ksteps {
            body.push(format!(
                "    %ko_{s} = index.constant {} : index
    %fb_{s} = coop.load<row_major> %tb[%ko_{s}, %fco_0] : {ty_b} -> coopmat<16x16xf16, b>",
                16 * s
            ));
            for &i in &frags {
                body.push(format!(
                    "    %fa_{s}_{i} = coop.load<row_major> %ta[%fro_{i}, %ko_{s}] : {ty_a} -> coopmat<16x16xf16, a>
    {} = coop.mma %fa_{s}_{i}, %fb_{s}, {} : coopmat<16x16xf16, a>, coopmat<16x16xf16, b>, {ty_c}",
                    name(i, s + 1),
                    name(i, s)
                ));
            }
        }
        let body = body.join("\n");
        let barrier = "    kernel.barrier<workgroup> scope(workgroup) ordering(acq_rel)\n";
        let stores = |s: &str| ta.store(s) + &tb.store(s);
        // Pipelined: the split's first step before the loop, each
        // iteration loading the next; else load, store and multiply in turn.
        let (prologue, looped) = if self.prefetch {
            (
                format!("{}{}{barrier}", self.fetch("p", "%kbeg"), stores("p")),
                format!(
                    "    %kn = index.madd %t1, %cbk, %kbeg : index
{}{body}\n{barrier}{}{barrier}",
                    self.fetch("l", "%kn"),
                    stores("l")
                ),
            )
        } else {
            (
                String::new(),
                format!(
                    "    %kn = index.madd %t, %cbk, %kbeg : index
{}{}{barrier}{body}\n{barrier}",
                    self.fetch("l", "%kn"),
                    stores("l")
                ),
            )
        };
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
        let list = |f: &dyn Fn(usize) -> String| {
            frags.iter().map(|&i| f(i)).collect::<Vec<_>>().join(", ")
        };
        vec![
            ("BN", BN.to_string()),
            ("BN1", (BN - 1).to_string()),
            ("BK", bk.to_string()),
            ("BK1", (bk - 1).to_string()),
            ("MP", mp.to_string()),
            ("THREADS", threads.to_string()),
            ("FNC", "16".into()),
            ("A_BYTES", (mp * (bk + 8) * 2).to_string()),
            ("B_BYTES", (bk * (BN + 8) * 2).to_string()),
            ("TA", ty_a),
            ("TB", ty_b),
            ("AVIEW", view("a", "la", self.a)),
            ("BVIEW", view("b", "lb", self.b)),
            ("PREP", prep),
            ("ZEROS", zeros.join("\n")),
            ("CARRIED", list(&|i| format!("%cc_{i} = %z_{i} : {ty_c}"))),
            ("TYPES", list(&|_| ty_c.to_string())),
            ("RESULTS", list(&|i| format!("%res_{i}"))),
            ("YIELDS", list(&|i| name(i, ksteps))),
            ("PROLOGUE", prologue),
            ("LOOP", looped),
            ("EPILOGUE", epilogue.join("\n")),
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

/// The reduction for `splits` partial sums: unrolled up to
/// [`REDUCE_UNROLL`] (every load issued at once), a loop beyond.
fn reduce_key(act: String, result: &str, splits: usize) -> KernelKey {
    let sum = if splits <= REDUCE_UNROLL {
        let mut l = String::from(
            "    %p_0 = index.add %p0, %c0 : index
    %v_0 = view.load %wv[%p_0] : view<[%lw]xf32> -> f32
    %s_0 = scalar.addf %rd_zf, %v_0 : f32
",
        );
        for q in 1..splits {
            l += &format!(
                "    %p_{q} = index.add %p_{}, %plane : index
    %v_{q} = view.load %wv[%p_{q}] : view<[%lw]xf32> -> f32
    %s_{q} = scalar.addf %s_{}, %v_{q} : f32
",
                q - 1,
                q - 1
            );
        }
        l + &format!("    %sum = scalar.addf %s_{}, %rd_zf : f32", splits - 1)
    } else {
        "    %sum = scf.for %q = [%c0 to %splits step %c1](%acc = %rd_zf : f32) -> (f32) {
      %p = index.madd %q, %plane, %p0 : index
      %v = view.load %wv[%p] : view<[%lw]xf32> -> f32
      %acc2 = scalar.addf %acc, %v : f32
      scf.yield %acc2 : f32
    }"
        .to_string()
    };
    KernelKey {
        template: REDUCE,
        substitutions: vec![("ACT", act), ("R", result.to_string()), ("SUM", sum)],
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
        let kernel = self.registry.kernel(reduce_key(act, result, splits))?;
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
    Some((
        plan.key().source(),
        reduce_key(act, result, plan.splits).source(),
    ))
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
        for (m, splits, groups) in [(16, 16, 1), (32, 8, 1), (64, 4, 2)] {
            let p = plan(m, 4096, 4096, 1).unwrap();
            assert_eq!((p.mp, p.splits, p.npad), (m, splits, 4096), "m={m}");
            assert_eq!((p.groups, p.threads()), (groups, 128 * groups), "m={m}");
            assert_eq!(p.ks * p.splits, 4096);
            assert!(64 * p.splits * p.threads() >= 512 * 128);
            assert!(p.splits * p.mp * p.npad * 4 <= 4096 * 4096 * 2 / 8);
            assert_eq!((p.a, p.b), (TileLoad::Quad, TileLoad::Quad));
        }
    }

    #[test]
    fn partial_shapes_cover_k_and_n() {
        let p = plan(24, 520, 1000, 3).unwrap();
        assert_eq!((p.mp, p.npad), (32, 576));
        assert!(p.ks.is_multiple_of(p.bk) && p.ks * p.splits >= 1000);
        assert!(p.ks * (p.splits - 1) < 1000);
        // A single step of k still gets one split.
        let p = plan(9, 16, 1, 1).unwrap();
        assert_eq!((p.splits, p.ks), (1, p.bk));
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

    /// Every shape the tuning override can pick (row groups, step depth,
    /// pipelining) with both load kinds compiles for the H200 target
    /// (naga validates each module; tests/matmul_splitk.rs runs spirv-val
    /// on the built-in shapes).
    #[test]
    fn every_shape_compiles_for_hopper() {
        let t = Target::hopper();
        let compiler = hrx_loom::Compiler::for_target(None, &t).unwrap();
        let (quad, odd, tr) = (
            layout(4096, 1, 4096),
            layout(4095, 1, 4095),
            layout(1, 4096, 4096),
        );
        let mut compiled = 0;
        for m in [16, 32, 48, 64] {
            for groups in [1, 2, 4] {
                for bk in [32, 64, 128] {
                    for prefetch in [false, true] {
                        let shape = Shape {
                            groups,
                            bk,
                            splits: 0,
                            prefetch,
                        };
                        for (a, b) in [(&quad, &quad), (&odd, &tr)] {
                            let Some(p) = plan_with(&t, true, (m, 4096, 4096, 1), (a, b), shape)
                            else {
                                continue;
                            };
                            compiler
                                .module(&p.key().source())
                                .and_then(|module| {
                                    module.compile_uncached(&hrx_loom::Specialization::new(
                                        "@matmul_splitk",
                                    ))
                                })
                                .unwrap_or_else(|e| panic!("m={m} {shape:?} {:?}: {e}", p.a));
                            compiled += 1;
                        }
                    }
                }
            }
        }
        assert!(compiled >= 40, "{compiled}");
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
    /// 3 splits (unrolled) and of 40 (looped), 2 batches, m = 5 of 16
    /// padded rows, n = 70 of 128 padded columns, with bias and relu.
    #[test]
    fn reduce_sums_splits_adds_bias_and_activation() {
        for splits in [3, 40] {
            reduce_case(splits);
        }
    }

    fn reduce_case(splits: usize) {
        let runtime = Runtime::new().unwrap();
        let ops = Ops::new(&runtime);
        let (m, n, batch, mp, npad) = (5, 70, 2, 16, 128);
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
                    assert!(
                        (g - want).abs() < 1e-4,
                        "splits={splits} ({b}, {i}, {j}): {g} vs {want}"
                    );
                }
            }
        }
    }
}
