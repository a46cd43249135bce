//! The benchmarked operators and shapes, the same list as
//! `bench/pytorch/tensor_ops.py` (the keys must match).

use hrx_runtime::Graph;
use hrx_tensor::{
    DType, DeviceTensor, Ops, Result,
    ops::{BinaryOp, MatmulOptions, UnaryOp},
};

/// What one case measures.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Add {
        n: usize,
    },
    Gelu {
        n: usize,
    },
    Softmax {
        rows: usize,
        cols: usize,
    },
    LayerNorm {
        rows: usize,
        cols: usize,
    },
    Matmul {
        dtype: DType,
        m: usize,
        k: usize,
        n: usize,
    },
}

/// One case: the operator and shape, its key, and the goal from issue 4.
#[derive(Clone, Debug)]
pub struct Case {
    pub kind: Kind,
    pub key: String,
    pub name: String,
    pub goal: f64,
}

/// Shapes: the on a GPU, smaller ones for lavapipe (`--small`).
pub fn cases(small: bool) -> Vec<Case> {
    let (n, rows, cols, big, decode_kn) = if small {
        (1 << 22, 1024, 1024, 256, 512)
    } else {
        (1 << 28, 8192, 8192, 8192, 4096)
    };
    let mut out = vec![
        case(Kind::Add { n }, 0.95),
        case(Kind::Gelu { n }, 0.95),
        case(Kind::Softmax { rows, cols }, 1.0),
        case(Kind::LayerNorm { rows, cols }, 1.0),
        case(
            Kind::Matmul {
                dtype: DType::F32,
                m: big,
                k: big,
                n: big,
            },
            0.5,
        ),
        case(
            Kind::Matmul {
                dtype: DType::F16,
                m: big,
                k: big,
                n: big,
            },
            0.4,
        ),
    ];
    for m in [1, 2, 4, 8, 16, 32, 64] {
        out.push(case(
            Kind::Matmul {
                dtype: DType::F16,
                m,
                k: decode_kn,
                n: decode_kn,
            },
            0.8,
        ));
    }
    out
}

fn case(kind: Kind, goal: f64) -> Case {
    let (key, name) = match kind {
        Kind::Add { n } => (format!("add_f32_{n}"), format!("add f32 [{n}]")),
        Kind::Gelu { n } => (format!("gelu_f32_{n}"), format!("gelu (erf) f32 [{n}]")),
        Kind::Softmax { rows, cols } => (
            format!("softmax_f32_{rows}x{cols}"),
            format!("softmax f32 [{rows}, {cols}]"),
        ),
        Kind::LayerNorm { rows, cols } => (
            format!("layer_norm_f32_{rows}x{cols}"),
            format!("layer norm f32 [{rows}, {cols}] (weight, bias)"),
        ),
        Kind::Matmul { dtype, m, k, n } => {
            let t = if dtype == DType::F16 { "f16" } else { "f32" };
            (
                format!("matmul_{t}_{m}x{k}x{n}"),
                format!("matmul {t} m={m} k={k} n={n}"),
            )
        }
    };
    Case {
        kind,
        key,
        name,
        goal,
    }
}

impl Kind {
    /// GB/s counts bytes read plus bytes written once each; TFLOP/s counts
    /// 2 m n k.
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Matmul { .. } => "TFLOP/s",
            _ => "GB/s",
        }
    }

    /// Work per operation in the unit's numerator (GB or TFLOP).
    pub fn work(self) -> f64 {
        let f = 4.0;
        match self {
            Kind::Add { n } => 3.0 * n as f64 * f / 1e9,
            Kind::Gelu { n } => 2.0 * n as f64 * f / 1e9,
            Kind::Softmax { rows, cols } => 2.0 * (rows * cols) as f64 * f / 1e9,
            Kind::LayerNorm { rows, cols } => 2.0 * (rows * cols + cols) as f64 * f / 1e9,
            Kind::Matmul { m, k, n, .. } => 2.0 * (m * k) as f64 * n as f64 / 1e12,
        }
    }
}

/// A case's tensors, allocated and filled once, and how to record one
/// operation on them.
pub struct Prepared {
    kind: Kind,
    inputs: Vec<DeviceTensor>,
    out: DeviceTensor,
}

