//! How fast this device feeds the 128x256x32 cooperative-matrix kernel's
//! copies: the rate of its global loads alone, without workgroup memory,
//! barriers or products (for the H200; see docs/tensor.md).
//!
//! Each work item issues the kernel's 16-byte loads of an 8192^3 f16
//! matmul (one of the 128 x 32 tile of A and two of the 32 x 256 tile of
//! B per k step, at the kernel's addresses over the kernel's grid) and
//! folds them into one word it stores at the end. Variants:
//!
//! - `steps in flight` 1 issues one step's loads and waits for them, as
//!   the kernel holds one step of prefetch; 2 and 4 issue that many
//!   steps' loads before they wait, bytes in flight the kernel would need
//!   two or four times its registers for;
//! - `A`, `B` or both operands;
//! - `hot`: every workgroup reads the same 128 rows of A and 256 columns
//!   of B (6 MB, resident in L2), so the rate is L2's alone.
//!
//! Each line gives the load rate (GB/s) and what it allows a kernel that needs
//! these bytes per flop (about 0.0117 for A and B) at most.
//!
//! `cargo run --release -p hrx-tensor --example load_ceiling`
//!
//! On a device without the kernel (lavapipe) it runs 512^3, which only
//! shows these kernels build and run.

use hrx_loom::{Compiler, ScalarValue, Specialization};
use hrx_runtime::{MemoryPlacement, Runtime};
use hrx_tensor::ops::{coop_matmul_source, kernel_from_artifact};
use std::time::Instant;

/// Bytes of A and B the 128x256x32 kernel loads per flop.
const BYTES_PER_FLOP: f64 = ((128 * 32 + 32 * 256) * 2) as f64 / (2 * 128 * 256 * 32) as f64;

/// The kernel text for `unroll` steps in flight, loading A and/or B, from
/// the whole matrices or (`hot`) one tile row and column.
fn source(unroll: usize, load_a: bool, load_b: bool, hot: bool) -> String {
    let mut body = String::new();
    let mut folds = vec!["%x".to_string()];
    for u in 0..unroll {
        body += &format!(
            "    %s{u}o = index.constant {u} : index
    %s{u} = index.madd %t, %cu, %s{u}o : index
"
        );
        if load_a {
            body += &format!(
                "    %a{u}o = index.madd %s{u}, %c16, %aw : index
    %a{u} = vector.load %av[%a{u}o] : view<[%law]xu32> -> vector<4xu32>
"
            );
            folds.push(format!("%a{u}"));
        }
        if load_b {
            for r in 0..2 {
                body += &format!(
                    "    %b{u}{r}o = index.madd %s{u}, %bstep, %bw{r} : index
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
    let (row_of, col_of) = if hot {
        ("%c0", "%c0")
    } else {
        ("%wgy", "%wgx")
    };
    format!(
        "kernel.def @loads(%gx: index, %gy: index) {{
  %one = index.constant 1 : index
  %wg = index.constant 512 : index
  kernel.launch.config workgroups(%gx, %gy, %one) workgroup_size(%wg, %one, %one) : index
}} launch(%k: index, %n: index, %law: index, %lbw: index, %lo: index,
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
  %wgy = kernel.workgroup.id<y> : index
  %kw = index.div %k, %c2 : index
  %nw = index.div %n, %c2 : index
  %ar = index.div %tid, %c4 : index
  %ag = index.rem %tid, %c4 : index
  %arow = index.madd {row_of}, %c128, %ar : index
  %agw = index.mul %ag, %c4 : index
  %aw = index.madd %arow, %kw, %agw : index
  %br = index.div %tid, %c32 : index
  %bg = index.rem %tid, %c32 : index
  %bgw = index.mul %bg, %c4 : index
  %bcol = index.madd {col_of}, %c128, %bgw : index
  %bw0 = index.madd %br, %nw, %bcol : index
  %br1 = index.add %br, %c16 : index
  %bw1 = index.madd %br1, %nw, %bcol : index
  %bstep = index.mul %nw, %c32 : index
  %steps = index.div %k, %c32 : index
  %iters = index.div %steps, %cu : index
  %zu = scalar.constant 0 : u32
  %zq = vector.splat %zu : u32 -> vector<4xu32>
  %acc = scf.for %t = [%c0 to %iters step %c1](%x = %zq : vector<4xu32>) -> (vector<4xu32>) {{
{body}    scf.yield {last} : vector<4xu32>
  }}
  %e0 = vector.extract %acc, %c0 : vector<4xu32> -> u32
  %e1 = vector.extract %acc, %c1 : vector<4xu32> -> u32
  %e01 = scalar.xori %e0, %e1 : u32
  %gxs = kernel.workgroup.count<x> : index
  %wl = index.madd %wgy, %gxs, %wgx : index
  %cth = index.constant 512 : index
  %slot = index.madd %wl, %cth, %tid : index
  view.store %e01, %ov[%slot] : u32, view<[%lo]xu32>
  kernel.return
}}
"
    )
}

fn main() -> hrx_core::Result<()> {
    let runtime = Runtime::new()?;
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
    let words = gx * gy * 512;
    let out = runtime.allocate(words * 4, MemoryPlacement::GpuLocal)?;
    let variants = [
        (1, true, true, false),
        (2, true, true, false),
        (4, true, true, false),
        (1, true, false, false),
        (1, false, true, false),
        (1, true, true, true),
        (4, true, true, true),
    ];
    for (unroll, load_a, load_b, hot) in variants {
        let artifact = compiler
            .module(&source(unroll, load_a, load_b, hot))
            .and_then(|m| m.compile(&Specialization::new("@loads")))?;
        let kernel = kernel_from_artifact(&runtime, &artifact)?;
        let constants = artifact.push_constants_from(&[
            ScalarValue::Index(size as u64),
            ScalarValue::Index(size as u64),
            ScalarValue::Index((operand / 4) as u64),
            ScalarValue::Index((operand / 4) as u64),
            ScalarValue::Index(words as u64),
        ])?;
        let grid = artifact.launch(&[gx as u64, gy as u64])?;
        let mut graph = runtime.graph();
        graph.dispatch(&kernel, &[a.view(), b.view(), out.view()], &constants, grid)?;
        let prepared = graph.prepare()?;
        prepared.submit()?.wait()?;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            prepared.submit()?.wait()?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        // Per workgroup and k step: 128 x 32 halves of A, 32 x 256 of B.
        let per_step = 2 * (if load_a { 128 * 32 } else { 0 } + if load_b { 32 * 256 } else { 0 });
        let bytes = (gx * gy * (size / 32) * per_step) as f64;
        let operands = match (load_a, load_b) {
            (true, true) => "A+B",
            (true, false) => "A",
            _ => "B",
        };
        println!(
            "{}: {operands}{} steps in flight {unroll}: {:.1} GB/s ({:.0} us; at 0.0117 B/flop: {:.1} TFLOP/s)",
            target.name,
            if hot { " hot" } else { "" },
            bytes / best / 1e9,
            best * 1e6,
            bytes / best / BYTES_PER_FLOP / 1e12,
        );
    }
    Ok(())
}
