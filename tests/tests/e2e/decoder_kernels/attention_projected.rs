//! Rotary attention with the output projection in its dispatch
//! (`record_rotary_attention_projected`): the attended rows bit for bit
//! those of `record_rotary_attention`, the projection plus residual
//! against an f64 reference over them (one decode row, decode rows of
//! several slots with inactive ones, a prefill), a projection narrower
//! than the heads, replays, and the refusals.

use super::quant::{Gen, f32s, i32s, matrix, ops, random, refused};
use hrx_runtime::{Graph, Operation};
use hrx_tensor::ops::{AttentionOutput, Ops, QuantFormat, QuantMatrix, Rotary, Tuning};
use hrx_tensor::{DType, DeviceTensor, Result, TensorDesc};

/// A token row: its slot and position.
type Row = (i32, i32);

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HD: usize = 64;
const SLOTS: usize = 3;
const CAP: usize = 40;

/// The attention's operands: q `[rows, heads, hd]`, the caches, the rows'
/// slots and positions.
struct Case {
    q: DeviceTensor,
    caches: [DeviceTensor; 2],
    sequence: DeviceTensor,
    position: DeviceTensor,
    rows: usize,
}

impl Case {
    fn new(rows: &[(i32, i32)], rng: &mut Gen) -> Case {
        let n = rows.len();
        let csize = SLOTS * KV_HEADS * CAP * HD;
        let cache_shape = vec![SLOTS, KV_HEADS, CAP, HD];
        let caches = [0, 1].map(|_| f32s(&random(rng, csize, -1.0, 1.0), cache_shape.clone()));
        let seq: Vec<i32> = rows.iter().map(|r| r.0).collect();
        let pos: Vec<i32> = rows.iter().map(|r| r.1).collect();
        Case {
            q: f32s(&random(rng, n * HEADS * HD, -2.0, 2.0), vec![n, HEADS, HD]),
            caches,
            sequence: i32s(&seq),
            position: i32s(&pos),
            rows: n,
        }
    }

    fn inputs(&self) -> [&DeviceTensor; 4] {
        let [k, v] = &self.caches;
        [k, v, &self.sequence, &self.position]
    }

    fn completions(&self, more: &[&DeviceTensor]) -> Vec<hrx_runtime::Completion> {
        let [k, v, s, p] = self.inputs();
        [&self.q, k, v, s, p]
            .into_iter()
            .chain(more.iter().copied())
            .map(|t| t.completion().clone())
            .collect()
    }
}

const ROTARY: Rotary = Rotary {
    dims: HD,
    base: 1e5,
};
const SCALE: f32 = 0.125;

fn attended(case: &Case) -> Result<Vec<f64>> {
    let ops = ops();
    let mut out = ops.output(case.q.desc().clone())?;
    let [k, v, s, p] = case.inputs();
    let mut graph = ops.runtime().graph();
    ops.record_rotary_attention(&mut graph, &case.q, ROTARY, k, v, s, p, SCALE, &out)?;
    out.set_producer(graph.prepare()?.submit_after(&case.completions(&[]))?);
    out.to_values()
}

/// The projected form's attended rows and projection on `ops`, from two
/// replays of one prepared graph (which must agree), with the SPIR-V of
/// the kernel that ran.
fn projected_by(
    ops: &Ops,
    case: &Case,
    w: &QuantMatrix,
    residual: &DeviceTensor,
) -> Result<([Vec<f64>; 2], Vec<u32>)> {
    let mut out = ops.output(case.q.desc().clone())?;
    let mut h = ops.output(TensorDesc::new(DType::F32, vec![case.rows, w.rows()])?)?;
    let projection = AttentionOutput {
        weight: w,
        residual,
        out: &h,
    };
    let mut graph = ops.runtime().graph();
    let (q, inputs) = (&case.q, case.inputs());
    ops.record_rotary_attention_projected(&mut graph, q, ROTARY, inputs, SCALE, &out, projection)?;
    let spirv = match graph.operations().last() {
        Some(Operation::Dispatch { kernel, .. }) => kernel.spirv().to_vec(),
        _ => panic!("the projected attention recorded no dispatch"),
    };
    let graph = graph.prepare()?;
    let deps = case.completions(&[w.words(), residual]);
    let mut seen: Option<[Vec<f64>; 2]> = None;
    for _ in 0..2 {
        let done = graph.submit_after(&deps)?;
        out.set_producer(done.clone());
        h.set_producer(done);
        let run = [out.to_values()?, h.to_values()?];
        if let Some(first) = &seen {
            assert_eq!(first, &run, "a replay gave other results");
        }
        seen = Some(run);
    }
    Ok((seen.expect("two replays"), spirv))
}

