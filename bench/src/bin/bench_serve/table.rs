//! The serving figures as the suites' records and as one side-by-side
//! table: HTTP, library, HTTP overhead, PyTorch.

use super::{Results, Settings};
use hrx_bench::report::{Better, Record, Torch};
use std::fmt::Write as _;

const LIBRARY: &str = "the library in-process (SentenceEmbedder::embed_async), same clients";

fn torch_name(torch: Option<&Torch>, s: &Settings) -> String {
    match torch {
        Some(t) => format!(
            "PyTorch {} ({}) in-process on {}, a request queue with a batching worker \
             (batches of up to {})",
            t.version,
            if t.library.is_empty() {
                "transformers"
            } else {
                &t.library
            },
            t.device,
            s.shape.max_batch
        ),
        None => "PyTorch: no results given".into(),
    }
}

fn torch_value(torch: Option<&Torch>, key: &str) -> Option<f64> {
    torch.and_then(|t| t.results.get(key).copied())
}

/// One JSON record per figure; names stay the same from run to run (the
/// open-loop rate goes in the note).
pub fn records(r: &Results, torch: Option<&Torch>, s: &Settings, device: &str) -> Vec<Record> {
    let against_library = |name: String, unit: &str, http: f64, library: f64, better| {
        Record::new(
            name,
            unit,
            Some(http),
            Some(library),
            LIBRARY,
            better,
            device,
        )
    };
    let torch_name = torch_name(torch, s);
    let against_torch = |name: String, unit: &str, http: f64, key: &str, better| {
        let baseline = torch_value(torch, key);
        Record::new(
            name,
            unit,
            Some(http),
            baseline,
            torch_name.clone(),
            better,
            device,
        )
    };
    let mut out = Vec::new();
    for row in &r.rows {
        let c = row.clients;
        out.push(against_library(
            format!("serve, {c} clients: throughput (HTTP vs library)"),
            "req/s",
            row.http.throughput,
            row.library.throughput,
            Better::Higher,
        ));
        for (label, http, library) in [
            ("p50", row.http.p50, row.library.p50),
            ("p99", row.http.p99, row.library.p99),
            ("p999", row.http.p999, row.library.p999),
        ] {
            out.push(against_library(
                format!("serve, {c} clients: latency {label} (HTTP vs library)"),
                "ms",
                http,
                library,
                Better::Lower,
            ));
        }
    }
    let (http_saturation, library_saturation) = r.saturation();
    out.push(against_library(
        "serve: throughput at saturation (HTTP vs library)".into(),
        "req/s",
        http_saturation,
        library_saturation,
        Better::Higher,
    ));
    let note = format!("open loop at {:.1} req/s", r.rate);
    for (label, http, library) in [
        ("p50", r.http_open.p50, r.library_open.p50),
        ("p99", r.http_open.p99, r.library_open.p99),
        ("p999", r.http_open.p999, r.library_open.p999),
    ] {
        out.push(Record {
            note: Some(note.clone()),
            ..against_library(
                format!("serve: latency {label} at half the HTTP saturation (HTTP vs library)"),
                "ms",
                http,
                library,
                Better::Lower,
            )
        });
    }
    out.push(Record::new(
        "serve: HTTP round trip alone (GET /health, 1 client), p50",
        "ms",
        Some(r.floor.p50),
        None,
        "none: the floor under every HTTP request",
        Better::Lower,
        device,
    ));
    for row in &r.rows {
        let c = row.clients;
        out.push(against_torch(
            format!("serve vs PyTorch, {c} clients: throughput"),
            "req/s",
            row.http.throughput,
            &format!("closed_{c}_rps"),
            Better::Higher,
        ));
        out.push(against_torch(
            format!("serve vs PyTorch, {c} clients: latency p50"),
            "ms",
            row.http.p50,
            &format!("closed_{c}_p50_ms"),
            Better::Lower,
        ));
    }
    out.push(against_torch(
        "serve vs PyTorch: throughput at saturation".into(),
        "req/s",
        http_saturation,
        "saturation_rps",
        Better::Higher,
    ));
    for (label, http) in [("p50", r.http_open.p50), ("p99", r.http_open.p99)] {
        out.push(Record {
            note: Some(format!(
                "each at half its own saturation: hrx {:.1} req/s, PyTorch {} req/s",
                r.rate,
                torch_value(torch, "open50_rate_rps").map_or("-".into(), |v| format!("{v:.1}"))
            )),
            ..against_torch(
                format!("serve vs PyTorch: latency {label} at half the saturation"),
                "ms",
                http,
                &format!("open50_{label}_ms"),
                Better::Lower,
            )
        });
    }
    out
}

