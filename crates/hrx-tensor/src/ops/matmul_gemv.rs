//! The skinny-m (decode) matmul kernel: few rows of A against a streamed B,
//! memory-bound on B. See `kernels/matmul_gemv.loom`.

use super::registry::KernelKey;
use crate::DType;
use hrx_core::{DeviceKind, Target};

const MATMUL_GEMV: &str = include_str!("../../kernels/matmul_gemv.loom");

/// Most rows of A one workgroup accumulates (its accumulators live in
/// registers: `MT * V` per work item).
const MT: usize = 8;

/// Rows of B each work item loads per trip of the main loop.
const UNROLL: usize = 4;

/// Rows per workgroup for `m` rows: the next power of two up to [`MT`],
/// so a single row does no wasted multiply-adds.
fn row_tile(m: usize) -> usize {
    m.next_power_of_two().min(MT)
}

/// How a work item reads its columns of one row of B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BLoad {
    /// f16, one 16-byte load of 4 words = 8 columns, unpacked in pairs.
    Quad16,
    /// f32, one 16-byte load = 4 columns.
    Quad32,
    /// f16, one 4-byte word = 2 columns.
    Word16,
    /// One element addressed by strides (any layout).
    Scalar,
}

impl BLoad {
    /// Columns per load.
    fn width(self) -> usize {
        match self {
            BLoad::Quad16 => 8,
            BLoad::Quad32 => 4,
            BLoad::Word16 => 2,
            BLoad::Scalar => 1,
        }
    }

    /// Accumulator pieces per row, and the type and width of each.
    fn pieces(self) -> (usize, &'static str, usize) {
        match self {
            BLoad::Quad16 => (4, "vector<2xf32>", 2),
            BLoad::Quad32 => (1, "vector<4xf32>", 4),
            BLoad::Word16 => (1, "vector<2xf32>", 2),
            BLoad::Scalar => (1, "f32", 1),
        }
    }

    /// Whether the binding must start 16-byte aligned.
    fn needs_16(self) -> bool {
        matches!(self, BLoad::Quad16 | BLoad::Quad32)
    }
}

/// What the selection needs to know about B as the kernel sees it.
pub(crate) struct BLayout {
    /// Element strides along k and n, and between batch entries.
    pub(crate) k_stride: usize,
    pub(crate) n_stride: usize,
    pub(crate) batch_stride: usize,
    /// Element offset of B in its binding, and the binding's byte offset.
    pub(crate) offset: u64,
    pub(crate) binding_offset: u64,
    /// Columns.
    pub(crate) n: usize,
}

impl BLayout {
    /// The same matrix seen transposed, `k` (its row count) as columns: a
    /// B contiguous along k reads as contiguous rows.
    pub(crate) fn along_k(&self, k: usize) -> BLayout {
        BLayout {
            k_stride: self.n_stride,
            n_stride: self.k_stride,
            n: k,
            ..*self
        }
    }
}

/// The widest load B's layout allows.
pub(crate) fn b_load(input: DType, b: &BLayout) -> BLoad {
    let candidates: &[BLoad] = if input == DType::F16 {
        &[BLoad::Quad16, BLoad::Word16]
    } else {
        &[BLoad::Quad32]
    };
    candidates
        .iter()
        .copied()
        .find(|l| {
            let v = l.width();
            b.n_stride == 1
                && b.n.is_multiple_of(v)
                && b.k_stride.is_multiple_of(v)
                && b.batch_stride.is_multiple_of(v)
                && b.offset.is_multiple_of(v as u64)
                && (!l.needs_16() || b.binding_offset.is_multiple_of(16))
        })
        .unwrap_or(BLoad::Scalar)
}

