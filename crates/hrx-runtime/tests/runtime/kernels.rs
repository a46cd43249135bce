//! Kernel creation and the contract checks every dispatch goes through.

use crate::common::{contract, kernel, read, runtime, spirv, upload};
use hrx_runtime::{Access, GpuKernel, MemoryPlacement, Runtime};

/// dst[i] = src[i] + k.
const ADD: &str = r#"
struct K { k: u32 }
var<immediate> c: K;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&dst) { dst[id.x] = src[id.x] + c.k; }
}
"#;

fn add(rt: &Runtime) -> GpuKernel {
    kernel(rt, ADD, &[Access::Read, Access::Write], 64, 4, [64, 1, 1])
}

fn message(result: hrx_runtime::Result<()>) -> String {
    result.expect_err("should be rejected").to_string()
}

/// `kernel` (ADD) over 0..64 with constant `k`, read back.
fn run_add(rt: &Runtime, kernel: &GpuKernel, k: u32) -> Vec<u32> {
    let a = upload(rt, &(0..64).collect::<Vec<u32>>());
    let b = upload(rt, &[0; 64]);
    let mut graph = rt.graph();
    graph
        .dispatch(kernel, &[a.view(), b.view()], &k.to_le_bytes(), [1, 1, 1])
        .unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    read(&b.view())
}

#[test]
fn a_dispatch_runs_with_constants() {
    let rt = runtime();
    assert_eq!(run_add(&rt, &add(&rt), 10), (10..74).collect::<Vec<u32>>());
}

#[test]
fn kernel_creation_checks_code_and_contract() {
    let rt = runtime();
    let c = contract(&[Access::Read], 4, 0, [64, 1, 1]);
    assert!(GpuKernel::new(&rt, &[], c.clone()).is_err());
    assert!(GpuKernel::new(&rt, &[0xdead_beef, 1, 2], c.clone()).is_err());
    let code = spirv(ADD);
    let odd_constants = contract(&[Access::Read, Access::Write], 4, 6, [64, 1, 1]);
    assert!(GpuKernel::new(&rt, &code, odd_constants).is_err());
    let too_many_constants = contract(&[Access::Read, Access::Write], 4, 4096, [64, 1, 1]);
    assert!(GpuKernel::new(&rt, &code, too_many_constants).is_err());
    let huge_group = contract(&[Access::Read, Access::Write], 4, 4, [4096, 1, 1]);
    assert!(GpuKernel::new(&rt, &code, huge_group).is_err());
}

#[test]
fn a_module_that_does_not_match_its_contract_never_reaches_the_driver() {
    let rt = runtime();
    let code = spirv(ADD);
    let fits = || contract(&[Access::Read, Access::Write], 4, 4, [64, 1, 1]);
    let rejected = |code: &[u32], contract, needle: &str| {
        let error = GpuKernel::new(&rt, code, contract).unwrap_err().to_string();
        assert!(error.contains(needle), "{needle:?} not in {error}");
    };
    // Structure: an instruction running past the end, a cut header.
    let mut overrun = code.clone();
    let last = overrun.len() - 1;
    overrun[last] |= 0x00ff_0000;
    rejected(&overrun, fits(), "claims");
    rejected(&code[..3], fits(), "header");
    // Cut at every instruction boundary: never accepted.
    let mut at = 5;
    while at < code.len() {
        assert!(
            GpuKernel::new(&rt, &code[..at], fits()).is_err(),
            "cut at {at}"
        );
        at += (code[at] >> 16) as usize;
    }
    // Interface: the entry point, the workgroup size, the bindings and the
    // push constants must all be what the contract says.
    let mut renamed = fits();
    renamed.entry_point = "other".into();
    rejected(&code, renamed, "entry point");
    rejected(
        &code,
        contract(&[Access::Read, Access::Write], 4, 4, [32, 1, 1]),
        "workgroup size",
    );
    rejected(
        &code,
        contract(&[Access::Read], 4, 4, [64, 1, 1]),
        "binding 1",
    );
    rejected(
        &code,
        contract(&[Access::Read, Access::Write], 4, 0, [64, 1, 1]),
        "push constants",
    );
    // The matching contract still builds.
    GpuKernel::new(&rt, &code, fits()).unwrap();
}

/// Writes 7 to 64 words whatever the binding holds: out of bounds on a
/// smaller binding (no `arrayLength` check, no inserted bounds checks).
const OVERRUN: &str = r#"
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    dst[id.x] = 7u;
}
"#;

