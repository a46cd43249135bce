//! How fast this device feeds the 128x256x32 cooperative-matrix kernel's
//! copies: the rate of its global loads alone, without workgroup memory,
//! barriers or products (for the H200; see docs/tensor.md).
//!
//! Each work item issues the kernel's 16-byte loads of an 8192^3 f16
//! matmul (one of the 128 x 32 tile of A and two of the 32 x 256 tile of
//! B per k step, at the kernel's addresses, for every tile of C) and
//! folds them into one word it stores at the end. Variants:
//!
//! - workgroups: 132, one per SM of the H200 and each looping over its
//!   share of the tiles, as resident as the kernel (whose 128 registers by
//!   512 invocations fill an SM); or one per tile, letting the device keep
//!   several per SM;
//! - `steps in flight` 1 issues one step's loads and waits for them, as
//!   the kernel holds one step of prefetch; 2 and 4 issue that many
//!   steps' loads before they wait, bytes in flight the kernel would need
//!   two or four times its registers for. Each step's addresses depend
//!   on the previous step's data (through a mask that is zero at run
//!   time), so the compiler cannot put more steps in flight;
//! - `A`, `B` or both operands;
//! - `hot`: every tile reads the same 128 rows of A and 256 columns of B
//!   (6 MB, resident in L2), so the rate is L2's alone.
//!
//! Each line gives the load rate (GB/s) and the most a kernel needing
//! these bytes per flop (about 0.0117 for A and B) could reach at it.
//!
//! `cargo run --release -p hrx-bench --bin load_ceiling`
//!
//! On a device without the kernel (lavapipe) it runs 512^3, which only
//! shows these kernels build and run.

use hrx_bench::best_run::best_run_seconds;
use hrx_loom::{Compiler, ScalarValue, Specialization};
use hrx_runtime::{GpuKernel, MemoryPlacement, Runtime};
use hrx_tensor::ops::coop_matmul_source;

/// The H200's SMs: the matmul kernel runs one workgroup on each (128
/// registers by 512 invocations fill an SM's register file). Vulkan does
/// not report the count.
const H200_SMS: usize = 132;
/// Bytes of A and B the 128x256x32 kernel loads per flop.
const BYTES_PER_FLOP: f64 = ((128 * 32 + 32 * 256) * 2) as f64 / (2 * 128 * 256 * 32) as f64;

/// The kernel text for `unroll` steps in flight, loading A and/or B, from
/// the whole matrices or (`hot`) one tile row and column.
fn source(unroll: usize, load_a: bool, load_b: bool, hot: bool) -> String {
    // Every address adds the previous step's folded loads masked by
    // `%dep`, zero at run time: the compiler cannot start a step's loads
    // before the last step's arrived, so exactly `unroll` steps are in
    // flight.
    let mut body = String::from(
        "    %d0 = vector.extract %x, %c0 : vector<4xu32> -> u32
    %d1 = scalar.andi %d0, %dep : u32
    %dd = index.cast %d1 : u32 -> index
",
    );
    let mut folds = vec!["%x".to_string()];
    for u in 0..unroll {
        body += &format!(
            "    %s{u}o = index.constant {u} : index
    %s{u} = index.madd %t, %cu, %s{u}o : index
"
        );
        if load_a {
            body += &format!(
                "    %a{u}q = index.madd %s{u}, %c16, %aw : index
    %a{u}o = index.add %a{u}q, %dd : index
    %a{u} = vector.load %av[%a{u}o] : view<[%law]xu32> -> vector<4xu32>
"
            );
            folds.push(format!("%a{u}"));
        }
        if load_b {
            for r in 0..2 {
                body += &format!(
                    "    %b{u}{r}q = index.madd %s{u}, %bstep, %bw{r} : index
    %b{u}{r}o = index.add %b{u}{r}q, %dd : index
    %b{u}{r} = vector.load %bv[%b{u}{r}o] : view<[%lbw]xu32> -> vector<4xu32>
"
                );
                folds.push(format!("%b{u}{r}"));
            }
        }
    }
    // Fold after every load is issued, so the loads of all unrolled steps
    // are in flight together.
    for (i, pair) in folds.windows(2).enumerate() {
        let prev = if i == 0 {
            pair[0].clone()
        } else {
            format!("%f{}", i - 1)
        };
        body += &format!(
            "    %f{i} = scalar.xori {prev}, {} : vector<4xu32>\n",
            pair[1]
        );
    }
    let last = format!("%f{}", folds.len() - 2);
    let (row_of, col_of) = if hot { ("%c0", "%c0") } else { ("%ty", "%tx") };
    // Workgroup w takes tiles w, w + groups, ..., each over all k steps,
    // so `groups` bounds the workgroups resident at once.
    format!(
        "kernel.def @loads(%groups: index) {{
  %one = index.constant 1 : index
  %wg = index.constant 512 : index
  kernel.launch.config workgroups(%groups, %one, %one) workgroup_size(%wg, %one, %one) : index
}} launch(%k: index, %n: index, %tiles_x: index, %tiles: index, %law: index, %lbw: index, %lo: index, %dep: u32,
         %a: buffer {{readonly}}, %b: buffer {{readonly}}, %o: buffer) {{
  %zero = index.constant 0 : offset
  %av = buffer.view %a[%zero] : buffer -> view<[%law]xu32>
  %bv = buffer.view %b[%zero] : buffer -> view<[%lbw]xu32>
  %ov = buffer.view %o[%zero] : buffer -> view<[%lo]xu32>
  %c0 = index.constant 0 : index
  %c1 = index.constant 1 : index
  %c2 = index.constant 2 : index
  %c4 = index.constant 4 : index
  %c16 = index.constant 16 : index
  %c32 = index.constant 32 : index
  %c128 = index.constant 128 : index
  %cu = index.constant {unroll} : index
  %tid = kernel.workitem.id<x> : index
  %wgx = kernel.workgroup.id<x> : index
  %groups = kernel.workgroup.count<x> : index
  %kw = index.div %k, %c2 : index
  %nw = index.div %n, %c2 : index
  %ar = index.div %tid, %c4 : index
  %ag = index.rem %tid, %c4 : index
  %agw = index.mul %ag, %c4 : index
  %br = index.div %tid, %c32 : index
  %bg = index.rem %tid, %c32 : index
  %bgw = index.mul %bg, %c4 : index
  %br1 = index.add %br, %c16 : index
  %bstep = index.mul %nw, %c32 : index
  %steps = index.div %k, %c32 : index
  %iters = index.div %steps, %cu : index
  %zu = scalar.constant 0 : u32
  %zq = vector.splat %zu : u32 -> vector<4xu32>
  %acc = scf.for %tile = [%wgx to %tiles step %groups](%y = %zq : vector<4xu32>) -> (vector<4xu32>) {{
    %tx = index.rem %tile, %tiles_x : index
    %ty = index.div %tile, %tiles_x : index
    %arow = index.madd {row_of}, %c128, %ar : index
    %aw = index.madd %arow, %kw, %agw : index
    %bcol = index.madd {col_of}, %c128, %bgw : index
    %bw0 = index.madd %br, %nw, %bcol : index
    %bw1 = index.madd %br1, %nw, %bcol : index
    %tacc = scf.for %t = [%c0 to %iters step %c1](%x = %y : vector<4xu32>) -> (vector<4xu32>) {{
{body}      scf.yield {last} : vector<4xu32>
    }}
    scf.yield %tacc : vector<4xu32>
  }}
  %e0 = vector.extract %acc, %c0 : vector<4xu32> -> u32
  %e1 = vector.extract %acc, %c1 : vector<4xu32> -> u32
  %e01 = scalar.xori %e0, %e1 : u32
  %cth = index.constant 512 : index
  %slot = index.madd %wgx, %cth, %tid : index
  view.store %e01, %ov[%slot] : u32, view<[%lo]xu32>
  kernel.return
}}
"
    )
}

