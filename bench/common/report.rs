//! Shared by the benchmark examples (included with `#[path]`): results as a
//! JSON list written by hand (the schema of `docs/benchmarks.md`), a
//! markdown table, where results go, the environment knobs, and
//! percentiles.

#![allow(dead_code)] // each benchmark uses its own subset

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

/// Which direction is better for a figure.
#[derive(Clone, Copy, Debug)]
pub enum Better {
    Lower,
    Higher,
}

impl Better {
    /// The word the JSON and the tables use.
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Lower => "lower",
            Better::Higher => "higher",
        }
    }
}

/// One compared figure: hrx against a baseline measured in the same run.
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
pub fn string(text: &str) -> String {
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
pub fn number(value: f64) -> String {
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

/// A markdown table headed by the device name; `baseline` names the
/// baseline column (for example "raw ash").
pub fn table(entries: &[Entry], device: &str, baseline: &str) -> String {
    table_with(entries, &[], device, baseline)
}

/// [`table`] with `extra` rows (whole markdown rows, six cells) after the
/// entries, for figures that have no baseline and so no JSON entry.
pub fn table_with(entries: &[Entry], extra: &[String], device: &str, baseline: &str) -> String {
    let mut out = format!("Device: {device}\n\n");
    let _ = writeln!(
        out,
        "| measurement | unit | hrx | {baseline} | hrx / {baseline} | better |"
    );
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
    for row in extra {
        out.push_str(row);
        out.push('\n');
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

/// `HRX_BENCH_OUT`, else `target/bench/{file}` under the nearest directory
/// (from the current one up) holding a `Cargo.lock`, else here.
pub fn output_path(file: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("HRX_BENCH_OUT").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let root = here
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(&here)
        .to_path_buf();
    root.join("target").join("bench").join(file)
}

/// The whole number in environment variable `name`, if set and non-empty.
pub fn env_usize(name: &str) -> Result<Option<usize>, String> {
    env_parse(name, "a whole number")
}

/// The number in environment variable `name`, if set and non-empty.
pub fn env_f64(name: &str) -> Result<Option<f64>, String> {
    env_parse(name, "a number")
}

/// Environment variable `name` parsed as `what`, if set and non-empty.
fn env_parse<T: std::str::FromStr>(name: &str, what: &str) -> Result<Option<T>, String> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={text:?} is not {what}")),
        _ => Ok(None),
    }
}

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [f64]) -> f64 {
    percentile(samples, 50.0)
}

/// The nearest-rank percentile `p` of `samples` (sorted in place); NaN when
/// there are none.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}