#[test]
fn robust_buffer_access_is_on_by_default() {
    // lavapipe and the H200 both have the feature.
    assert!(runtime().gpu().unwrap().robust_buffer_access());
    let off = hrx_runtime::RuntimeOptions::from_env()
        .unwrap()
        .with_robust_buffer_access(false);
    assert!(
        !Runtime::with_options(off)
            .unwrap()
            .gpu()
            .unwrap()
            .robust_buffer_access()
    );
}

#[test]
fn robust_buffer_access_contains_an_out_of_bounds_kernel() {
    let options = hrx_runtime::RuntimeOptions::from_env()
        .unwrap()
        .with_robust_buffer_access(true);
    let rt = Runtime::with_options(options).unwrap();
    assert!(rt.gpu().unwrap().robust_buffer_access());
    // lavapipe bounds every access anyway; on a GPU (the H200 tier) the
    // stores past the binding land in the rest of the buffer without it.
    let kernel = kernel(&rt, OVERRUN, &[Access::Write], 4, 0, [64, 1, 1]);
    // 64 words; the kernel is given the first 16 (a 64-byte slice, the
    // smallest storage offset alignment keeps the rest addressable).
    let buffer = upload(&rt, &[0; 64]);
    let slice = buffer.view().slice(0..64).unwrap();
    let mut graph = rt.graph();
    graph.dispatch(&kernel, &[slice], &[], [1, 1, 1]).unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    let words = read(&buffer.view());
    assert!(words[..16].iter().all(|&w| w == 7), "{words:?}");
    assert!(
        words[16..].iter().all(|&w| w == 0),
        "stores past the binding reached other memory: {words:?}"
    );
}

#[test]
fn contract_violations_are_rejected_at_record_time() {
    let rt = runtime();
    let k = add(&rt);
    let a = upload(&rt, &[0; 64]);
    let b = upload(&rt, &[0; 64]);
    let c4 = 1u32.to_le_bytes();
    let mut graph = rt.graph();
    let small = a.view().slice(0..32).unwrap();
    assert!(
        message(graph.dispatch(&k, &[small, b.view()], &c4, [1, 1, 1])).contains("at least 64")
    );
    assert!(message(graph.dispatch(&k, &[a.view()], &c4, [1, 1, 1])).contains("bindings"));
    let misaligned = a.view().slice(4..132).unwrap();
    let b2 = upload(&rt, &[0; 64]);
    assert!(
        message(graph.dispatch(&k, &[b2.view(), misaligned], &c4, [1, 1, 1])).contains("offset")
    );
    assert!(
        message(graph.dispatch(&k, &[a.view(), b.view()], &[0; 8], [1, 1, 1]))
            .contains("constants")
    );
    assert!(
        message(graph.dispatch(&k, &[a.view(), b.view()], &c4, [0, 1, 1])).contains("workgroups")
    );
    assert!(
        message(graph.dispatch(&k, &[a.view(), b.view()], &c4, [1, u32::MAX, 1]))
            .contains("workgroups")
    );
    let empty = a.view().slice(0..0).unwrap();
    assert!(
        graph
            .dispatch(&k, &[empty, b.view()], &c4, [1, 1, 1])
            .is_err()
    );
    assert!(
        graph.is_empty(),
        "a rejected operation must not be recorded"
    );
    graph
        .dispatch(&k, &[a.view(), b.view()], &c4, [1, 1, 1])
        .unwrap();
    assert_eq!(graph.len(), 1);
}

#[test]
fn foreign_domain_kernels_and_views_are_rejected() {
    let (rt, other) = (runtime(), runtime());
    let k = add(&rt);
    let foreign_kernel = add(&other);
    let a = upload(&rt, &[0; 64]);
    let b = upload(&rt, &[0; 64]);
    let foreign = upload(&other, &[0; 64]);
    let c4 = 1u32.to_le_bytes();
    let mut graph = rt.graph();
    let e = message(graph.dispatch(&foreign_kernel, &[a.view(), b.view()], &c4, [1, 1, 1]));
    assert!(e.contains("another runtime domain"), "{e}");
    let e = message(graph.dispatch(&k, &[foreign.view(), b.view()], &c4, [1, 1, 1]));
    assert!(e.contains("another runtime domain"), "{e}");
    assert!(graph.copy(a.view(), foreign.view()).is_err());
    assert!(graph.fill(foreign.view(), 0).is_err());
    assert!(k.validate_runtime(&rt).is_ok());
    assert!(k.validate_runtime(&other).is_err());
    assert!(graph.is_empty());
}

