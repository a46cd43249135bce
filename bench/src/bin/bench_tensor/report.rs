//! Results in the suites' schema (`hrx_bench::report::Record`, PyTorch as
//! the baseline, with each case's key, goal and note) and a markdown table.

use crate::common::{self, Better, Record};
use std::fmt::Write as _;

/// One figure: ours against PyTorch's (when the script ran), higher is
/// better (GB/s or TFLOP/s).
#[derive(Clone, Debug)]
pub struct Entry {
    /// The case name shared with the PyTorch script (`add_f32_268435456`).
    pub key: String,
    /// A readable description.
    pub name: String,
    pub unit: &'static str,
    /// `None` when the operator is unsupported here (`note` says why).
    pub hrx: Option<f64>,
    pub baseline: Option<f64>,
    /// The goal as a ratio to PyTorch, from issue 4.
    pub goal: f64,
    pub note: String,
}

impl Entry {
    /// hrx / PyTorch, when both exist.
    pub fn ratio(&self) -> Option<f64> {
        Some(self.hrx? / self.baseline?)
    }
}

/// The JSON list (`null` for a missing side).
pub fn json(entries: &[Entry], device: &str, baseline_name: &str) -> String {
    let records: Vec<Record> = entries
        .iter()
        .map(|e| Record {
            key: Some(e.key.clone()),
            goal: Some(e.goal),
            note: Some(e.note.clone()),
            ..Record::new(
                e.name.clone(),
                e.unit,
                e.hrx,
                e.baseline,
                baseline_name,
                Better::Higher,
                device,
            )
        })
        .collect();
    common::to_json(&records)
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// A markdown table headed by the device and the baseline.
pub fn table(entries: &[Entry], device: &str, baseline_name: &str) -> String {
    let mut out = format!("Device: {device}\nBaseline: {baseline_name}\n\n");
    out.push_str("| operator | unit | hrx | PyTorch | hrx / PyTorch | goal | note |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---|\n");
    for e in entries {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | >= {:.2} | {} |",
            e.name,
            e.unit,
            cell(e.hrx, 3),
            cell(e.baseline, 3),
            cell(e.ratio(), 3),
            e.goal,
            e.note
        );
    }
    out
}
