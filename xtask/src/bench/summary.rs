//! `target/bench/summary.md` from the suites' JSON files.
//!
//! Every suite writes a list of `{"name", "unit", "hrx", "baseline",
//! "baseline_name", "ratio", "better", "device"}`. A peer (wgpu, PyTorch)
//! writes the same objects with `hrx` and `ratio` null, its figure in
//! `baseline`, and `"pairs_with": {"suite", "name"}` naming the hrx
//! measurement of the same work (`*` in `name` matches any text, letter
//! case aside). Suites get one table each (hrx, baseline, ratio); each peer
//! gets a table of hrx against it wherever both measured the same thing.

use serde_json::Value;
use std::fmt::Write as _;

/// One figure of a suite's JSON file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub name: String,
    pub unit: String,
    pub hrx: Option<f64>,
    pub baseline: Option<f64>,
    pub baseline_name: String,
    pub better: String,
    pub device: String,
    /// (suite, name pattern) of the hrx figure a peer's entry stands beside.
    pub pairs_with: Option<(String, String)>,
}

/// One suite's results, named by its file stem (`runtime`, `wgpu`).
#[derive(Clone, Debug)]
pub(crate) struct Suite {
    pub name: String,
    pub entries: Vec<Entry>,
}

impl Suite {
    /// A peer's file: figures of the peer only, each pointing at hrx's.
    fn is_peer(&self) -> bool {
        !self.entries.is_empty()
            && self
                .entries
                .iter()
                .all(|e| e.hrx.is_none() && e.pairs_with.is_some())
    }
}

/// Parse one suite's JSON list.
pub(crate) fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let list = value.as_array().ok_or("not a JSON list")?;
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let text = |key: &str| item.get(key).and_then(Value::as_str).map(str::to_owned);
            let name = text("name").ok_or(format!("entry {i} has no \"name\""))?;
            let pairs_with = item.get("pairs_with").and_then(|p| {
                let field = |key: &str| p.get(key).and_then(Value::as_str).map(str::to_owned);
                Some((field("suite")?, field("name")?))
            });
            Ok(Entry {
                name,
                unit: text("unit").unwrap_or_default(),
                hrx: item.get("hrx").and_then(Value::as_f64),
                baseline: item.get("baseline").and_then(Value::as_f64),
                baseline_name: text("baseline_name").unwrap_or_default(),
                better: text("better").unwrap_or_default(),
                device: text("device").unwrap_or_default(),
                pairs_with,
            })
        })
        .collect()
}

/// Whether `name` matches `pattern`, where `*` matches any text (letter
/// case ignored).
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let (pattern, name) = (pattern.to_lowercase(), name.to_lowercase());
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Seconds per `unit`, for the time units suites use.
fn seconds_per(unit: &str) -> Option<f64> {
    match unit {
        "s" => Some(1.0),
        "ms" => Some(1e-3),
        "us" | "µs" => Some(1e-6),
        "ns" => Some(1e-9),
        _ => None,
    }
}

/// `value` in `from` units expressed in `to` units, when comparable.
fn convert(value: f64, from: &str, to: &str) -> Option<f64> {
    if from == to {
        return Some(value);
    }
    Some(value * seconds_per(from)? / seconds_per(to)?)
}

/// A figure with about four significant digits; "—" when absent.
fn figure(value: Option<f64>) -> String {
    match value {
        Some(0.0) => "0".into(),
        Some(v) if v.is_finite() => {
            let magnitude = v.abs().log10().floor() as i32;
            let decimals = (3 - magnitude).clamp(0, 12) as usize;
            format!("{v:.decimals$}")
        }
        _ => "—".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 && (a / b).is_finite() => format!("{:.3}", a / b),
        _ => "—".into(),
    }
}

/// The devices named in `entries`, in order of first appearance.
fn devices(entries: &[Entry]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in entries {
        if !e.device.is_empty() && !seen.contains(&e.device.as_str()) {
            seen.push(&e.device);
        }
    }
    if seen.is_empty() {
        "unknown".into()
    } else {
        seen.join(", ")
    }
}

