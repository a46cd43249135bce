//! Shared helpers for operator tests: random inputs in several layouts,
//! poisoned outputs, running a recorded operator, comparing with an f64
//! reference (within error bounds, see `bounds`).

#![allow(dead_code)]

pub mod bounds;
pub mod cases;
pub mod matmul;

use hrx_runtime::{Graph, Runtime};
use hrx_tensor::{DType, DeviceTensor, Ops, Result, TensorDesc};

/// The runtime and operator library of the calling test's thread (cheap
/// clones share it), so kernels compile once per test. Per thread, not per
/// process: a thread's library is dropped when its test ends, so no device
/// outlives the tests; a device still open when the process exits races
/// the driver's and validation layer's teardown (seen: crashes at exit).
pub fn ops() -> Ops {
    thread_local! {
        static OPS: Ops = Ops::new(&Runtime::from_env().expect("runtime"));
    }
    OPS.with(Ops::clone)
}

/// A small deterministic generator (xorshift64*).
pub struct Gen(u64);

impl Gen {
    pub fn new(seed: u64) -> Self {
        Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// Uniform in [lo, hi) but never within 0.05 of zero (no all-zero data).
    pub fn nonzero(&mut self, lo: f64, hi: f64) -> f64 {
        loop {
            let v = self.uniform(lo, hi);
            if v.abs() > 0.05 {
                return v;
            }
        }
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// How an input tensor sits in memory.
#[derive(Clone, Copy, Debug)]
pub enum Placement {
    /// Packed row-major from byte 0.
    Contiguous,
    /// A slice of a wider tensor (padding on the last axis, starting one
    /// element in, so rows have gaps and the start is unaligned).
    Padded,
    /// The last two axes stored transposed.
    Transposed,
}

pub const PLACEMENTS: [Placement; 3] = [
    Placement::Contiguous,
    Placement::Padded,
    Placement::Transposed,
];

/// Upload `values` (row-major for `shape`) as a tensor laid out as asked.
pub fn input(dtype: DType, shape: &[usize], values: &[f64], placement: Placement) -> DeviceTensor {
    let rt = &ops().runtime().clone();
    let rank = shape.len();
    match placement {
        Placement::Padded if rank > 0 => {
            let mut wide = shape.to_vec();
            wide[rank - 1] += 3;
            let desc = TensorDesc::new(dtype, wide.clone()).unwrap();
            let mut data = vec![7.5; desc.elements()];
            let inner = shape[rank - 1];
            for (i, v) in values.iter().enumerate() {
                let row = i / inner.max(1);
                data[row * wide[rank - 1] + 1 + i % inner.max(1)] = *v;
            }
            let t = DeviceTensor::from_values(rt, dtype, wide, &data).unwrap();
            t.slice(rank - 1, 1..1 + inner).unwrap()
        }
        Placement::Transposed if rank > 1 => {
            let mut stored = shape.to_vec();
            stored.swap(rank - 1, rank - 2);
            let (r, c) = (shape[rank - 2], shape[rank - 1]);
            let mut data = vec![0.0; values.len()];
            for (i, v) in values.iter().enumerate() {
                let (b, rem) = (i / (r * c).max(1), i % (r * c).max(1));
                let (y, x) = (rem / c.max(1), rem % c.max(1));
                data[b * r * c + x * r + y] = *v;
            }
            let t = DeviceTensor::from_values(rt, dtype, stored, &data).unwrap();
            let mut strides = t.desc().strides().to_vec();
            strides.swap(rank - 1, rank - 2);
            let desc = TensorDesc::strided(dtype, shape.to_vec(), strides).unwrap();
            t.view(0, desc).unwrap()
        }
        _ => DeviceTensor::from_values(rt, dtype, shape.to_vec(), values).unwrap(),
    }
}

/// Random non-zero values.
pub fn values(rng: &mut Gen, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n).map(|_| rng.nonzero(lo, hi)).collect()
}

/// A NaN bit pattern filling a word, for poisoning outputs of `dtype`.
pub fn poison(dtype: DType) -> u32 {
    match dtype {
        DType::F16 | DType::BF16 => 0x7E01_7E01,
        DType::I32 | DType::U32 | DType::I64 | DType::U8 | DType::I8 => 0xDEAD_BEEF,
        DType::F32 => 0x7FC0_0001,
    }
}

/// Allocate `desc` (storage rounded up to whole words), fill it with NaN
/// patterns, run `record` into the same graph after the inputs' producers,
/// and read the output back.
pub fn run(
    inputs: &[&DeviceTensor],
    desc: TensorDesc,
    record: impl FnOnce(&mut Graph, &DeviceTensor) -> Result<()>,
) -> Result<Vec<f64>> {
    let rt = &ops().runtime().clone();
    let mut out = if desc.is_empty() {
        ops().output(desc)?
    } else {
        let words = desc.bytes().div_ceil(4) * 4;
        let storage = rt.allocate(words, hrx_runtime::MemoryPlacement::GpuLocal)?;
        DeviceTensor::from_parts(
            rt.clone(),
            desc,
            Some(storage.view()),
            hrx_runtime::Completion::ready(),
        )?
    };
    let mut graph = rt.graph();
    if let Some((storage, _)) = out.storage() {
        graph.fill(storage.clone(), poison(out.desc().dtype()))?;
    }
    record(&mut graph, &out)?;
    let deps: Vec<_> = inputs.iter().map(|t| t.completion().clone()).collect();
    out.set_producer(graph.prepare()?.submit_after(&deps)?);
    out.to_values()
}

/// Assert `|got - want| <= atol + rtol * |want|` element by element
/// (NaN only where the reference is NaN).
pub fn assert_close(got: &[f64], want: &[f64], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// Row-major multi-index of flat index `i` in `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (axis, &d) in shape.iter().enumerate().rev() {
        index[axis] = i % d.max(1);
        i /= d.max(1);
    }
    index
}

/// Flat row-major index of `index` in `shape`, with broadcasting (an axis
/// of extent 1 reads index 0; `index` may have more leading axes).
pub fn ravel_broadcast(index: &[usize], shape: &[usize]) -> usize {
    let pad = index.len() - shape.len();
    shape.iter().enumerate().fold(0, |acc, (axis, &d)| {
        acc * d + if d == 1 { 0 } else { index[pad + axis] }
    })
}

/// A contiguous tensor of `dtype` and `shape` that passes every shape,
/// dtype and domain check but cannot be bound: its storage view starts 4
/// bytes into an allocation, off the device's storage offset alignment.
pub fn unbindable(dtype: DType, shape: &[usize]) -> DeviceTensor {
    let rt = &ops().runtime().clone();
    let align = rt.gpu().unwrap().target().storage_buffer_offset_alignment;
    assert!(align > 4, "a 4-byte offset is bindable on this device");
    let desc = TensorDesc::new(dtype, shape.to_vec()).unwrap();
    let storage = rt
        .allocate(desc.bytes() + 4, hrx_runtime::MemoryPlacement::GpuLocal)
        .unwrap();
    let view = storage.view().slice(4..desc.bytes() + 4).unwrap();
    DeviceTensor::from_parts(
        rt.clone(),
        desc,
        Some(view),
        hrx_runtime::Completion::ready(),
    )
    .unwrap()
}
