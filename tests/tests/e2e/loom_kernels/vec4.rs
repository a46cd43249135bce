//! loom's vec4 buffer layout on the live device: an f16 kernel moving
//! data through a `vec4<f16>` workgroup tile, and a 2-D f32 kernel whose
//! rows are 4-vectors. What the compiler declares is checked in hrx-loom's
//! own `vec4_layout` tests; here the results must be exact.

use super::run::{Rng, bits, gpu, idx, read};
use hrx::loom::{Artifact, Specialization};

const BLOCK_TRANSPOSE: &str = loom_test_file!("vec4/block_transpose.loom");
const ROWS_F32: &str = loom_test_file!("vec4/rows_f32.loom");

fn element_bytes(a: &Artifact) -> Vec<u32> {
    a.bindings().iter().map(|b| b.element_bytes).collect()
}

#[test]
fn f16_block_transpose_runs_through_a_vec4_tile() {
    // Exact: data movement only. Outputs are poisoned first, and the
    // guard words after them must stay poisoned.
    use half::f16;
    let g = gpu();
    if !(g.target.shader_f16 && g.target.storage_16bit) {
        eprintln!("note: device lacks f16 storage or arithmetic; skipping");
        return;
    }
    let k = g.kernel(BLOCK_TRANSPOSE, &Specialization::new("@block_transpose"));
    assert_eq!(element_bytes(&k.artifact), [8, 8]);
    let mut rng = Rng::new(77);
    for blocks in [1, 3, 17] {
        let n = 256 * blocks;
        let h: Vec<u16> = (0..n)
            .map(|_| f16::from_f32(rng.f32_in(-1000.0, 1000.0)).to_bits())
            .collect();
        let pack = |v: &[u16]| -> Vec<u32> {
            v.chunks(2)
                .map(|p| u32::from(p[0]) | (u32::from(p[1]) << 16))
                .collect()
        };
        let src = g.input(&pack(&h));
        let dst = g.output(n / 2);
        g.run(&k, &[&src, &dst], &[idx(blocks)], &[blocks as u64]);
        // Output 4-vector t of a block is its input row t % 16, 4-column
        // group t / 16.
        let mut want = vec![0u16; n];
        for b in 0..blocks {
            for t in 0..64 {
                for j in 0..4 {
                    let from = 256 * b + 16 * (t % 16) + 4 * (t / 16) + j;
                    want[256 * b + 4 * t + j] = h[from];
                }
            }
        }
        let label = format!("block_transpose x{blocks}");
        assert_eq!(read(&label, &dst, n / 2), pack(&want), "{label}");
    }
}

#[test]
fn f32_rows_of_4_quads_run() {
    // Exact: doubling is exact for these values. Row lengths are 4 quads
    // (rows, quads) wide, including a partial workgroup.
    let g = gpu();
    let k = g.kernel(ROWS_F32, &Specialization::new("@rows_f32"));
    assert_eq!(element_bytes(&k.artifact), [16, 16]);
    let mut rng = Rng::new(78);
    for (rows, quads) in [(1, 1), (3, 5), (7, 16), (5, 37)] {
        let n = rows * quads * 4;
        let x = rng.f32s(n, -100.0, 100.0);
        let (xb, yb) = (g.input(&bits(&x)), g.output(n));
        g.run(
            &k,
            &[&xb, &yb],
            &[idx(rows), idx(quads)],
            &[rows as u64, quads as u64],
        );
        let want: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
        let label = format!("rows_f32 {rows}x{quads}");
        assert_eq!(read(&label, &yb, n), bits(&want), "{label}");
    }
}
