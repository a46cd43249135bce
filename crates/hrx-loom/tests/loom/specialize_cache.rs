//! Specialization by config key, and the compile cache.

use crate::common;
use hrx_core::{Error, Target};
use hrx_loom::{Compiler, ConfigValue, Specialization};
use hrx_test_support::spirv_val;

fn config_source() -> String {
    std::fs::read_to_string(common::corpus_dir().join("config.loom")).unwrap()
}

fn codes(e: Error) -> Vec<&'static str> {
    match e {
        Error::Compile { diagnostics, .. } => diagnostics.iter().map(|d| d.code).collect(),
        other => panic!("expected a compile error, got {other}"),
    }
}

#[test]
fn config_default_and_override() {
    let c = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    let m = c.module(&config_source()).unwrap();
    let a = m.compile(&Specialization::new("@configured")).unwrap();
    assert_eq!(a.workgroup_size(), [64, 1, 1]);
    assert_eq!(a.launch(&[65]).unwrap(), [2, 1, 1]);
    let spec = Specialization::new("configured")
        .with_config("cfg.width", 128u64)
        .with_config("@cfg.factor", 3.0f32)
        .with_config("cfg.negate", true);
    let b = m.compile(&spec).unwrap();
    spirv_val::validate("configured/128", b.spirv());
    assert_eq!(b.workgroup_size(), [128, 1, 1]);
    assert_eq!(b.launch(&[129]).unwrap(), [2, 1, 1]);
    assert_ne!(a.spirv(), b.spirv());
}

#[test]
fn unknown_key_and_wrong_type_are_errors() {
    let c = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    let m = c.module(&config_source()).unwrap();
    let e = m
        .compile(&Specialization::new("@configured").with_config("cfg.nope", 1u64))
        .unwrap_err();
    assert!(e.to_string().contains("cfg.nope"), "{e}");
    assert_eq!(codes(e), ["E0503"]);
    let e = m
        .compile(&Specialization::new("@configured").with_config("cfg.width", 1.5f32))
        .unwrap_err();
    assert_eq!(codes(e), ["E0507"]);
    let mut spec = Specialization::new("@configured");
    spec.set_config("cfg.factor", ConfigValue::I32(2));
    spec.set_config("cfg.width", ConfigValue::Index(1 << 40));
    assert_eq!(codes(m.compile(&spec).unwrap_err()), ["E0507", "E0507"]);
}

#[test]
fn workgroup_size_must_fit_the_target() {
    let c = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    let m = c.module(&config_source()).unwrap();
    let spec = Specialization::new("@configured").with_config("cfg.width", 2048u64);
    assert_eq!(codes(m.compile(&spec).unwrap_err()), ["E0511"]);
    let spec = Specialization::new("@configured").with_config("cfg.width", 0u64);
    assert!(m.compile(&spec).is_err());
}

#[test]
fn unknown_kernel_is_an_error() {
    let c = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    let m = c.module(&config_source()).unwrap();
    let e = m.compile(&Specialization::new("@missing")).unwrap_err();
    assert!(e.to_string().contains("@configured"), "{e}");
    assert_eq!(codes(e), ["E0510"]);
}

#[test]
fn memory_cache_is_shared_by_clones() {
    let c = Compiler::for_target(None, &Target::lavapipe()).unwrap();
    let clone = c.clone();
    let m = c.module(&config_source()).unwrap();
    let spec = Specialization::new("@configured").with_config("cfg.width", 32u64);
    let a = m.compile(&spec).unwrap();
    let m2 = clone.module(&config_source()).unwrap();
    let b = m2.compile(&spec).unwrap();
    assert_eq!(a, b);
    let s = c.cache_stats();
    assert_eq!((s.compiles, s.memory_hits, s.disk_hits), (1, 1, 0));
    // A different config or target is a different entry.
    m.compile(&Specialization::new("@configured")).unwrap();
    assert_eq!(c.cache_stats().compiles, 2);
    let h = Compiler::for_target(None, &Target::hopper()).unwrap();
    h.module(&config_source()).unwrap().compile(&spec).unwrap();
    assert_eq!(h.cache_stats().compiles, 1);
}

#[test]
fn disk_cache_survives_compilers_and_ignores_corruption() {
    let dir = common::temp_path("disk-cache");
    let spec = Specialization::new("@configured").with_config("cfg.width", 256u64);
    let first = Compiler::for_target(Some(&dir), &Target::lavapipe()).unwrap();
    let m = first.module(&config_source()).unwrap();
    let a = m.compile(&spec).unwrap();
    let path = first.cache_path(&m, &spec).unwrap();
    assert!(path.exists());
    assert_eq!(first.cache_stats().compiles, 1);

    let second = Compiler::for_target(Some(&dir), &Target::lavapipe()).unwrap();
    let b = second
        .module(&config_source())
        .unwrap()
        .compile(&spec)
        .unwrap();
    assert_eq!(a, b);
    let s = second.cache_stats();
    assert_eq!((s.compiles, s.disk_hits), (0, 1));

    // Flip one byte of the payload: the entry must not be trusted.
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let third = Compiler::for_target(Some(&dir), &Target::lavapipe()).unwrap();
    let c = third
        .module(&config_source())
        .unwrap()
        .compile(&spec)
        .unwrap();
    assert_eq!(c, a);
    assert_eq!(third.cache_stats().compiles, 1, "corrupt entry recompiled");
    // ...and rewritten, so the next compiler hits the disk again.
    let fourth = Compiler::for_target(Some(&dir), &Target::lavapipe()).unwrap();
    fourth
        .module(&config_source())
        .unwrap()
        .compile(&spec)
        .unwrap();
    assert_eq!(fourth.cache_stats().disk_hits, 1);
    // No temporary files are left behind.
    let leftovers = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .to_string_lossy()
                .contains(".tmp.")
        })
        .count();
    assert_eq!(leftovers, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compiler_is_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Compiler>();
    check::<hrx_loom::Module>();
    check::<hrx_loom::Artifact>();
}