/// Decode rows of several slots, inactive ones among them.
const DECODE: [Row; 5] = [(2, 9), (0, 0), (-1, 3), (1, 39), (2, -4)];

/// A prefill: 17 rows of one sequence.
fn prefill() -> Vec<Row> {
    (0..17).map(|p| (1, p + 3)).collect()
}

/// A case over `rows` with a projection of `width` columns by `format`:
/// the operands, the weight's values and the residual's.
struct Projected {
    case: Case,
    weight: QuantMatrix,
    values: Vec<f64>,
    residual: Vec<f64>,
    residual_t: DeviceTensor,
}

impl Projected {
    fn new(rows: &[Row], format: QuantFormat, width: usize, rng: &mut Gen) -> Projected {
        let case = Case::new(rows, rng);
        let (weight, values) = matrix(format, width, HEADS * HD, rng);
        let residual = random(rng, case.rows * width, -4.0, 4.0);
        let residual_t = f32s(&residual, vec![case.rows, width]);
        Projected {
            case,
            weight,
            values,
            residual,
            residual_t,
        }
    }

    /// [`projected_by`] on `ops` for this case.
    fn run(&self, ops: &Ops) -> Result<([Vec<f64>; 2], Vec<u32>)> {
        projected_by(ops, &self.case, &self.weight, &self.residual_t)
    }
}

#[test]
fn projected_attention_matches_attention_then_projection() -> Result<()> {
    let mut rng = Gen::new(41);
    let (decode, prefill) = (DECODE, prefill());
    let cases: [(&[Row], QuantFormat, usize); 4] = [
        (&[(2, 9)], QuantFormat::Q4_1, HEADS * HD),
        (&decode, QuantFormat::Q4_1, HEADS * HD),
        (&decode, QuantFormat::F16, 200),
        (&prefill, QuantFormat::Q8_0, 96),
    ];
    for (rows, format, width) in cases {
        let what = format!("{} rows, {format:?} [{width}, {}]", rows.len(), HEADS * HD);
        let p = Projected::new(rows, format, width, &mut rng);
        let ([out, h], _) = p.run(&ops())?;
        assert_eq!(
            bits(&out),
            bits(&attended(&p.case)?),
            "{what}: attended rows"
        );
        check_projection(&what, &out, &h, (&p.values, &p.residual), width);
    }
    Ok(())
}

fn bits(v: &[f64]) -> Vec<u32> {
    v.iter().map(|&x| (x as f32).to_bits()).collect()
}

/// `h` against the f64 projection of the attended rows `out` by the
/// weight's values `wv` (`[width, heads * hd]`) plus the residual.
fn check_projection(
    what: &str,
    out: &[f64],
    h: &[f64],
    (wv, residual): (&[f64], &[f64]),
    width: usize,
) {
    assert!(out.iter().any(|&v| v != 0.0), "{what}: nothing attended");
    let columns = HEADS * HD;
    for r in 0..out.len() / columns {
        let a = &out[r * columns..(r + 1) * columns];
        for o in 0..width {
            let wr = &wv[o * columns..(o + 1) * columns];
            let dot: f64 = a.iter().zip(wr).map(|(x, y)| x * y).sum();
            let mag: f64 = a.iter().zip(wr).map(|(x, y)| (x * y).abs()).sum();
            let res = residual[r * width + o];
            let want = res + dot;
            let bound = 1e-4 * (mag + res.abs()) + 1e-30;
            let got = h[r * width + o];
            assert!(
                (got - want).abs() <= bound,
                "{what}: h[{r}, {o}] = {got}, want {want}"
            );
        }
    }
}

