//! `bench_models --profile BATCH SEQ [f16]`: the device time of each
//! operation of the encoder's graph for one shape, each recorded alone
//! and repeated in one submission, with totals per kernel; where a
//! benchmark's time goes.

use hrx_inference::{ModelContext, SlotBuilder};
use hrx_models::bert::{BertEncoder, Precision};
use hrx_runtime::Operation;
use hrx_tensor::Ops;
use std::{collections::BTreeMap, time::Instant};

/// Repetitions of an operation in its timed submission.
const REPS: u32 = 20;
/// Dispatches listed one by one.
const FIRST: usize = 24;

pub fn run(
    context: &ModelContext,
    encoder: &BertEncoder,
    batch: usize,
    seq: usize,
) -> Result<(), String> {
    let e = |e: hrx_core::Error| e.to_string();
    // The context's operators, so its tuning applies.
    let ops: &Ops = context.ops();
    let mut slot = SlotBuilder::new(context, ops);
    encoder.build_slot(&mut slot, batch, seq).map_err(e)?;
    let dispatches: Vec<_> = slot
        .graph()
        .operations()
        .filter_map(|op| match op {
            Operation::Dispatch {
                kernel,
                views,
                constants,
                workgroups,
            } => Some((
                kernel.clone(),
                views.to_vec(),
                constants.to_vec(),
                workgroups,
            )),
            _ => None,
        })
        .collect();
    let mut by_kernel: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let mut first_layer = String::new();
    for (i, (kernel, views, constants, workgroups)) in dispatches.iter().enumerate() {
        let mut graph = context.runtime().graph();
        for _ in 0..REPS {
            graph
                .dispatch(kernel, views, constants, *workgroups)
                .map_err(e)?;
        }
        let graph = graph.prepare().map_err(e)?;
        graph.submit().map_err(e)?.wait().map_err(e)?;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            graph.submit().map_err(e)?.wait().map_err(e)?;
            best = best.min(start.elapsed().as_secs_f64() * 1e6 / f64::from(REPS));
        }
        if i < FIRST {
            first_layer.push_str(&format!(
                "| {i} | {} | {workgroups:?} | {best:.1} |\n",
                kernel.contract().entry_point
            ));
        }
        let entry = by_kernel
            .entry(kernel.contract().entry_point.clone())
            .or_default();
        entry.0 += best;
        entry.1 += 1;
    }
    let total: f64 = by_kernel.values().map(|(us, _)| us).sum();
    let precision = match encoder.precision() {
        Precision::F32 => "f32",
        Precision::F16 => "f16",
    };
    println!(
        "{precision} batch {batch} x {seq} tokens: {total:.0} us over {} dispatches",
        dispatches.len()
    );
    let mut sorted: Vec<_> = by_kernel.into_iter().collect();
    sorted.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!("| kernel | dispatches | us | share |\n|---|---:|---:|---:|");
    for (name, (us, n)) in sorted {
        println!("| {name} | {n} | {us:.1} | {:.1}% |", 100.0 * us / total);
    }
    println!("\nThe first {FIRST} dispatches (the embeddings and the first layer):");
    println!("| # | kernel | workgroups | us |\n|---:|---|---|---:|\n{first_layer}");
    Ok(())
}