fn main() -> hrx_core::Result<()> {
    let runtime = Runtime::from_env()?;
    let target = runtime.gpu()?.target().clone();
    // The matmul's extent (m = n = k): 8192 where the kernel runs, a
    // small check of these kernels elsewhere (lavapipe in CI).
    let size: usize = if coop_matmul_source(&target, 8192, false, None).is_some() {
        8192
    } else {
        512
    };
    let compiler = Compiler::for_target(None, &target)?;
    let (gx, gy) = (size / 256, size / 128);
    let operand = size * size * 2;
    let a = runtime.allocate(operand, MemoryPlacement::GpuLocal)?;
    let b = runtime.allocate(operand, MemoryPlacement::GpuLocal)?;
    let tiles = gx * gy;
    let out = runtime.allocate(tiles * 512 * 4, MemoryPlacement::GpuLocal)?;
    // (workgroups, steps in flight, A, B, hot): `H200_SMS` workgroups hold
    // the kernel's one resident workgroup per SM; `tiles` lets the device
    // keep as many resident as fit (up to four per SM here).
    let variants = [
        (H200_SMS, 1, true, true, false),
        (H200_SMS, 2, true, true, false),
        (H200_SMS, 4, true, true, false),
        (tiles, 1, true, true, false),
        (H200_SMS, 1, true, false, false),
        (H200_SMS, 1, false, true, false),
        (H200_SMS, 1, true, true, true),
        (tiles, 4, true, true, true),
    ];
    for (groups, unroll, load_a, load_b, hot) in variants {
        let groups = groups.min(tiles);
        let artifact = compiler
            .module(&source(unroll, load_a, load_b, hot))
            .and_then(|m| m.compile(&Specialization::new("@loads")))?;
        let kernel = GpuKernel::new(&runtime, artifact.spirv(), artifact.contract())?;
        let constants = artifact.push_constants_from(&[
            ScalarValue::Index(size as u64),
            ScalarValue::Index(size as u64),
            ScalarValue::Index(gx as u64),
            ScalarValue::Index(tiles as u64),
            ScalarValue::Index((operand / 4) as u64),
            ScalarValue::Index((operand / 4) as u64),
            ScalarValue::Index((tiles * 512) as u64),
            ScalarValue::U32(0),
        ])?;
        let grid = artifact.launch(&[groups as u64])?;
        let mut graph = runtime.graph();
        graph.dispatch(&kernel, &[a.view(), b.view(), out.view()], &constants, grid)?;
        let best = best_run_seconds(graph)?;
        // Per workgroup and k step: 128 x 32 halves of A, 32 x 256 of B.
        let per_step = 2 * (if load_a { 128 * 32 } else { 0 } + if load_b { 32 * 256 } else { 0 });
        let bytes = (tiles * (size / 32) * per_step) as f64;
        let operands = match (load_a, load_b) {
            (true, true) => "A+B",
            (true, false) => "A",
            _ => "B",
        };
        println!(
            "{}: {groups} workgroups, {operands}{} steps in flight {unroll}: {:.1} GB/s ({:.0} us; at 0.0117 B/flop: {:.1} TFLOP/s)",
            target.name,
            if hot { " hot" } else { "" },
            bytes / best / 1e9,
            best * 1e6,
            bytes / best / BYTES_PER_FLOP / 1e12,
        );
    }
    Ok(())
}
