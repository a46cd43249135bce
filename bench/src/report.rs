//! What every suite reports: results as a JSON list through serde (the
//! schema of `docs/benchmarks.md`, one [`Record`] per figure), a markdown
//! table, where results go, PyTorch baselines' results, the environment
//! knobs, and percentiles.

use serde::{Deserialize, Serialize};
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::{Path, PathBuf},
};

/// Which direction is better for a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Times, latencies.
    Lower,
    /// Rates, throughputs.
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
    /// What was measured.
    pub name: String,
    /// The unit of both figures.
    pub unit: &'static str,
    /// hrx's figure.
    pub hrx: f64,
    /// The baseline's figure.
    pub baseline: f64,
    /// How the baseline did the work.
    pub baseline_name: String,
    /// Which direction wins.
    pub better: Better,
}

impl Entry {
    /// hrx / baseline.
    pub fn ratio(&self) -> f64 {
        self.hrx / self.baseline
    }
}

/// One figure as the suites' JSON files hold it (the schema of
/// `docs/benchmarks.md`, which `cargo xtask bench-summary` reads): `null`
/// for a side that was not measured or a value that is not finite. `key`,
/// `goal` and `note` appear only where a suite fills them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What was measured, readable.
    pub name: String,
    /// The case name shared with a PyTorch script (`add_f32_268435456`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The unit of `hrx` and `baseline`.
    pub unit: String,
    /// hrx's figure.
    pub hrx: Option<f64>,
    /// The baseline's figure, measured in the same run.
    pub baseline: Option<f64>,
    /// How the baseline did the work.
    pub baseline_name: String,
    /// hrx / baseline.
    pub ratio: Option<f64>,
    /// `lower` or `higher`: which direction wins.
    pub better: String,
    /// The device the figures were measured on.
    pub device: String,
    /// The goal as a ratio to the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<f64>,
    /// Why a figure is missing or how to read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For a peer's figure (`hrx` null, the peer's figure as the
    /// baseline): the hrx measurement of the same work, which the summary
    /// puts beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs_with: Option<Pair>,
}

/// The hrx figure a peer's figure stands beside: the suite (its file stem)
/// and the entry's name, where `*` matches any text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// The suite, as its file stem (`runtime`).
    pub suite: String,
    /// The entry's name, `*` matching any text.
    pub name: String,
}

impl Record {
    /// A record of `hrx` against `baseline`, the ratio computed here;
    /// non-finite figures become `null`.
    pub fn new(
        name: impl Into<String>,
        unit: &str,
        hrx: Option<f64>,
        baseline: Option<f64>,
        baseline_name: impl Into<String>,
        better: Better,
        device: &str,
    ) -> Record {
        let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
        let (hrx, baseline) = (finite(hrx), finite(baseline));
        Record {
            name: name.into(),
            key: None,
            unit: unit.into(),
            hrx,
            baseline,
            baseline_name: baseline_name.into(),
            ratio: finite(hrx.zip(baseline).map(|(h, b)| h / b)),
            better: better.as_str().into(),
            device: device.into(),
            goal: None,
            note: None,
            pairs_with: None,
        }
    }
}

/// The records of `entries`, each naming `device`.
pub fn records(entries: &[Entry], device: &str) -> Vec<Record> {
    entries
        .iter()
        .map(|e| {
            Record::new(
                e.name.clone(),
                e.unit,
                Some(e.hrx),
                Some(e.baseline),
                e.baseline_name.clone(),
                e.better,
                device,
            )
        })
        .collect()
}

/// `records` as the JSON list a suite writes.
pub fn to_json(records: &[Record]) -> String {
    let mut text = serde_json::to_string_pretty(records).unwrap_or_else(|_| "[]".into());
    text.push('\n');
    text
}

/// The JSON list: one object per entry, each naming the device.
pub fn json(entries: &[Entry], device: &str) -> String {
    to_json(&records(entries, device))
}