/// The largest m the decode kernel is chosen for. Row tiles of the same
/// columns are neighbours in dispatch order, so they run together and B
/// comes from DRAM about once, the other tiles reading it from L2.
/// Without cooperative matrices that beats the tiled kernel up to 64 rows
/// (lavapipe: 16 rows 0.18 s against 1.3 s for 32 rows tiled, k = n =
/// 4096), and up to 128 rows of an unbatched product (H200, a 128-token
/// sentence through an f32 BERT encoder, n of 384 to 1536: 0.45 ms of
/// matmuls against 2.0 ms tiled); a batch of them (attention's per-head
/// products) gives the tiled kernel workgroups enough. Where a cooperative-matrix kernel exists it takes over from 4
/// rows: on the H200 (k = n = 4096) the decode kernel's time grows with m
/// (its multiply-adds grow with m), about 9.6 / 10.5 / 15.4 us for 1 / 2 /
/// 4 rows, while the split-k kernel pads to 16 rows and takes about 14 us
/// for any of them (the two tie near 3 rows).
pub(crate) fn gemv_max_rows(coop: bool, batch: usize) -> usize {
    match (coop, batch) {
        (true, _) => 3,
        (false, 0 | 1) => 128,
        (false, _) => 64,
    }
}

/// Workgroup shape of the decode kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    wg: usize,
    ct: usize,
    /// Subgroup size when the k slices are first reduced with shuffles.
    sg: Option<usize>,
}

fn shape(target: &Target, load: BLoad, mt: usize) -> Shape {
    // 32 columns per workgroup: 64 bytes of f16 (or 128 of f32) per row of
    // B, so the 64-byte DRAM bursts are used whole, and n / 32 workgroups.
    let ct = 32 / load.width();
    let cpu = target.kind == DeviceKind::Cpu;
    // On GPUs 512 work items keep many loads of B in flight for one or two
    // rows; from 4 rows on (4 x 8 accumulators and up) a work item needs
    // more than the 128 registers that 512 of them may each use (NVIDIA:
    // 64 Ki per workgroup), so they get 256 and up to 255 registers
    // rather than spilling the accumulators. On CPU devices 32: llvmpipe
    // switches between a workgroup's invocations at every barrier, and
    // 128 of them made `hrx demo` on lavapipe about 1.5x slower.
    let gpu_wg = if mt * load.width() <= 16 { 512 } else { 256 };
    let max_wg = (target.max_workgroup_invocations as usize)
        .min(target.max_workgroup_size[0] as usize)
        .min(if cpu { 32 } else { gpu_wg });
    let sg = target.subgroup_size_max as usize;
    let fixed = target.subgroup_size_min == target.subgroup_size_max
        && sg.is_power_of_two()
        && sg >= ct
        && target.subgroup_ops.shuffle;
    let mut wg = max_wg.next_power_of_two();
    if wg > max_wg {
        wg /= 2;
    }
    let ct = ct.min(wg);
    let slot_bytes = |wg: usize, sg: Option<usize>| {
        let slots = match sg {
            Some(sg) => wg / sg,
            None => wg / ct,
        };
        slots * mt * ct * load.width() * 4
    };
    let sg = (fixed && wg >= sg).then_some(sg);
    while wg > ct && slot_bytes(wg, sg) > target.workgroup_memory_bytes as usize / 2 {
        wg /= 2;
    }
    let sg = sg.filter(|&s| wg >= s);
    Shape { wg, ct, sg }
}

fn lines(items: impl IntoIterator<Item = String>) -> String {
    items.into_iter().collect::<Vec<_>>().join("\n")
}