fn tensor(ops: &Ops, dtype: DType, shape: Vec<usize>) -> Result<DeviceTensor> {
    ops.output(hrx_tensor::TensorDesc::new(dtype, shape)?)
}

/// Words that fill inputs: small non-zero values (1.0625 in f32, 0.5 and
/// 1.0 in f16) so no kernel sees zeros or overflows.
fn pattern(dtype: DType) -> u32 {
    match dtype {
        DType::F16 => 0x3c00_3800,
        _ => 0x3f88_0000,
    }
}

impl Prepared {
    /// Allocate and fill the inputs and the output of `kind`.
    pub fn new(ops: &Ops, kind: Kind) -> Result<Prepared> {
        let f32 = DType::F32;
        let (inputs, out) = match kind {
            Kind::Add { n } => (
                vec![tensor(ops, f32, vec![n])?, tensor(ops, f32, vec![n])?],
                tensor(ops, f32, vec![n])?,
            ),
            Kind::Gelu { n } => (vec![tensor(ops, f32, vec![n])?], tensor(ops, f32, vec![n])?),
            Kind::Softmax { rows, cols } => (
                vec![tensor(ops, f32, vec![rows, cols])?],
                tensor(ops, f32, vec![rows, cols])?,
            ),
            Kind::LayerNorm { rows, cols } => (
                vec![
                    tensor(ops, f32, vec![rows, cols])?,
                    tensor(ops, f32, vec![cols])?,
                    tensor(ops, f32, vec![cols])?,
                ],
                tensor(ops, f32, vec![rows, cols])?,
            ),
            Kind::Matmul { dtype, m, k, n } => (
                vec![
                    tensor(ops, dtype, vec![m, k])?,
                    tensor(ops, dtype, vec![k, n])?,
                ],
                // f16 inputs accumulate in f32; the output dtype is the
                // operator's choice, found by trying (see `record`).
                tensor(ops, f32, vec![m, n])?,
            ),
        };
        let mut graph = ops.runtime().graph();
        for t in &inputs {
            if let Some((storage, _)) = t.storage() {
                graph.fill(storage.clone(), pattern(t.desc().dtype()))?;
            }
        }
        graph.prepare()?.submit()?.wait()?;
        let mut prepared = Prepared { kind, inputs, out };
        prepared.pick_output(ops)?;
        Ok(prepared)
    }

    /// Matmul of f16 may write f16 or f32; keep the output it accepts.
    fn pick_output(&mut self, ops: &Ops) -> Result<()> {
        let Kind::Matmul {
            dtype: DType::F16,
            m,
            n,
            ..
        } = self.kind
        else {
            return Ok(());
        };
        let mut probe = ops.runtime().graph();
        match self.record(ops, &mut probe) {
            Err(hrx_tensor::Error::Unsupported(why)) => Err(hrx_tensor::Error::Unsupported(why)),
            Err(_) => {
                self.out = tensor(ops, DType::F16, vec![m, n])?;
                let mut probe = ops.runtime().graph();
                self.record(ops, &mut probe)
            }
            Ok(()) => Ok(()),
        }
    }

    /// Record one operation of the case into `graph`.
    pub fn record(&self, ops: &Ops, graph: &mut Graph) -> Result<()> {
        let i = &self.inputs;
        match self.kind {
            Kind::Add { .. } => ops.record_binary(graph, BinaryOp::Add, &i[0], &i[1], &self.out),
            Kind::Gelu { .. } => ops.record_unary(graph, UnaryOp::Gelu, &i[0], &self.out),
            Kind::Softmax { .. } => ops.record_softmax(graph, &i[0], &self.out),
            Kind::LayerNorm { .. } => {
                ops.record_layer_norm(graph, &i[0], Some(&i[1]), Some(&i[2]), 1e-5, &self.out)
            }
            Kind::Matmul { .. } => ops.record_matmul(
                graph,
                &i[0],
                &i[1],
                None,
                MatmulOptions::default(),
                &self.out,
            ),
        }
    }

    /// The output, for a sanity check after timing.
    pub fn out(&self) -> &DeviceTensor {
        &self.out
    }
}
