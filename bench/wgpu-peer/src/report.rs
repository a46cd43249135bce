//! Results in hrx's benchmark JSON schema, with wgpu in the baseline fields.
//!
//! hrx's suites write `{"name", "unit", "hrx", "baseline", "baseline_name",
//! "ratio", "better", "device"}`. A peer measures no hrx figure of its own,
//! so here `hrx` and `ratio` are `null`, `baseline` is wgpu's figure and
//! `baseline_name` says how wgpu did the work. `pairs_with` names the hrx
//! measurement of the same work (`suite` = the file stem, `name` = the
//! entry's name, `*` matching any text), which `cargo xtask bench` uses to
//! put the two side by side in `target/bench/summary.md`.

pub use crate::common::{Better, write};
use crate::common::{Pair, Record, to_json};
use std::fmt::Write as _;

/// One wgpu figure and the hrx measurement it stands beside.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub unit: &'static str,
    pub value: f64,
    pub how: String,
    pub better: Better,
    /// (suite, entry name pattern) of the hrx figure for the same work.
    pub pairs_with: (&'static str, String),
}

/// The JSON list, one object per entry.
pub fn json(entries: &[Entry], device: &str) -> String {
    let records: Vec<Record> = entries
        .iter()
        .map(|e| Record {
            pairs_with: Some(Pair {
                suite: e.pairs_with.0.into(),
                name: e.pairs_with.1.clone(),
            }),
            ..Record::new(
                e.name.clone(),
                e.unit,
                None,
                Some(e.value),
                e.how.clone(),
                e.better,
                device,
            )
        })
        .collect();
    to_json(&records)
}

/// A markdown table headed by the device name.
pub fn table(entries: &[Entry], device: &str) -> String {
    let mut out = format!("wgpu {}, device: {device}\n\n", crate::WGPU_VERSION);
    out.push_str("| measurement | unit | wgpu | better |\n|---|---|---:|---|\n");
    for e in entries {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {} |",
            e.name,
            e.unit,
            e.value,
            e.better.as_str()
        );
    }
    out
}