/// The decode kernel for `input` elements, `load` and `m` rows, with `act` / `result`
/// as in the other matmul kernels.
pub(crate) fn gemv_key(
    target: &Target,
    input: DType,
    load: BLoad,
    m: usize,
    act: String,
    result: &str,
) -> KernelKey {
    let mt = row_tile(m);
    let Shape { wg, ct, sg } = shape(target, load, mt);
    let v = load.width();
    let cw = ct * v;
    let kt = wg / ct;
    let ns = match sg {
        Some(sg) => wg / sg,
        None => kt,
    };
    let elem = if input == DType::F16 { "f16" } else { "f32" };
    let (np, pt, pw) = load.pieces();
    let rows = 0..mt;
    let pieces = 0..np;
    let each = || {
        rows.clone()
            .flat_map(|r| pieces.clone().map(move |p| (r, p)))
    };

    let bview = match load {
        BLoad::Quad16 | BLoad::Word16 => "  %gv_two = index.constant 2 : index
  %lbw = index.div %lb, %gv_two : index
  %bv = buffer.view %b[%zero] : buffer -> view<[%lbw]xu32>"
            .to_string(),
        BLoad::Quad32 => "  %bv = buffer.view %b[%zero] : buffer -> view<[%lb]xf32>".into(),
        BLoad::Scalar => format!("  %bv = buffer.view %b[%zero] : buffer -> view<[%lb]x{elem}>"),
    };
    let role = match sg {
        Some(sg) => format!(
            "  %gv_lane = kernel.subgroup.lane.id : index
  %gv_slot = kernel.subgroup.id : index
  %ctc = index.rem %gv_lane, %cct : index
  %gv_sin = index.div %gv_lane, %cct : index
  %gv_sgk = index.constant {} : index
  %gv_s = index.madd %gv_slot, %gv_sgk, %gv_sin : index
  %gv_first = index.cmp eq, %gv_sin, %c0 : index",
            sg / ct
        ),
        None => "  %ctc = index.rem %tid, %cct : index
  %gv_s = index.div %tid, %cct : index
  %gv_slot = index.add %gv_s, %c0 : index
  %gv_first = index.cmp eq, %c0, %c0 : index"
            .into(),
    };
    let mut row_lines = vec![];
    for r in rows.clone() {
        row_lines.push(format!(
            "  %gv_ro_{r} = index.constant {r} : index
  %gv_rr_{r} = index.add %row0, %gv_ro_{r} : index
  %gv_rc_{r} = index.min %gv_rr_{r}, %mlast : index
  %pa_{r} = index.madd %gv_rc_{r}, %sam, %basea : index"
        ));
    }
    row_lines.push(match load {
        BLoad::Scalar => "  %pbc = index.madd %colc, %sbn, %baseb : index".into(),
        _ => "  %gv_four = index.constant 4 : index
  %gv_bq0 = index.add %baseb, %colc : index
  %pbq = index.div %gv_bq0, %cv_ : index
  %sbkq = index.div %sbk, %cv_ : index"
            .into(),
    });
    if load == BLoad::Quad16 {
        row_lines.extend((0..4).map(|p| format!("  %gv_l{p} = index.constant {p} : index")));
    }
    let init = if pt == "f32" {
        "  %gv_z = scalar.addf %gv_zf, %gv_zf : f32".to_string()
    } else {
        format!("  %gv_z = vector.splat %gv_zf : f32 -> {pt}")
    };
    // One k row: B at `kk` into pieces `%b{u}_{p}`, then the multiply-adds
    // from accumulators `from` into `to`.
    let load_b = |u: &str, kk: &str| -> String {
        match load {
            BLoad::Quad16 => {
                let mut l = vec![format!(
                    "    %gv_bk{u} = index.madd {kk}, %sbkq, %pbq : index
    %gv_bw{u} = index.mul %gv_bk{u}, %gv_four : index
    %gv_q{u} = vector.load %bv[%gv_bw{u}] : view<[%lbw]xu32> -> vector<4xu32>"
                )];
                for p in 0..4 {
                    l.push(format!(
                        "    %gv_w{u}_{p} = vector.extract %gv_q{u}, %gv_l{p} : vector<4xu32> -> u32
    %b{u}_{p} = vector.unpackf16 %gv_w{u}_{p} : u32 -> vector<2xf32>"
                    ));
                }
                lines(l)
            }
            BLoad::Word16 => format!(
                "    %gv_bk{u} = index.madd {kk}, %sbkq, %pbq : index
    %gv_w{u} = view.load %bv[%gv_bk{u}] : view<[%lbw]xu32> -> u32
    %b{u}_0 = vector.unpackf16 %gv_w{u} : u32 -> vector<2xf32>"
            ),
            BLoad::Quad32 => format!(
                "    %gv_bk{u} = index.madd {kk}, %sbkq, %pbq : index
    %gv_be{u} = index.mul %gv_bk{u}, %gv_four : index
    %b{u}_0 = vector.load %bv[%gv_be{u}] : view<[%lb]xf32> -> vector<4xf32>"
            ),
            BLoad::Scalar if input == DType::F16 => format!(
                "    %gv_be{u} = index.madd {kk}, %sbk, %pbc : index
    %gv_bx{u} = view.load %bv[%gv_be{u}] : view<[%lb]xf16> -> f16
    %b{u}_0 = scalar.extf %gv_bx{u} : f16 -> f32"
            ),
            BLoad::Scalar => format!(
                "    %gv_be{u} = index.madd {kk}, %sbk, %pbc : index
    %b{u}_0 = view.load %bv[%gv_be{u}] : view<[%lb]xf32> -> f32"
            ),
        }
    };
    let fmas = |u: &str,
                kk: &str,
                from: &dyn Fn(usize, usize) -> String,
                to: &dyn Fn(usize, usize) -> String| {
        let mut l = vec![];
        for r in rows.clone() {
            l.push(format!(
                "    %gv_pk{u}_{r} = index.madd {kk}, %sak, %pa_{r} : index"
            ));
            if input == DType::F16 {
                l.push(format!(
                    "    %gv_ah{u}_{r} = view.load %av[%gv_pk{u}_{r}] : view<[%la]xf16> -> f16
    %a{u}_{r} = scalar.extf %gv_ah{u}_{r} : f16 -> f32"
                ));
            } else {
                l.push(format!(
                    "    %a{u}_{r} = view.load %av[%gv_pk{u}_{r}] : view<[%la]xf32> -> f32"
                ));
            }
            let a = if pt == "f32" {
                format!("%a{u}_{r}")
            } else {
                l.push(format!(
                    "    %as{u}_{r} = vector.splat %a{u}_{r} : f32 -> {pt}"
                ));
                format!("%as{u}_{r}")
            };
            for p in pieces.clone() {
                l.push(format!(
                    "    {} = scalar.fmaf {a}, %b{u}_{p}, {} : {pt}",
                    to(r, p),
                    from(r, p)
                ));
            }
        }
        lines(l)
    };
    let list = |f: &dyn Fn(usize, usize) -> String, with_type: bool| {
        each()
            .map(|(r, p)| {
                if with_type {
                    format!("{} : {pt}", f(r, p))
                } else {
                    f(r, p)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let types = vec![pt; mt * np].join(", ");
    // Main loop: UNROLL rows of B per trip, their loads issued together so
    // several are in flight per work item; then the remaining rows.
    let mut main = vec![format!(
        "  %gv_un1 = index.constant {} : index
  %gv_step = index.constant {} : index
  %gv_kr = index.min %k, %gv_un1 : index
  %gv_kmain = index.sub %k, %gv_kr : index",
        (UNROLL - 1) * kt,
        UNROLL * kt
    )];
    let init_list = each()
        .map(|(r, p)| format!("%acc_{r}_{p} = %gv_z : {pt}"))
        .collect::<Vec<_>>()
        .join(", ");
    main.push(format!(
        "  {} = scf.for %kk = [%gv_s to %gv_kmain step %gv_step]({init_list}) -> ({types}) {{",
        list(&|r, p| format!("%mres_{r}_{p}"), false)
    ));
    for u in 0..UNROLL {
        main.push(format!(
            "    %gv_ko{u} = index.constant {} : index
    %kk{u} = index.add %kk, %gv_ko{u} : index",
            u * kt
        ));
        main.push(load_b(&format!("{u}"), &format!("%kk{u}")));
    }
    for u in 0..UNROLL {
        let from = |r: usize, p: usize| {
            if u == 0 {
                format!("%acc_{r}_{p}")
            } else {
                format!("%macc{}_{r}_{p}", u - 1)
            }
        };
        let to = |r: usize, p: usize| format!("%macc{u}_{r}_{p}");
        main.push(fmas(&format!("{u}"), &format!("%kk{u}"), &from, &to));
    }
    main.push(format!(
        "    scf.yield {} : {types}
  }}",
        list(&|r, p| format!("%macc{}_{r}_{p}", UNROLL - 1), false)
    ));
    main.push(
        "  %gv_km = index.max %gv_kmain, %gv_s : index
  %gv_kd = index.sub %gv_km, %gv_s : index
  %gv_stepm1 = index.sub %gv_step, %c1 : index
  %gv_kd1 = index.add %gv_kd, %gv_stepm1 : index
  %gv_trips = index.div %gv_kd1, %gv_step : index
  %gv_ktail = index.madd %gv_trips, %gv_step, %gv_s : index"
            .to_string(),
    );
    let tail_init = each()
        .map(|(r, p)| format!("%tacc_{r}_{p} = %mres_{r}_{p} : {pt}"))
        .collect::<Vec<_>>()
        .join(", ");
    main.push(format!(
        "  {} = scf.for %tk = [%gv_ktail to %k step %ckt]({tail_init}) -> ({types}) {{",
        list(&|r, p| format!("%res_{r}_{p}"), false)
    ));
    main.push(load_b("t", "%tk"));
    main.push(fmas(
        "t",
        "%tk",
        &|r, p| format!("%tacc_{r}_{p}"),
        &|r, p| format!("%tnacc_{r}_{p}"),
    ));
    main.push(format!(
        "    scf.yield {} : {types}
  }}",
        list(&|r, p| format!("%tnacc_{r}_{p}"), false)
    ));
    // Xor shuffles over the lane bits that select the k slice.
    let mut shuffle = vec![];
    let cur = |r: usize, p: usize, level: usize| {
        if level == 0 {
            format!("%res_{r}_{p}")
        } else {
            format!("%red{level}_{r}_{p}")
        }
    };
    let mut levels = 0;
    if let Some(sg) = sg {
        let mut mask = ct;
        while mask < sg {
            shuffle.push(format!(
                "  %gv_mask{levels} = index.constant {mask} : index"
            ));
            for (r, p) in each() {
                shuffle.push(format!(
                    "  %sh{levels}_{r}_{p} = kernel.subgroup.shuffle<xor> {}, %gv_mask{levels} : {pt}
  {} = scalar.addf {}, %sh{levels}_{r}_{p} : {pt}",
                    cur(r, p, levels),
                    cur(r, p, levels + 1),
                    cur(r, p, levels),
                ));
            }
            levels += 1;
            mask *= 2;
        }
    }
    let mut spill = vec!["    %gv_cvs = index.mul %ctc, %cv_ : index".to_string()];
    for r in rows.clone() {
        spill.push(format!(
            "    %gv_sr_{r} = index.madd %gv_slot, %cmt, %gv_ro_{r} : index
    %gv_sb_{r} = index.madd %gv_sr_{r}, %ccw, %gv_cvs : index"
        ));
        for p in pieces.clone() {
            let (store, ty) = if pt == "f32" {
                ("view.store", "f32".to_string())
            } else {
                ("vector.store", pt.to_string())
            };
            spill.push(format!(
                "    %gv_po_{r}_{p} = index.constant {} : index
    %gv_si_{r}_{p} = index.add %gv_sb_{r}, %gv_po_{r}_{p} : index
    {store} {}, %ts[%gv_si_{r}_{p}] : {ty}, view<{}xf32>",
                p * pw,
                cur(r, p, levels),
                ns * mt * cw
            ));
        }
    }
    let s_elems = ns * mt * cw;
    KernelKey {
        template: MATMUL_GEMV,
        substitutions: vec![
            ("CW1", (cw - 1).to_string()),
            ("CW", cw.to_string()),
            ("MT1", (mt - 1).to_string()),
            ("MT", mt.to_string()),
            ("WG", wg.to_string()),
            ("CT", ct.to_string()),
            ("V", v.to_string()),
            ("KT", kt.to_string()),
            ("NS", ns.to_string()),
            ("S_ELEMS", s_elems.to_string()),
            ("S_BYTES", (s_elems * 4).to_string()),
            ("OUT_ELEMS", (mt * cw).to_string()),
            ("IN", elem.into()),
            ("BVIEW", bview),
            ("ROLE", role),
            ("ROWS", lines(row_lines)),
            ("INIT", init),
            ("LOOPS", lines(main)),
            ("SHUFFLE", lines(shuffle)),
            ("SPILL", lines(spill)),
            ("ACT", act),
            ("R", result.into()),
        ],
        symbol: "matmul_gemv",
        config: Vec::new(),
    }
}
