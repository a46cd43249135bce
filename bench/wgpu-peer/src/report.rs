//! Results in hrx's benchmark JSON schema, with wgpu in the baseline fields.
//!
//! hrx's suites write `{"name", "unit", "hrx", "baseline", "baseline_name",
//! "ratio", "better", "device"}`. A peer measures no hrx figure of its own,
//! so here `hrx` and `ratio` are `null`, `baseline` is wgpu's figure and
//! `baseline_name` says how wgpu did the work. `pairs_with` names the hrx
//! measurement of the same work (`suite` = the file stem, `name` = the
//! entry's name, `*` matching any text), which `cargo xtask bench` uses to
//! put the two side by side in `target/bench/summary.md`.

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

/// The JSON list, one object per entry.
pub fn json(entries: &[Entry], device: &str) -> String {
    let mut out = String::from("[\n");
    for (i, e) in entries.iter().enumerate() {
        let _ = write!(
            out,
            "  {{\"name\": {}, \"unit\": {}, \"hrx\": null, \"baseline\": {}, \
             \"baseline_name\": {}, \"ratio\": null, \"better\": {}, \"device\": {}, \
             \"pairs_with\": {{\"suite\": {}, \"name\": {}}}}}",
            string(&e.name),
            string(e.unit),
            number(e.value),
            string(&e.how),
            string(e.better.as_str()),
            string(device),
            string(e.pairs_with.0),
            string(&e.pairs_with.1),
        );
        out.push_str(if i + 1 < entries.len() { ",\n" } else { "\n" });
    }
    out.push_str("]\n");
    out
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

/// Write `text` to `path`, creating its directory.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