#[test]
fn writable_aliasing_needs_the_unsafe_opt_in() {
    let rt = runtime();
    let data = upload(&rt, &(0..64).collect::<Vec<u32>>());
    let c4 = 5u32.to_le_bytes();
    let mut graph = rt.graph();
    let e = message(graph.dispatch(&add(&rt), &[data.view(), data.view()], &c4, [1, 1, 1]));
    assert!(e.contains("overlap"), "{e}");
    // Partial overlap through slices is aliasing too.
    let lo = data.view().slice(0..128).unwrap();
    let mid = data.view().slice(64..192).unwrap();
    let k = kernel(&rt, ADD, &[Access::Read, Access::Write], 4, 4, [64, 1, 1]);
    assert!(graph.dispatch(&k, &[lo, mid], &c4, [1, 1, 1]).is_err());
    // Two read-only bindings may alias freely (recorded, never run: this
    // contract would misdeclare ADD's output).
    let reader = kernel(&rt, ADD, &[Access::Read, Access::Read], 4, 4, [64, 1, 1]);
    rt.graph()
        .dispatch(&reader, &[data.view(), data.view()], &c4, [1, 1, 1])
        .unwrap();
    // SAFETY: each invocation reads and writes only its own element.
    let in_place = unsafe { add(&rt).allow_aliasing() };
    assert!(in_place.aliasing_allowed());
    graph
        .dispatch(&in_place, &[data.view(), data.view()], &c4, [1, 1, 1])
        .unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    assert_eq!(read(&data.view()), (5..69).collect::<Vec<u32>>());
}

#[test]
fn device_local_views_bind_too() {
    let rt = runtime();
    let a = upload(&rt, &(0..64).collect::<Vec<u32>>());
    let dev = rt.allocate(256, MemoryPlacement::GpuLocal).unwrap();
    let b = upload(&rt, &[0; 64]);
    let mut graph = rt.graph();
    graph
        .dispatch(
            &add(&rt),
            &[a.view(), dev.view()],
            &2u32.to_le_bytes(),
            [1, 1, 1],
        )
        .unwrap();
    graph.copy(b.view(), dev.view()).unwrap();
    graph.prepare().unwrap().submit().unwrap().wait().unwrap();
    assert_eq!(read(&b.view()), (2..66).collect::<Vec<u32>>());
}

/// Statistics of compiled code are opt-in: without the option the call
/// says so, naming the kernel.
#[test]
fn kernel_statistics_need_the_option() {
    let rt = runtime();
    let err = add(&rt)
        .statistics()
        .expect_err("statistics were not asked for");
    assert!(matches!(err, hrx_runtime::Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("`main`"), "{err}");
    let err = add(&rt)
        .internal_representations()
        .expect_err("not asked for");
    assert!(matches!(err, hrx_runtime::Error::Unsupported(_)), "{err}");
}

/// With the option, a device that keeps statistics reports them (NVIDIA's
/// driver must, with a register count); one that cannot says it lacks the
/// extension, and its kernels still build and run.
#[test]
fn kernel_statistics_with_the_option() {
    let rt = Runtime::with_options(
        hrx_runtime::RuntimeOptions::from_env()
            .unwrap()
            .with_pipeline_statistics(),
    )
    .expect("runtime");
    let kernel = add(&rt);
    let target = rt.gpu().expect("gpu").target().clone();
    match kernel.statistics() {
        Ok(stats) => {
            assert!(!stats.is_empty());
            assert!(stats.iter().all(|s| !s.name.is_empty()), "{stats:?}");
            for s in &stats {
                println!("{}: {} ({})", s.name, s.value, s.description);
            }
            if target.vendor_id == 0x10de {
                assert!(
                    stats
                        .iter()
                        .any(|s| s.name.to_lowercase().contains("register")),
                    "{stats:?}"
                );
            }
            // Representations are the driver's choice (possibly none), but
            // the query works and text ones carry no terminator.
            let reps = kernel.internal_representations().expect("representations");
            for r in &reps {
                println!("{}: {} bytes, text {}", r.name, r.data.len(), r.is_text);
                assert!(!r.is_text || r.data.last() != Some(&0), "{}", r.name);
            }
        }
        Err(hrx_runtime::Error::Unsupported(msg)) => {
            assert!(
                msg.contains("VK_KHR_pipeline_executable_properties"),
                "{msg}"
            );
            assert_ne!(target.vendor_id, 0x10de, "NVIDIA keeps statistics: {msg}");
        }
        Err(e) => panic!("{e}"),
    }
    assert_eq!(run_add(&rt, &kernel, 5), (5..69).collect::<Vec<u32>>());
}