fn suite_table(out: &mut String, suite: &Suite) {
    let _ = writeln!(
        out,
        "## {}\n\nDevice: {}\n",
        suite.name,
        devices(&suite.entries)
    );
    out.push_str("| measurement | unit | hrx | baseline | hrx / baseline | better |\n");
    out.push_str("|---|---|---:|---:|---:|---|\n");
    for e in &suite.entries {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            e.name,
            e.unit,
            figure(e.hrx),
            figure(e.baseline),
            ratio(e.hrx, e.baseline),
            e.better
        );
    }
    let mut seen: Vec<&str> = Vec::new();
    for e in &suite.entries {
        if !e.baseline_name.is_empty() && !seen.contains(&e.baseline_name.as_str()) {
            seen.push(&e.baseline_name);
        }
    }
    if !seen.is_empty() {
        out.push_str("\nBaselines:\n");
        for name in seen {
            let _ = writeln!(out, "- {name}");
        }
    }
    out.push('\n');
}

/// The hrx entry a peer's entry stands beside, with the hrx figure in the
/// peer's unit.
fn counterpart<'a>(suites: &'a [Suite], peer: &Entry) -> Option<(&'a Entry, f64)> {
    let (suite, pattern) = peer.pairs_with.as_ref()?;
    let ours = suites.iter().find(|s| &s.name == suite)?;
    ours.entries
        .iter()
        .filter(|e| matches(pattern, &e.name))
        .find_map(|e| Some((e, convert(e.hrx?, &e.unit, &peer.unit)?)))
}

fn peer_table(out: &mut String, suites: &[Suite], peer: &Suite) {
    let _ = writeln!(
        out,
        "## hrx vs {}\n\nDevice: {}\n",
        peer.name,
        devices(&peer.entries)
    );
    let _ = writeln!(
        out,
        "| measurement | unit | hrx | {0} | hrx / {0} | better |\n|---|---|---:|---:|---:|---|",
        peer.name
    );
    let mut missing = Vec::new();
    let mut other_device = Vec::new();
    for e in &peer.entries {
        let found = counterpart(suites, e);
        if found.is_none() {
            missing.push(e);
        }
        if let Some((ours, _)) = found.filter(|(ours, _)| ours.device != e.device) {
            other_device.push(format!("{} ({} against {})", e.name, ours.device, e.device));
        }
        let hrx = found.map(|(_, v)| v);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            e.name,
            e.unit,
            figure(hrx),
            figure(e.baseline),
            ratio(hrx, e.baseline),
            e.better
        );
    }
    if !missing.is_empty() || !other_device.is_empty() {
        out.push('\n');
    }
    for e in missing {
        if let Some((suite, pattern)) = &e.pairs_with {
            let _ = writeln!(
                out,
                "- {}: no hrx figure of the same work in this run ({suite}: `{pattern}`)",
                e.name
            );
        }
    }
    for line in other_device {
        let _ = writeln!(out, "- different devices: {line}");
    }
    let mut seen: Vec<&str> = Vec::new();
    for e in &peer.entries {
        if !seen.contains(&e.baseline_name.as_str()) {
            seen.push(&e.baseline_name);
        }
    }
    let _ = writeln!(out, "\nHow {} did the work:", peer.name);
    for name in seen {
        let _ = writeln!(out, "- {name}");
    }
    out.push('\n');
}

