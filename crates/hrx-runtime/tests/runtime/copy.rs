//! Copies and fills: the copy engine for small or unaligned ranges, the
//! built-in compute kernel for large device-local ones, and the checked-in
//! kernel's provenance.

// The generator stays xtask's (`cargo xtask gen-copy-kernel`); xtask does
// not depend on test code, so the test includes its source.
#[allow(dead_code)]
#[path = "../../../../xtask/src/gen_copy_kernel.rs"]
mod gen_copy_kernel;

use crate::common::{read, runtime, upload, write};
use hrx_runtime::MemoryPlacement;
use std::path::Path;

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2654435761) ^ seed)
        .collect()
}

fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn small_unaligned_copies_and_fills() {
    let rt = runtime();
    let src = upload(&rt, &pattern(64, 7));
    let dst = upload(&rt, &[0; 64]);
    let mut graph = rt.graph();
    // 13 bytes from byte 3 to byte 101: neither offsets nor length aligned.
    graph
        .copy(
            dst.view().slice(101..114).unwrap(),
            src.view().slice(3..16).unwrap(),
        )
        .unwrap();
    graph
        .fill(dst.view().slice(0..64).unwrap(), 0xabcd_ef01)
        .unwrap();
    graph.fill(dst.view().slice(128..132).unwrap(), 9).unwrap();
    let graph = graph.prepare().unwrap();
    assert!(
        graph.barriers().is_empty(),
        "disjoint ranges need no barrier"
    );
    graph.submit().unwrap().wait().unwrap();
    let out = bytes(&read(&dst.view()));
    let input = bytes(&pattern(64, 7));
    assert_eq!(&out[101..114], &input[3..16]);
    assert_eq!(&out[114..128], &[0; 14]);
    assert!(
        out[..64]
            .chunks(4)
            .all(|w| w == 0xabcd_ef01u32.to_le_bytes())
    );
    assert_eq!(&out[128..132], &9u32.to_le_bytes());
}

#[test]
fn copy_and_fill_preconditions() {
    let rt = runtime();
    let a = upload(&rt, &[0; 64]);
    let mut graph = rt.graph();
    let e = graph.copy(
        a.view().slice(0..8).unwrap(),
        a.view().slice(8..12).unwrap(),
    );
    assert!(e.unwrap_err().to_string().starts_with("copy:"));
    let e = graph.copy(
        a.view().slice(0..8).unwrap(),
        a.view().slice(4..12).unwrap(),
    );
    assert!(e.unwrap_err().to_string().contains("overlaps"));
    let e = graph.fill(a.view().slice(2..10).unwrap(), 0);
    assert!(e.unwrap_err().to_string().starts_with("fill:"));
    assert!(graph.fill(a.view().slice(0..6).unwrap(), 0).is_err());
    assert!(graph.is_empty());
    // Empty ranges are valid no-ops.
    graph
        .copy(a.view().slice(0..0).unwrap(), a.view().slice(8..8).unwrap())
        .unwrap();
    graph.fill(a.view().slice(4..4).unwrap(), 1).unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
}

#[test]
fn large_device_copy_through_the_compute_kernel() {
    let rt = runtime();
    let n = (3 << 20) / 4 + 5; // 3 MiB + 20 bytes: a 4-byte tail past the last 16-byte word
    let input = pattern(n, 0x5eed);
    let staging_in = upload(&rt, &input);
    let staging_out = upload(&rt, &vec![0; n]);
    let a = rt.allocate(n * 4, MemoryPlacement::GpuLocal).unwrap();
    let b = rt.allocate(n * 4 + 64, MemoryPlacement::GpuLocal).unwrap();
    let b = b.view().slice(64..64 + n * 4).unwrap();
    let mut graph = rt.graph();
    graph.copy(a.view(), staging_in.view()).unwrap();
    graph.copy(b.clone(), a.view()).unwrap();
    graph.copy(staging_out.view(), b).unwrap();
    let graph = graph.prepare().unwrap();
    let positions: Vec<usize> = graph.barriers().iter().map(|b| b.before()).collect();
    assert_eq!(positions, [1, 2]);
    graph.submit().unwrap().wait().unwrap();
    assert_eq!(read(&staging_out.view()), input);
    // Replays copy fresh data.
    let again = pattern(n, 0xfeed);
    write(&staging_in.view(), &again);
    graph.submit().unwrap().wait().unwrap();
    assert_eq!(read(&staging_out.view()), again);
}

#[test]
fn copies_beyond_one_binding_range_are_chunked() {
    let rt = runtime();
    let range = rt.gpu().unwrap().target().max_storage_buffer_range as usize;
    if range > 256 << 20 {
        return; // only meaningful (and affordable) where the range is small
    }
    let len = range + (1 << 20) + 4;
    let a = rt.allocate(len, MemoryPlacement::GpuLocal).unwrap();
    let b = rt.allocate(len, MemoryPlacement::GpuLocal).unwrap();
    let probe = upload(&rt, &[0; 12]);
    let mut graph = rt.graph();
    graph
        .fill(a.view().slice(0..range - 16).unwrap(), 0x1111_1111)
        .unwrap();
    graph
        .fill(a.view().slice(range - 16..len).unwrap(), 0x2222_2222)
        .unwrap();
    graph.copy(b.view(), a.view()).unwrap();
    let probe_views = probe.view();
    graph
        .copy(
            probe_views.slice(0..32).unwrap(),
            b.view().slice(range - 32..range).unwrap(),
        )
        .unwrap();
    graph
        .copy(
            probe_views.slice(32..48).unwrap(),
            b.view().slice(len - 16..len).unwrap(),
        )
        .unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    let got = read(&probe.view());
    assert_eq!(&got[..4], &[0x1111_1111; 4]);
    assert_eq!(&got[4..12], &[0x2222_2222; 8]);
}

#[test]
fn copy_kernel_spirv_is_regenerated_from_wgsl() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let wgsl = std::fs::read_to_string(root.join(gen_copy_kernel::WGSL)).unwrap();
    let words = gen_copy_kernel::compile(&wgsl).unwrap();
    let checked_in = std::fs::read(root.join(gen_copy_kernel::SPIRV)).unwrap();
    assert_eq!(
        gen_copy_kernel::to_bytes(&words),
        checked_in,
        "copy.spv is stale: run `cargo xtask gen-copy-kernel`"
    );
    // Every emitted module passes spirv-val where it is installed.
    hrx_test_support::spirv_val::validate("copy.spv", &checked_in[..]);
}