/// Workgroups of 256 work items stage a narrow projection's weights
/// (and each column's residual) in workgroup memory under the attention
/// (`Tuning::stage_projection`), and split a group of heads' projection
/// over several workgroups (`Tuning::attention_splits`): each variant is
/// another kernel, gives the bits of the plain one, and the reference's
/// projection.
#[test]
fn staged_and_split_projections_give_the_plain_bits() -> Result<()> {
    let mut rng = Gen::new(47);
    let (decode, prefill) = (DECODE, prefill());
    let cases: [(&[Row], QuantFormat, usize); 3] = [
        (&[(2, 9)], QuantFormat::Q4_1, 32),
        (&decode, QuantFormat::Q4_1, 40),
        (&prefill, QuantFormat::Q8_0, 24),
    ];
    let base = ops();
    let tuned = |stage: bool, splits: usize| {
        base.clone().with_tuning(Tuning {
            attention_workgroup: Some(256),
            stage_projection: Some(stage),
            attention_splits: Some(splits),
            ..base.tuning()
        })
    };
    for (rows, format, width) in cases {
        let what = format!("{} rows, {format:?} [{width}, {}]", rows.len(), HEADS * HD);
        let p = Projected::new(rows, format, width, &mut rng);
        let ([out, h], plain) = p.run(&tuned(false, 1))?;
        check_projection(&what, &out, &h, (&p.values, &p.residual), width);
        let mut kernels = vec![plain];
        // Three splits leave the last a shorter share (and with 40
        // columns, a share that is not a multiple of the others).
        for (stage, splits) in [(true, 1), (false, 3), (true, 3), (true, 7)] {
            let variant = format!("{what}, staged {stage}, {splits} splits");
            let ([o, hv], kernel) = p.run(&tuned(stage, splits))?;
            assert!(
                !kernels.contains(&kernel),
                "{variant}: the same kernel as another variant"
            );
            kernels.push(kernel);
            assert_eq!(bits(&o), bits(&out), "{variant}: attended rows");
            assert_eq!(bits(&hv), bits(&h), "{variant}: projection");
        }
    }
    Ok(())
}

#[test]
fn projected_attention_refuses_bad_operands() -> Result<()> {
    let ops = ops();
    let mut rng = Gen::new(43);
    let case = Case::new(&[(0, 3), (1, 5)], &mut rng);
    let out = ops.output(case.q.desc().clone())?;
    let (w, _) = matrix(QuantFormat::Q8_0, 64, HEADS * HD, &mut rng);
    let (narrow, _) = matrix(QuantFormat::Q8_0, 64, 64, &mut rng);
    let residual = f32s(&[0.0; 128], vec![2, 64]);
    let h = ops.output(TensorDesc::new(DType::F32, vec![2, 64])?)?;
    let attempt = |want: &str, p: AttentionOutput, out: &DeviceTensor| {
        refused(want, |g: &mut Graph| {
            ops.record_rotary_attention_projected(g, &case.q, ROTARY, case.inputs(), SCALE, out, p)
        });
    };
    let good = AttentionOutput {
        weight: &w,
        residual: &residual,
        out: &h,
    };
    attempt(
        "[width, 576]",
        AttentionOutput {
            weight: &narrow,
            ..good
        },
        &out,
    );
    let short = f32s(&[0.0; 64], vec![1, 64]);
    attempt(
        "residual",
        AttentionOutput {
            residual: &short,
            ..good
        },
        &out,
    );
    let wide = ops.output(TensorDesc::new(DType::F32, vec![2, 65])?)?;
    attempt("output", AttentionOutput { out: &wide, ..good }, &out);
    // The projection written over the attended rows.
    let over = out
        .reshape(vec![2 * HEADS * HD])?
        .slice(0, 0..128)?
        .reshape(vec![2, 64])?;
    attempt(
        "must not overlap",
        AttentionOutput { out: &over, ..good },
        &out,
    );
    Ok(())
}