fn cell(value: Option<f64>, digits: usize) -> String {
    value
        .filter(|v| v.is_finite())
        .map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// The side-by-side table, then saturation and latency under load.
pub fn markdown(r: &Results, torch: Option<&Torch>, s: &Settings, device: &str) -> String {
    let mut out = format!(
        "Device: {device}; hrx serve --slots {} --max-batch {}; one sentence per request \
         ({} embeddings); HTTP overhead = HTTP against the library at the same clients\n\n",
        s.shape.slots,
        s.shape.max_batch,
        s.encoding.as_str()
    );
    out.push_str(
        "| clients | HTTP req/s | library req/s | throughput lost | HTTP p50 ms | library p50 ms \
         | p50 added ms | HTTP p99 ms | HTTP p999 ms | inside the server, mean ms \
         | PyTorch req/s | PyTorch p50 ms | HTTP / PyTorch req/s |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in &r.rows {
        let c = row.clients;
        let torch_rps = torch_value(torch, &format!("closed_{c}_rps"));
        let _ = writeln!(
            out,
            "| {c} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(Some(row.http.throughput), 1),
            cell(Some(row.library.throughput), 1),
            cell(
                Some(100.0 * (1.0 - row.http.throughput / row.library.throughput)),
                1
            ) + "%",
            cell(Some(row.http.p50), 3),
            cell(Some(row.library.p50), 3),
            cell(Some(row.http.p50 - row.library.p50), 3),
            cell(Some(row.http.p99), 3),
            cell(Some(row.http.p999), 3),
            cell(row.inside_ms, 3),
            cell(torch_rps, 1),
            cell(torch_value(torch, &format!("closed_{c}_p50_ms")), 3),
            cell(torch_rps.map(|t| row.http.throughput / t), 3),
        );
    }
    let (http_saturation, library_saturation) = r.saturation();
    let _ = writeln!(
        out,
        "\nThroughput at saturation: HTTP {} req/s, library {} req/s ({} lost), PyTorch {} req/s.",
        cell(Some(http_saturation), 1),
        cell(Some(library_saturation), 1),
        cell(
            Some(100.0 * (1.0 - http_saturation / library_saturation)),
            1
        ) + "%",
        cell(torch_value(torch, "saturation_rps"), 1),
    );
    let _ = writeln!(
        out,
        "Latency at half the HTTP saturation (open loop, {:.1} req/s), p50 / p99 / p999 ms: \
         HTTP {} / {} / {}, library {} / {} / {}; PyTorch at half its own ({} req/s): {} / {} / {}.",
        r.rate,
        cell(Some(r.http_open.p50), 3),
        cell(Some(r.http_open.p99), 3),
        cell(Some(r.http_open.p999), 3),
        cell(Some(r.library_open.p50), 3),
        cell(Some(r.library_open.p99), 3),
        cell(Some(r.library_open.p999), 3),
        cell(torch_value(torch, "open50_rate_rps"), 1),
        cell(torch_value(torch, "open50_p50_ms"), 3),
        cell(torch_value(torch, "open50_p99_ms"), 3),
        cell(torch_value(torch, "open50_p999_ms"), 3),
    );
    let _ = writeln!(
        out,
        "The HTTP round trip alone (GET /health, one client): p50 {} ms, p99 {} ms, {} req/s.",
        cell(Some(r.floor.p50), 3),
        cell(Some(r.floor.p99), 3),
        cell(Some(r.floor.throughput), 1),
    );
    let _ = writeln!(out, "\nBaselines:\n- {LIBRARY}\n- {}", torch_name(torch, s));
    out
}