/// A PyTorch baseline's results, as the scripts in `bench/pytorch` write
/// them: `{"device": "..", "torch": "<version>", "results": {"<key>":
/// <number>, ..}}`; other fields are ignored, and so are results that are
/// not numbers.
#[derive(Clone, Debug, Deserialize)]
pub struct Torch {
    /// The GPU the script ran on.
    #[serde(default)]
    pub device: String,
    /// PyTorch's version.
    #[serde(default, rename = "torch")]
    pub version: String,
    /// What served the work on top of PyTorch, if the script names it
    /// (`sentence-transformers 3.4.1`).
    #[serde(default)]
    pub library: String,
    /// Each case's figure, in the unit the suite gives it.
    #[serde(deserialize_with = "numbers_only")]
    pub results: BTreeMap<String, f64>,
}

fn numbers_only<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let all = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
    Ok(all
        .into_iter()
        .filter_map(|(key, value)| Some((key, value.as_f64()?)))
        .collect())
}

/// Read a PyTorch script's results from `path`; an error when the file is
/// missing, is not that JSON, or holds no result.
pub fn read_torch(path: &Path) -> Result<Torch, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let torch: Torch =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if torch.results.is_empty() {
        return Err(format!("{}: no results in it", path.display()));
    }
    Ok(torch)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_the_schema_and_null_for_missing_figures() {
        let entries = [Entry {
            name: "copy \"1\" GiB".into(),
            unit: "GB/s",
            hrx: 10.0,
            baseline: 0.0,
            baseline_name: "vkCmdCopyBuffer".into(),
            better: Better::Higher,
        }];
        let value: serde_json::Value = serde_json::from_str(&json(&entries, "H200")).unwrap();
        let entry = &value[0];
        assert_eq!(entry["name"], "copy \"1\" GiB");
        assert_eq!(entry["hrx"], 10.0);
        assert_eq!(entry["baseline"], 0.0);
        // 10 / 0 is not finite: no ratio.
        assert!(entry["ratio"].is_null());
        assert_eq!(entry["better"], "higher");
        assert_eq!(entry["device"], "H200");
        // Fields only the tensor suite fills are absent here.
        assert!(entry.get("key").is_none() && entry.get("goal").is_none());
        let with_note = Record {
            note: Some(String::new()),
            ..Record::new("x", "ms", None, Some(2.0), "b", Better::Lower, "d")
        };
        let text = to_json(std::slice::from_ref(&with_note));
        assert!(text.contains("\"hrx\": null") && text.contains("\"note\": \"\""));
        assert_eq!(
            serde_json::from_str::<Vec<Record>>(&text).unwrap(),
            [with_note]
        );
    }

    #[test]
    fn torch_results_keep_numbers_only() {
        let dir = std::env::temp_dir().join(format!("hrx-bench-torch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("torch.json");
        std::fs::write(
            &path,
            r#"{"device": "H200", "torch": "2.11.0", "small": false,
                "results": {"a": 1.5, "b": null, "c": "skipped"}}"#,
        )
        .unwrap();
        let torch = read_torch(&path).unwrap();
        assert_eq!(
            (torch.device.as_str(), torch.version.as_str()),
            ("H200", "2.11.0")
        );
        assert_eq!(
            torch.results.into_iter().collect::<Vec<_>>(),
            [("a".into(), 1.5)]
        );
        std::fs::write(&path, r#"{"results": {}}"#).unwrap();
        assert!(read_torch(&path).unwrap_err().contains("no results"));
        std::fs::write(&path, "[1, 2]").unwrap();
        assert!(read_torch(&path).is_err());
        assert!(read_torch(&dir.join("absent.json")).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(median(&mut samples), 3.0);
        assert_eq!(percentile(&mut samples, 99.0), 5.0);
        assert_eq!(percentile(&mut samples, 0.0), 1.0);
        assert!(percentile(&mut [], 50.0).is_nan());
    }
}
