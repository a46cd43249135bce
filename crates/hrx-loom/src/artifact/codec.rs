//! A small, versioned binary encoding of [`Artifact`] for the disk cache.
//!
//! Little-endian, length-prefixed; decoding checks every length and tag and
//! returns `None` on anything unexpected (the cache then recompiles).

use super::{Access, Artifact, Binding, PushConstant, ScalarType};
use crate::launch::{LaunchBinary, LaunchCmp, LaunchInst, LaunchProgram};

const VERSION: u32 = 1;

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn str(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    /// A count that cannot exceed the bytes left (each item takes at least
    /// one byte), so a corrupt count cannot trigger a huge allocation.
    fn count(&mut self) -> Option<usize> {
        let n = self.u32()? as usize;
        (n <= self.0.len()).then_some(n)
    }
}

const SCALARS: [ScalarType; 6] = [
    ScalarType::Index,
    ScalarType::Offset,
    ScalarType::Bool,
    ScalarType::I32,
    ScalarType::U32,
    ScalarType::F32,
];
const BINARIES: [LaunchBinary; 7] = [
    LaunchBinary::Add,
    LaunchBinary::Sub,
    LaunchBinary::Mul,
    LaunchBinary::Div,
    LaunchBinary::Rem,
    LaunchBinary::Min,
    LaunchBinary::Max,
];
const CMPS: [LaunchCmp; 6] = [
    LaunchCmp::Eq,
    LaunchCmp::Ne,
    LaunchCmp::Lt,
    LaunchCmp::Le,
    LaunchCmp::Gt,
    LaunchCmp::Ge,
];

fn tag<T: PartialEq>(table: &[T], v: &T) -> u8 {
    table.iter().position(|t| t == v).unwrap_or(0) as u8
}

fn untag<T: Copy>(table: &[T], t: u8) -> Option<T> {
    table.get(t as usize).copied()
}

pub(super) fn encode(a: &Artifact) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(a.spirv.len() * 4 + 256));
    w.u32(VERSION);
    w.str(&a.kernel);
    w.str(&a.entry_point);
    w.u32(a.spirv.len() as u32);
    for &word in &a.spirv {
        w.u32(word);
    }
    w.u32(a.bindings.len() as u32);
    for b in &a.bindings {
        w.u32(b.index);
        w.str(&b.name);
        w.u8(match b.access {
            Access::Read => 0,
            Access::ReadWrite => 1,
            Access::Write => 2,
        });
        match b.min_bytes {
            Some(n) => {
                w.u8(1);
                w.u64(n);
            }
            None => w.u8(0),
        }
        w.u32(b.element_bytes);
        w.u32(b.alignment);
    }
    w.u32(a.push_constants.len() as u32);
    for p in &a.push_constants {
        w.str(&p.name);
        w.u8(tag(&SCALARS, &p.ty));
        w.u32(p.offset);
    }
    w.u32(a.push_constant_bytes);
    a.workgroup_size.iter().for_each(|&s| w.u32(s));
    encode_launch(&mut w, &a.launch);
    w.0
}

fn encode_launch(w: &mut Writer, l: &LaunchProgram) {
    w.u32(l.arg_count);
    w.u32(l.insts.len() as u32);
    for inst in &l.insts {
        match inst {
            LaunchInst::Const(c) => {
                w.u8(0);
                w.u64(*c);
            }
            LaunchInst::Arg(a) => {
                w.u8(1);
                w.u32(*a);
            }
            LaunchInst::Binary(op, a, b) => {
                w.u8(2);
                w.u8(tag(&BINARIES, op));
                w.u32(*a);
                w.u32(*b);
            }
            LaunchInst::Madd(a, b, c) | LaunchInst::Select(a, b, c) => {
                w.u8(if matches!(inst, LaunchInst::Madd(..)) {
                    3
                } else {
                    5
                });
                w.u32(*a);
                w.u32(*b);
                w.u32(*c);
            }
            LaunchInst::Cmp(p, a, b) => {
                w.u8(4);
                w.u8(tag(&CMPS, p));
                w.u32(*a);
                w.u32(*b);
            }
            LaunchInst::Narrow32(a) => {
                w.u8(6);
                w.u32(*a);
            }
        }
    }
    l.workgroups.iter().for_each(|&r| w.u32(r));
}

pub(super) fn decode(bytes: &[u8]) -> Option<Artifact> {
    let mut r = Reader(bytes);
    if r.u32()? != VERSION {
        return None;
    }
    let kernel = r.str()?;
    let entry_point = r.str()?;
    let words = r.u32()? as usize;
    if words.checked_mul(4)? > r.0.len() {
        return None;
    }
    let spirv = (0..words).map(|_| r.u32()).collect::<Option<Vec<_>>>()?;
    let mut bindings = Vec::new();
    for _ in 0..r.count()? {
        let index = r.u32()?;
        let name = r.str()?;
        let access = match r.u8()? {
            0 => Access::Read,
            1 => Access::ReadWrite,
            2 => Access::Write,
            _ => return None,
        };
        let min_bytes = match r.u8()? {
            0 => None,
            1 => Some(r.u64()?),
            _ => return None,
        };
        bindings.push(Binding {
            index,
            name,
            access,
            min_bytes,
            element_bytes: r.u32()?,
            alignment: r.u32()?,
        });
    }
    let mut push_constants = Vec::new();
    for _ in 0..r.count()? {
        push_constants.push(PushConstant {
            name: r.str()?,
            ty: untag(&SCALARS, r.u8()?)?,
            offset: r.u32()?,
        });
    }
    let push_constant_bytes = r.u32()?;
    let workgroup_size = [r.u32()?, r.u32()?, r.u32()?];
    let launch = decode_launch(&mut r)?;
    launch.check().ok()?;
    r.0.is_empty().then_some(Artifact {
        kernel,
        spirv,
        entry_point,
        bindings,
        push_constants,
        push_constant_bytes,
        workgroup_size,
        launch,
    })
}

fn decode_launch(r: &mut Reader) -> Option<LaunchProgram> {
    let arg_count = r.u32()?;
    let mut insts = Vec::new();
    for _ in 0..r.count()? {
        insts.push(match r.u8()? {
            0 => LaunchInst::Const(r.u64()?),
            1 => LaunchInst::Arg(r.u32()?),
            2 => LaunchInst::Binary(untag(&BINARIES, r.u8()?)?, r.u32()?, r.u32()?),
            3 => LaunchInst::Madd(r.u32()?, r.u32()?, r.u32()?),
            4 => LaunchInst::Cmp(untag(&CMPS, r.u8()?)?, r.u32()?, r.u32()?),
            5 => LaunchInst::Select(r.u32()?, r.u32()?, r.u32()?),
            6 => LaunchInst::Narrow32(r.u32()?),
            _ => return None,
        });
    }
    let workgroups = [r.u32()?, r.u32()?, r.u32()?];
    Some(LaunchProgram {
        arg_count,
        insts,
        workgroups,
    })
}
