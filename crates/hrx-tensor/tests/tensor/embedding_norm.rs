//! The embeddings' one-dispatch layer norm (`record_embedding_layer_norm`)
//! against the three dispatches it replaces (gather, add of the position
//! rows, layer norm: bit for bit, the norm taking the same subgroup-a-row
//! form) and against an f64 reference (within 1e-5 of the row's largest
//! output, the layer norm's tolerance in `add_norm.rs`); ids outside the
//! table (past it and negative) add a row of zeros; rows of 36 columns
//! (a lane's last quads past the row on lavapipe) and 384 (MiniLM's);
//! with and without the norm's parameters and the f16 copy (the f32
//! output rounded once). Then its refusals and errors.

use crate::common::*;
use hrx_core::Error;
use hrx_runtime::Graph;
use hrx_tensor::{
    DType, DeviceTensor, TensorDesc,
    ops::{BinaryOp, EmbeddingNorm},
};

const EPS: f32 = 1e-5;

/// The inputs of one case: table, positions, ids, weight and bias.
struct Case {
    table: DeviceTensor,
    positions: DeviceTensor,
    ids: DeviceTensor,
    weight: DeviceTensor,
    bias: DeviceTensor,
    /// Their values, for the reference.
    values: [Vec<f64>; 5],
    dims: (usize, usize, usize, usize),
}

fn case(vocab: usize, batch: usize, seq: usize, d: usize, seed: u64) -> Case {
    let mut rng = Gen::new(seed);
    let table = values(&mut rng, vocab * d, -1.0, 1.0);
    let positions = values(&mut rng, seq * d, -0.5, 0.5);
    let weight = values(&mut rng, d, 0.5, 1.5);
    let bias = values(&mut rng, d, -0.5, 0.5);
    // Every id in the table once or more, then one past it and -1.
    let mut ids: Vec<f64> = (0..batch * seq).map(|i| ((i * 7) % vocab) as f64).collect();
    ids[1] = vocab as f64;
    ids[batch * seq - 1] = -1.0;
    let f32s = |shape: &[usize], v: &[f64]| input(DType::F32, shape, v, Placement::Contiguous);
    Case {
        table: f32s(&[vocab, d], &table),
        positions: f32s(&[seq, d], &positions),
        ids: input(DType::I32, &[batch, seq], &ids, Placement::Contiguous),
        weight: f32s(&[d], &weight),
        bias: f32s(&[d], &bias),
        values: [table, positions, ids, weight, bias],
        dims: (vocab, batch, seq, d),
    }
}

/// A poisoned output of `dtype` and `shape`.
fn output(dtype: DType, shape: &[usize]) -> DeviceTensor {
    let rt = ops().runtime().clone();
    let desc = TensorDesc::new(dtype, shape.to_vec()).unwrap();
    let storage = rt
        .allocate(
            desc.bytes().div_ceil(4) * 4,
            hrx_runtime::MemoryPlacement::GpuLocal,
        )
        .unwrap();
    let mut graph = rt.graph();
    graph.fill(storage.view(), poison(dtype)).unwrap();
    let done = graph.prepare().unwrap().submit_after(&[]).unwrap();
    DeviceTensor::from_parts(rt, desc, Some(storage.view()), done).unwrap()
}

/// Record into one graph after the case's inputs and every output's fill;
/// read the outputs back.
fn run_all(
    c: &Case,
    outs: &mut [DeviceTensor],
    record: impl FnOnce(&mut Graph, &[DeviceTensor]),
) -> Vec<Vec<f64>> {
    let mut graph = ops().runtime().graph();
    record(&mut graph, outs);
    let deps: Vec<_> = [&c.table, &c.positions, &c.ids, &c.weight, &c.bias]
        .into_iter()
        .chain(outs.iter())
        .map(|t| t.completion().clone())
        .collect();
    let done = graph.prepare().unwrap().submit_after(&deps).unwrap();
    outs.iter_mut()
        .map(|t| {
            t.set_producer(done.clone());
            t.to_values().unwrap()
        })
        .collect()
}

/// The f64 reference: `layer_norm(table[id] + positions[s]) * w + b`.
fn reference(c: &Case, params: bool) -> Vec<f64> {
    let (vocab, _, seq, d) = c.dims;
    let [table, positions, ids, weight, bias] = &c.values;
    let mut out = Vec::new();
    for (r, &id) in ids.iter().enumerate() {
        let s = r % seq;
        let row: Vec<f64> = (0..d)
            .map(|j| {
                let t = if id >= 0.0 && (id as usize) < vocab {
                    table[id as usize * d + j]
                } else {
                    0.0
                };
                // The kernel adds in f32.
                (t as f32 + positions[s * d + j] as f32) as f64
            })
            .collect();
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + f64::from(EPS)).sqrt();
        out.extend(row.iter().enumerate().map(|(j, x)| {
            let y = (x - mean) * rstd;
            if params { y * weight[j] + bias[j] } else { y }
        }));
    }
    out
}

