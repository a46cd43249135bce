//! The compile cache: artifacts keyed by (source, symbol, config, target),
//! in memory (shared by clones of a `Compiler`) and optionally on disk.
//!
//! Disk entries are written atomically (a temporary file in the same
//! directory, then a rename) and verified on read: a header carries a magic
//! tag, the full key and a checksum of the payload. Anything that does not
//! verify is ignored and overwritten by the next compile, never trusted.

use crate::artifact::Artifact;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const MAGIC: &[u8; 8] = b"HRXLOOM1";
const HEADER: usize = 8 + 16 + 8 + 8;

/// A stable 128-bit FNV-1a hash. Written here (not `std`'s `DefaultHasher`,
/// whose output may change between Rust releases) because keys persist on
/// disk.
#[derive(Clone, Copy, Debug)]
pub struct StableHasher(u128);

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
}

impl StableHasher {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

    /// Mix raw bytes.
    pub fn bytes(&mut self, data: &[u8]) {
        for &b in data {
            self.0 ^= u128::from(b);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// Mix a length-prefixed field, so ("ab","c") and ("a","bc") differ.
    pub fn field(&mut self, data: &[u8]) {
        self.bytes(&(data.len() as u64).to_le_bytes());
        self.bytes(data);
    }

    /// The hash so far.
    pub fn finish(&self) -> u128 {
        self.0
    }
}

/// 64-bit FNV-1a, the payload checksum of disk entries.
fn checksum(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where a cache lookup was answered from (for tests and statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheHit {
    /// Found in memory.
    Memory,
    /// Found on disk (and now also in memory).
    Disk,
}

/// The shared cache state. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cache {
    memory: Arc<Mutex<HashMap<u128, Artifact>>>,
    dir: Option<PathBuf>,
}

impl Cache {
    /// A cache that also persists under `dir` (created if missing).
    pub(crate) fn new(dir: Option<&Path>) -> hrx_core::Result<Cache> {
        if let Some(d) = dir {
            std::fs::create_dir_all(d).map_err(|e| {
                hrx_core::Error::msg(format!("cannot create cache dir {}: {e}", d.display()))
            })?;
        }
        Ok(Cache {
            memory: Arc::default(),
            dir: dir.map(Path::to_path_buf),
        })
    }

    pub(crate) fn get(&self, key: u128) -> Option<(Artifact, CacheHit)> {
        if let Some(a) = self.lock().get(&key) {
            return Some((a.clone(), CacheHit::Memory));
        }
        let artifact = self.read_disk(key)?;
        self.lock().insert(key, artifact.clone());
        Some((artifact, CacheHit::Disk))
    }

    pub(crate) fn put(&self, key: u128, artifact: &Artifact) {
        self.lock().insert(key, artifact.clone());
        // A failed disk write only costs a later recompile: not an error.
        let _ = self.write_disk(key, artifact);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Artifact>> {
        // The map holds only complete entries; a poisoned lock is still valid.
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Path of the disk entry for `key`, if disk caching is on.
    pub(crate) fn path(&self, key: u128) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{key:032x}.hrxa")))
    }

    fn read_disk(&self, key: u128) -> Option<Artifact> {
        let bytes = std::fs::read(self.path(key)?).ok()?;
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return None;
        }
        let stored_key = u128::from_le_bytes(bytes[8..24].try_into().ok()?);
        let len = u64::from_le_bytes(bytes[24..32].try_into().ok()?);
        let sum = u64::from_le_bytes(bytes[32..40].try_into().ok()?);
        let payload = &bytes[HEADER..];
        if stored_key != key || len != payload.len() as u64 || sum != checksum(payload) {
            return None;
        }
        Artifact::decode(payload)
    }

    fn write_disk(&self, key: u128, artifact: &Artifact) -> std::io::Result<()> {
        let Some(path) = self.path(key) else {
            return Ok(());
        };
        let payload = artifact.encode();
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&key.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&checksum(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        // A unique temporary name per process and write, so concurrent
        // writers never interleave inside one file; rename is atomic.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp.{}.{n}", std::process::id()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::{Access, Binding, PushConstant, ScalarType};
    use crate::launch::{LaunchBinary, LaunchInst, LaunchProgram};

    fn sample() -> Artifact {
        Artifact {
            kernel: "k".into(),
            spirv: vec![0x0723_0203, 1, 2, 3],
            entry_point: "k".into(),
            bindings: vec![Binding {
                index: 0,
                name: "data".into(),
                access: Access::ReadWrite,
                min_bytes: Some(1024),
                element_bytes: 4,
                alignment: 4,
            }],
            push_constants: vec![PushConstant {
                name: "n".into(),
                ty: ScalarType::Index,
                offset: 0,
            }],
            push_constant_bytes: 4,
            workgroup_size: [64, 1, 1],
            launch: LaunchProgram {
                arg_count: 1,
                insts: vec![
                    LaunchInst::Arg(0),
                    LaunchInst::Const(64),
                    LaunchInst::Binary(LaunchBinary::Div, 0, 1),
                ],
                workgroups: [2, 1, 1],
            },
        }
    }

    #[test]
    fn codec_round_trips() {
        let a = sample();
        assert_eq!(Artifact::decode(&a.encode()), Some(a));
        for access in [Access::Read, Access::Write] {
            let mut a = sample();
            a.bindings[0].access = access;
            assert_eq!(Artifact::decode(&a.encode()), Some(a));
        }
    }

    #[test]
    fn codec_rejects_every_truncation_and_trailing_bytes() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert_eq!(Artifact::decode(&bytes[..n]), None, "prefix {n}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Artifact::decode(&long), None);
    }

    #[test]
    fn hasher_is_stable_and_length_prefixed() {
        let mut a = StableHasher::default();
        a.field(b"ab");
        a.field(b"c");
        let mut b = StableHasher::default();
        b.field(b"a");
        b.field(b"bc");
        assert_ne!(a.finish(), b.finish());
        // Published FNV-1a 128 test vectors: keys persist on disk, so the
        // hash must never change.
        assert_eq!(
            StableHasher::default().finish(),
            0x6c62272e07bb014262b821756295c58d
        );
        let mut c = StableHasher::default();
        c.bytes(b"a");
        assert_eq!(c.finish(), 0xd228cb696f1a8caf78912b704e4a8964);
    }

    #[test]
    fn corrupt_disk_entries_are_ignored() {
        let dir = std::env::temp_dir().join(format!("hrx-cache-unit-{}", std::process::id()));
        let cache = Cache::new(Some(&dir)).unwrap();
        let a = sample();
        cache.put(7, &a);
        let fresh = Cache::new(Some(&dir)).unwrap();
        assert_eq!(fresh.get(7), Some((a.clone(), CacheHit::Disk)));
        let path = cache.path(7).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Cache::new(Some(&dir)).unwrap().get(7).is_none());
        std::fs::write(&path, b"garbage").unwrap();
        assert!(Cache::new(Some(&dir)).unwrap().get(7).is_none());
        // A different key under the same file name is not trusted either.
        std::fs::copy(&path, cache.path(8).unwrap()).unwrap();
        cache.put(7, &a);
        std::fs::copy(cache.path(7).unwrap(), cache.path(8).unwrap()).unwrap();
        assert!(Cache::new(Some(&dir)).unwrap().get(8).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