/// The whole summary: suite tables, then peer tables, then `notes` (suites
/// skipped or failed).
pub(crate) fn render(suites: &[Suite], notes: &[String]) -> String {
    let mut out = String::from(
        "# hrx benchmarks\n\nRatios are hrx / other; `better` says which direction wins.\n\n",
    );
    for suite in suites.iter().filter(|s| !s.is_peer()) {
        suite_table(&mut out, suite);
    }
    for peer in suites.iter().filter(|s| s.is_peer()) {
        peer_table(&mut out, suites, peer);
    }
    if !notes.is_empty() {
        out.push_str("## Notes\n\n");
        for note in notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNTIME: &str = r#"[
      {"name": "submit + wait, 1-dispatch graph (median)", "unit": "us", "hrx": 12.7,
       "baseline": 12.69, "baseline_name": "raw ash", "ratio": 1.0008, "better": "lower",
       "device": "H200"},
      {"name": "device copy 1024 MiB (GB/s = (read + written bytes) / median time)",
       "unit": "GB/s", "hrx": 3749.0, "baseline": 817.0, "baseline_name": "vkCmdCopyBuffer",
       "ratio": 4.59, "better": "higher", "device": "H200"}
    ]"#;

    const INFERENCE: &str = r#"[
      {"name": "pool, MLP bench, 1 client: latency p50", "unit": "ms", "hrx": 0.05,
       "baseline": 0.4, "baseline_name": "naive path", "ratio": 0.125, "better": "lower",
       "device": "H200"}
    ]"#;

    const WGPU: &str = r#"[
      {"name": "submit + wait, 1-dispatch graph (median)", "unit": "us", "hrx": null,
       "baseline": 25.4, "baseline_name": "wgpu: submit + poll", "ratio": null,
       "better": "lower", "device": "H200",
       "pairs_with": {"suite": "runtime", "name": "submit + wait, 1-dispatch graph (median)"}},
      {"name": "MLP latency (p50)", "unit": "us", "hrx": null, "baseline": 100.0,
       "baseline_name": "wgpu: 3 dispatches", "ratio": null, "better": "lower",
       "device": "H200", "pairs_with": {"suite": "inference", "name": "*MLP*1 client*p50*"}},
      {"name": "SAXPY", "unit": "GB/s", "hrx": null, "baseline": 3000.0,
       "baseline_name": "wgpu: SAXPY", "ratio": null, "better": "higher", "device": "H200",
       "pairs_with": {"suite": "loom", "name": "SAXPY*"}}
    ]"#;

    fn suite(name: &str, text: &str) -> Suite {
        Suite {
            name: name.into(),
            entries: parse(text).unwrap(),
        }
    }

    #[test]
    fn parses_hrx_and_peer_entries() {
        let runtime = parse(RUNTIME).unwrap();
        assert_eq!(runtime.len(), 2);
        assert_eq!(runtime[1].hrx, Some(3749.0));
        assert_eq!(runtime[1].pairs_with, None);
        let wgpu = parse(WGPU).unwrap();
        assert_eq!(wgpu[0].hrx, None);
        assert_eq!(
            wgpu[1].pairs_with,
            Some(("inference".into(), "*MLP*1 client*p50*".into()))
        );
        assert!(parse("{}").is_err());
        assert!(parse("[{\"unit\": \"us\"}]").is_err());
    }

    #[test]
    fn patterns_match_like_globs() {
        assert!(matches("abc", "ABC"));
        assert!(!matches("abc", "abcd"));
        assert!(matches(
            "*MLP*1 client*p50*",
            "pool, mlp bench, 1 client: latency p50"
        ));
        assert!(!matches(
            "*MLP*1 client*p50*",
            "pool, MLP bench, 1 client: latency p99"
        ));
        assert!(matches("SAXPY*", "SAXPY vector<4xf32>, n = 1024"));
        assert!(matches("*end", "the end"));
        assert!(!matches("a*a", "a"));
    }

    #[test]
    fn renders_suite_and_peer_tables() {
        let suites = [
            suite("runtime", RUNTIME),
            suite("inference", INFERENCE),
            suite("wgpu", WGPU),
        ];
        let text = render(&suites, &["tensor: skipped".into()]);
        assert!(text.contains("## runtime\n\nDevice: H200\n"), "{text}");
        assert!(
            text.contains("| device copy 1024 MiB (GB/s = (read + written bytes) / median time) | GB/s | 3749 | 817.0 | 4.589 | higher |"),
            "{text}"
        );
        assert!(text.contains("## hrx vs wgpu"), "{text}");
        // Same unit: 12.7 / 25.4.
        assert!(
            text.contains(
                "| submit + wait, 1-dispatch graph (median) | us | 12.70 | 25.40 | 0.500 | lower |"
            ),
            "{text}"
        );
        // hrx's 0.05 ms is 50 us beside wgpu's 100 us.
        assert!(
            text.contains("| MLP latency (p50) | us | 50.00 | 100.0 | 0.500 | lower |"),
            "{text}"
        );
        // No loom suite in this run: the peer's figure stands alone, noted.
        assert!(
            text.contains("| SAXPY | GB/s | — | 3000 | — | higher |"),
            "{text}"
        );
        assert!(
            text.contains("- SAXPY: no hrx figure of the same work in this run (loom: `SAXPY*`)")
        );
        assert!(text.contains("## Notes\n\n- tensor: skipped\n"));
        assert!(!text.contains("## wgpu\n"), "a peer gets no suite table");
    }
}