#[test]
fn one_dispatch_equals_gather_add_and_norm() {
    let o = ops();
    for (d, seed) in [(36, 1), (384, 2)] {
        let c = case(11, 3, 5, d, seed);
        let shape = [3, 5, d];
        for (params, copy) in [(true, false), (false, false), (true, true)] {
            let what = format!("d {d} params {params} copy {copy}");
            let norm = EmbeddingNorm {
                table: &c.table,
                positions: &c.positions,
                weight: params.then_some(&c.weight),
                bias: params.then_some(&c.bias),
                eps: EPS,
            };
            let mut outs = vec![output(DType::F32, &shape)];
            if copy {
                outs.push(output(DType::F16, &shape));
            }
            let fused = run_all(&c, &mut outs, |g, outs| {
                o.record_embedding_layer_norm(g, &norm, &c.ids, &outs[0], outs.get(1))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            });
            let mut parts = vec![
                output(DType::F32, &shape),
                output(DType::F32, &shape),
                output(DType::F32, &shape),
            ];
            let composed = run_all(&c, &mut parts, |g, p| {
                o.record_gather(g, &c.table, &c.ids, &p[0]).unwrap();
                o.record_binary(g, BinaryOp::Add, &p[0], &c.positions, &p[1])
                    .unwrap();
                o.record_layer_norm(g, &p[1], norm.weight, norm.bias, EPS, &p[2])
                    .unwrap();
            });
            assert_eq!(
                fused[0], composed[2],
                "{what}: against the three dispatches"
            );
            let want = reference(&c, params);
            let largest = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            for (i, (g, w)) in fused[0].iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * largest.max(1.0),
                    "{what}: element {i}: {g} against {w}"
                );
            }
            if copy {
                for (i, (h, x)) in fused[1].iter().zip(&fused[0]).enumerate() {
                    let rounded = f64::from(half::f16::from_f64(*x));
                    assert_eq!(*h, rounded, "{what}: copy element {i}");
                }
            }
        }
    }
}

#[test]
fn refusals_record_nothing_and_errors_name_the_problem() {
    let o = ops();
    let c = case(11, 2, 4, 36, 3);
    let out = output(DType::F32, &[2, 4, 36]);
    let norm = |table, positions| EmbeddingNorm {
        table,
        positions,
        weight: None,
        bias: None,
        eps: EPS,
    };
    let record = |norm: &EmbeddingNorm, ids: &DeviceTensor, out: &DeviceTensor| {
        let mut graph = ops().runtime().graph();
        let e = o
            .record_embedding_layer_norm(&mut graph, norm, ids, out, None)
            .unwrap_err();
        assert!(graph.is_empty(), "{e}: nothing recorded");
        e
    };
    // Rows of 6 columns are not whole quads: unsupported.
    let narrow = case(11, 2, 4, 6, 4);
    let out6 = output(DType::F32, &[2, 4, 6]);
    let e = record(&norm(&narrow.table, &narrow.positions), &narrow.ids, &out6);
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    // Positions for another sequence length.
    let e = record(&norm(&c.table, &c.table), &c.ids, &out);
    assert!(
        e.to_string().contains("positions must have shape [4, 36]"),
        "{e}"
    );
    // f32 ids.
    let ids = input(DType::F32, &[2, 4], &[0.0; 8], Placement::Contiguous);
    let e = record(&norm(&c.table, &c.positions), &ids, &out);
    assert!(e.to_string().contains("ids must be i32"), "{e}");
    // An output of the wrong shape, and an output over the table.
    let e = record(
        &norm(&c.table, &c.positions),
        &c.ids,
        &output(DType::F32, &[8, 36]),
    );
    assert!(!matches!(e, Error::Unsupported(_)), "{e}");
    let over = c
        .table
        .slice(0, 0..8)
        .unwrap()
        .reshape(vec![2, 4, 36])
        .unwrap();
    let e = record(&norm(&c.table, &c.positions), &c.ids, &over);
    assert!(e.to_string().contains("out"), "{e}");
}

/// An empty table: no id is in it, so each row is its position's row
/// normalised, as the gather (which writes zeros) and the add give.
#[test]
fn an_empty_table_gives_the_position_rows() {
    let o = ops();
    let c = case(3, 2, 4, 36, 5);
    let empty = input(DType::F32, &[0, 36], &[], Placement::Contiguous);
    let norm = EmbeddingNorm {
        table: &empty,
        positions: &c.positions,
        weight: None,
        bias: None,
        eps: EPS,
    };
    let got = run_all(&c, &mut [output(DType::F32, &[2, 4, 36])], |g, outs| {
        o.record_embedding_layer_norm(g, &norm, &c.ids, &outs[0], None)
            .unwrap();
    });
    let positions = &c.values[1];
    for (r, row) in got[0].chunks(36).enumerate() {
        let p = &positions[(r % 4) * 36..(r % 4 + 1) * 36];
        let mean = p.iter().sum::<f64>() / 36.0;
        let var = p.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 36.0;
        let rstd = 1.0 / (var + f64::from(EPS)).sqrt();
        for (g, x) in row.iter().zip(p) {
            assert!((g - (x - mean) * rstd).abs() < 1e-5, "row {r}: {g}");
        }
    }
}
