//! Results: a JSON list written by hand (no serde) in the runtime
//! benchmark's schema, and a markdown table.

use std::{fmt::Write as _, path::Path};

/// Which direction is better for a figure.
#[derive(Clone, Copy, Debug)]
pub enum Better {
    Lower,
    Higher,
}

impl Better {
    fn as_str(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }
}

/// One compared figure: loom against its baseline, measured in one run.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub unit: &'static str,
    pub hrx: f64,
    pub baseline: f64,
    pub baseline_name: String,
    pub better: Better,
}

impl Entry {
    /// hrx / baseline.
    pub fn ratio(&self) -> f64 {
        self.hrx / self.baseline
    }
}

/// A JSON string literal.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number (`null` when not finite).
fn number(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.6}")
    } else {
        "null".into()
    }
}

/// The JSON list: one object per entry, each naming the device.
pub fn json(entries: &[Entry], device: &str) -> String {
    let mut out = String::from("[\n");
    for (i, e) in entries.iter().enumerate() {
        let _ = write!(
            out,
            "  {{\"name\": {}, \"unit\": {}, \"hrx\": {}, \"baseline\": {}, \"baseline_name\": {}, \
             \"ratio\": {}, \"better\": {}, \"device\": {}}}",
            string(&e.name),
            string(e.unit),
            number(e.hrx),
            number(e.baseline),
            string(&e.baseline_name),
            number(e.ratio()),
            string(e.better.as_str()),
            string(device),
        );
        out.push_str(if i + 1 < entries.len() { ",\n" } else { "\n" });
    }
    out.push_str("]\n");
    out
}

/// A markdown table headed by the device name; `loom_only` lists corpus
/// kernels without a WGSL equivalent (name, median microseconds).
pub fn table(entries: &[Entry], loom_only: &[(String, f64)], device: &str) -> String {
    let mut out = format!("Device: {device}\n\n");
    out.push_str("| measurement | unit | loom | baseline | loom / baseline | better |\n");
    out.push_str("|---|---|---:|---:|---:|---|\n");
    for e in entries {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.3} | {} |",
            e.name,
            e.unit,
            e.hrx,
            e.baseline,
            e.ratio(),
            e.better.as_str()
        );
    }
    for (name, us) in loom_only {
        let _ = writeln!(
            out,
            "| compile {name} (no WGSL equivalent) | us | {us:.2} | - | - | lower |"
        );
    }
    out.push_str("\nBaselines (same process, same device):\n");
    let mut seen: Vec<&str> = Vec::new();
    for e in entries {
        if !seen.contains(&e.baseline_name.as_str()) {
            seen.push(&e.baseline_name);
            let _ = writeln!(out, "- {}", e.baseline_name);
        }
    }
    out
}

/// Write `text` to `path`, creating its directory.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
