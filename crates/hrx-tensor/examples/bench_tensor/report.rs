//! Results in the runtime benchmark's schema (a JSON list of
//! `{"name", "unit", "hrx", "baseline", "baseline_name", "ratio", "better",
//! "device"}`, PyTorch as the baseline), a markdown table, and the reader of
//! the PyTorch script's results.

use crate::common::{self, string};
use std::{collections::HashMap, fmt::Write as _, path::Path};

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

/// A JSON number, `null` when missing.
fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "null".into(), common::number)
}

/// The JSON list (`null` for a missing side).
pub fn json(entries: &[Entry], device: &str, baseline_name: &str) -> String {
    let mut out = String::from("[\n");
    for (i, e) in entries.iter().enumerate() {
        let _ = write!(
            out,
            "  {{\"name\": {}, \"key\": {}, \"unit\": {}, \"hrx\": {}, \"baseline\": {}, \"baseline_name\": {}, \
             \"ratio\": {}, \"better\": \"higher\", \"device\": {}, \"goal\": {}, \"note\": {}}}",
            string(&e.name),
            string(&e.key),
            string(e.unit),
            number(e.hrx),
            number(e.baseline),
            string(baseline_name),
            number(e.ratio()),
            string(device),
            number(Some(e.goal)),
            string(&e.note),
        );
        out.push_str(if i + 1 < entries.len() { ",\n" } else { "\n" });
    }
    out.push_str("]\n");
    out
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

/// PyTorch's results: the script writes `{"device": "..", "torch": "..",
/// "results": {"<key>": <value>, ..}}` with every value in the case's unit.
pub struct Torch {
    pub device: String,
    pub version: String,
    pub results: HashMap<String, f64>,
}

/// Read the script's JSON. The format is flat, so a small scanner reads
/// it: every `"key": number` pair is a result, `device` and `torch` are the
/// strings of those keys.
pub fn read_torch(path: &Path) -> Result<Torch, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut torch = Torch {
        device: String::new(),
        version: String::new(),
        results: HashMap::new(),
    };
    let mut rest = text.as_str();
    while let Some(open) = rest.find('"') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('"') else { break };
        let key = &after[..close];
        let tail = after[close + 1..].trim_start();
        rest = &after[close + 1..];
        let Some(value) = tail.strip_prefix(':') else {
            continue;
        };
        let value = value.trim_start();
        if let Some(quoted) = value.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            match key {
                "device" => torch.device = quoted[..end].to_string(),
                "torch" => torch.version = quoted[..end].to_string(),
                _ => {}
            }
            rest = &quoted[end.min(quoted.len())..];
            if let Some(stripped) = rest.strip_prefix('"') {
                rest = stripped;
            }
            continue;
        }
        let end = value
            .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
            .unwrap_or(value.len());
        if let Ok(number) = value[..end].parse::<f64>() {
            torch.results.insert(key.to_string(), number);
        }
    }
    if torch.results.is_empty() {
        return Err(format!("{}: no results in it", path.display()));
    }
    Ok(torch)
}
