//! `GET /metrics`: every counter in the Prometheus text format (0.0.4).
//! Per-replica series carry `replica` (its position) and `device` (its
//! device's name) labels.

use super::state::AppState;
use hrx::models::{embed::ReplicaStatus, llama::GeneratorStats};
use std::fmt::Write;

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Everything the server and its replicas count, now.
pub fn render(state: &AppState) -> String {
    let mut out = String::new();
    let metrics = &state.metrics;
    metrics.with_http(|http| {
        header(
            &mut out,
            "hrx_http_requests_total",
            "counter",
            "HTTP answers by route and status code.",
        );
        for ((route, status), count) in &http.requests {
            let route = escape(route);
            let _ = writeln!(
                out,
                "hrx_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {count}"
            );
        }
        header(
            &mut out,
            "hrx_http_request_duration_seconds",
            "histogram",
            "Time to answer, by route.",
        );
        for (route, histogram) in &http.latency {
            let labels = format!("route=\"{}\"", escape(route));
            histogram.write(&mut out, "hrx_http_request_duration_seconds", &labels);
        }
    });
    let counters = metrics.counters();
    let scalars = [
        (
            "hrx_embedding_requests_in_flight",
            "gauge",
            "Embedding requests being answered.",
            counters.in_flight as u64,
        ),
        (
            "hrx_embedding_inputs_total",
            "counter",
            "Inputs embedded (successful requests).",
            counters.inputs,
        ),
        (
            "hrx_embedding_tokens_total",
            "counter",
            "Tokens embedded, as usage counts them.",
            counters.tokens,
        ),
        (
            "hrx_ready",
            "gauge",
            "1 when /ready answers 200.",
            state.is_ready() as u64,
        ),
        (
            "hrx_draining",
            "gauge",
            "1 once shutdown has begun.",
            state.is_draining() as u64,
        ),
        (
            "hrx_replicas_healthy",
            "gauge",
            "Replicas that can serve.",
            state.embeddings.as_ref().map_or(0, |(_, r)| r.healthy()) as u64,
        ),
    ];
    for (name, kind, help, value) in scalars {
        header(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    if let Some((_, replicas)) = &state.embeddings {
        write_replicas(&mut out, &replicas.status(), &metrics.batch_sizes());
    }
    if let Some((_, generator)) = &state.generation {
        generation(&mut out, &generator.stats());
    }
    if let Some(rss) = resident_bytes() {
        header(
            &mut out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the server process.",
        );
        let _ = writeln!(out, "process_resident_memory_bytes {rss}");
    }
    out
}

type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ReplicaStatus) -> u64,
);

const REPLICA_SERIES: &[Series] = &[
    (
        "hrx_replica_healthy",
        "gauge",
        "1 while the replica serves; 0 once it failed.",
        |s| s.healthy as u64,
    ),
    (
        "hrx_replica_in_flight_sentences",
        "gauge",
        "Sentences dispatched to the replica and not answered.",
        |s| s.in_flight as u64,
    ),
    (
        "hrx_replica_requests_total",
        "counter",
        "Requests given to the replica (retries included).",
        |s| s.requests as u64,
    ),
    (
        "hrx_replica_sentences_total",
        "counter",
        "Sentences the replica answered.",
        |s| s.sentences as u64,
    ),
    (
        "hrx_replica_failures_total",
        "counter",
        "Requests the replica failed.",
        |s| s.failures as u64,
    ),
    (
        "hrx_queue_depth",
        "gauge",
        "Sentences waiting in the replica's batching queues.",
        |s| s.stats.queued as u64,
    ),
    (
        "hrx_slots_busy",
        "gauge",
        "Slots running a batch on the device (slot occupancy).",
        |s| s.stats.running as u64,
    ),
    ("hrx_batches_total", "counter", "Slot submissions.", |s| {
        s.stats.batches as u64
    }),
    (
        "hrx_batched_sentences_total",
        "counter",
        "Sentences submitted to the device.",
        |s| s.stats.sentences as u64,
    ),
    (
        "hrx_tokens_processed_total",
        "counter",
        "Tokens submitted to the device (padding excluded).",
        |s| s.stats.tokens as u64,
    ),
    (
        "hrx_device_memory_bytes",
        "gauge",
        "Device memory allocated by the replica's runtime.",
        |s| s.memory.live_bytes as u64,
    ),
    (
        "hrx_device_memory_peak_bytes",
        "gauge",
        "Highest device memory allocated by the replica's runtime.",
        |s| s.memory.peak_bytes as u64,
    ),
    (
        "hrx_device_allocations",
        "gauge",
        "Live allocations of the replica's runtime.",
        |s| s.memory.live_allocations as u64,
    ),
];

fn write_replicas(
    out: &mut String,
    status: &[ReplicaStatus],
    batch_sizes: &[super::histogram::Histogram],
) {
    let labels: Vec<String> = status
        .iter()
        .map(|s| format!("replica=\"{}\",device=\"{}\"", s.index, escape(&s.device)))
        .collect();
    for (name, kind, help, value) in REPLICA_SERIES {
        header(out, name, kind, help);
        for (s, labels) in status.iter().zip(&labels) {
            let _ = writeln!(out, "{name}{{{labels}}} {}", value(s));
        }
    }
    header(
        out,
        "hrx_batch_size",
        "histogram",
        "Sentences per slot submission (sampled every 5 ms).",
    );
    for (histogram, labels) in batch_sizes.iter().zip(&labels) {
        histogram.write(out, "hrx_batch_size", labels);
    }
}

/// The text generator's gauges and counters.
fn generation(out: &mut String, stats: &GeneratorStats) {
    let series = [
        (
            "hrx_generation_sequences_active",
            "gauge",
            "Sequences holding a key/value cache slot (continuous batch size).",
            stats.active as u64,
        ),
        (
            "hrx_generation_queue_depth",
            "gauge",
            "Generation requests waiting for a cache slot.",
            stats.waiting as u64,
        ),
        (
            "hrx_generation_steps_total",
            "counter",
            "Steps run on the device.",
            stats.steps,
        ),
        (
            "hrx_generation_prompt_tokens_total",
            "counter",
            "Prompt tokens admitted.",
            stats.prompt_tokens,
        ),
        (
            "hrx_generation_tokens_total",
            "counter",
            "Tokens generated.",
            stats.generated_tokens,
        ),
        (
            "hrx_generation_device_bytes",
            "gauge",
            "Device memory of the model's weights and caches.",
            stats.device_bytes as u64,
        ),
    ];
    for (name, kind, help, value) in series {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The process's resident set, from /proc (Linux only).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    #[test]
    fn labels_are_escaped() {
        assert_eq!(super::escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert!(super::resident_bytes().is_some_and(|b| b > 0));
    }
}
