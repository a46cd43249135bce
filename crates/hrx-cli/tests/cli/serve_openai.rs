//! `hrx serve` with real clients: the official `openai` Python package (in
//! a virtual environment under `target/openai-venv`, created on first
//! use) and `curl`. Results match the float64 reference (cosine >=
//! 0.99999) in every encoding, and match `hrx embed`'s.

use crate::serve::{
    MODEL, OPENAI, Server, assert_close, client, cosine, embed, minilm_dir, python, reference,
    short_sentences,
};
use serde_json::{Value, json};
use std::{
    io::Write,
    process::{Command, Stdio},
};

const KEY: &str = "sk-hrx-test";

/// `curl -s URL` (plus `args`): the body and the status code.
fn curl(url: &str, args: &[&str]) -> (String, u16) {
    let output = Command::new("curl")
        .args(["-s", "--noproxy", "*", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let (body, status) = text.rsplit_once('\n').expect("status line");
    (body.to_string(), status.parse().expect("status"))
}

fn floats(value: &Value) -> Vec<Vec<f32>> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// `hrx embed`'s vectors for `texts`, or None when it cannot run.
fn hrx_embed(texts: &[&str]) -> Option<Vec<Vec<f32>>> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["embed", "--model"])
        .arg(minilm_dir())
        .env("HRX_VALIDATION", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()?
        .write_all(texts.join("\n").as_bytes())
        .ok()?;
    let output = child.wait_with_output().ok()?;
    if !output.status.success() {
        eprintln!(
            "hrx embed did not run: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .ok()?
        .lines()
        .map(|l| serde_json::from_str(l).expect("hrx embed line"))
        .collect();
    Some(
        lines
            .iter()
            .map(|l| floats(&json!([l["embedding"]])).remove(0))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_and_curl_get_the_reference_embeddings() {
    let python = python();
    let server = Server::start(&["--api-key", KEY, "--max-batch", "8"]);
    let sentences = short_sentences(14);
    let texts: Vec<&str> = sentences.iter().map(|s| s.text.as_str()).collect();
    let ids: Vec<&Vec<u32>> = sentences.iter().take(3).map(|s| &s.ids).collect();

    let mut child = Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cli/serve/openai_client.py"
        ))
        .args([&server.base, MODEL, KEY])
        .env("NO_PROXY", "*")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    let request = json!({"texts": texts, "ids": ids}).to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.as_bytes())
        .unwrap();
    let output = child.wait_with_output().expect("python");
    assert!(
        output.status.success(),
        "openai client failed:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.stderr()
    );
    let out: Value = serde_json::from_slice(&output.stdout).expect("client output");
    assert_eq!(out["version"], OPENAI);
    assert_eq!(
        (out["object"].as_str(), out["model"].as_str()),
        (Some("list"), Some(MODEL))
    );
    let tokens: usize = sentences.iter().map(|s| s.ids.len()).sum();
    assert_eq!(out["usage"], json!([tokens, tokens]));
    assert_eq!(out["indices"], json!((0..texts.len()).collect::<Vec<_>>()));
    for encoding in ["default", "float", "base64"] {
        let vectors = floats(&out[encoding]);
        assert_eq!(vectors.len(), sentences.len(), "{encoding}");
        for (v, s) in vectors.iter().zip(&sentences) {
            assert_close(v, s);
        }
    }
    // base64 carries the exact f32 bits the float list spells.
    assert_eq!(floats(&out["base64"]), floats(&out["float"]));
    assert_close(&floats(&json!([out["single"]]))[0], sentences[0]);
    for (v, s) in floats(&out["ids"]).iter().zip(&sentences) {
        assert_close(v, s);
    }
    let id_tokens: usize = ids.iter().map(|i| i.len()).sum();
    assert_eq!(out["ids_usage"], id_tokens);
    assert_eq!(out["models"], json!([MODEL]));
    let errors = &out["errors"];
    assert_eq!(errors["wrong_key"], json!([401, "invalid_api_key"]));
    assert_eq!(errors["unknown_model"], json!([404, "model_not_found"]));
    assert_eq!(errors["empty"], json!([400, "input"]));
    assert_eq!(errors["dimensions"], json!([400, "dimensions"]));

    // The same sentences through `hrx embed`, when it runs.
    if let Some(vectors) = hrx_embed(&texts) {
        assert_eq!(vectors.len(), texts.len());
        for (v, w) in vectors.iter().zip(floats(&out["float"])) {
            assert!(cosine(v, &w) >= 0.99999);
        }
    }

    // curl: the probes and metrics stay open without the key.
    assert_eq!(
        curl(&server.url("/health"), &[]),
        (r#"{"status":"ok"}"#.into(), 200)
    );
    let (ready, status) = curl(&server.url("/ready"), &[]);
    assert_eq!(status, 200, "{ready}");
    let (metrics, status) = curl(&server.url("/metrics"), &[]);
    assert_eq!(status, 200);
    for name in [
        "hrx_http_requests_total{route=\"/v1/embeddings\",status=\"200\"} 5",
        "hrx_http_requests_total{route=\"/v1/embeddings\",status=\"401\"} 1",
        "hrx_http_request_duration_seconds_bucket{route=\"/v1/embeddings\",le=\"+Inf\"}",
        "hrx_batch_size_bucket{replica=\"0\"",
        "hrx_queue_depth{replica=\"0\"",
        "hrx_slots_busy{replica=\"0\"",
        "hrx_device_memory_bytes{replica=\"0\"",
        "hrx_tokens_processed_total{replica=\"0\"",
        "hrx_embedding_requests_in_flight 0",
    ] {
        assert!(metrics.contains(name), "{name} missing from\n{metrics}");
    }
    let (_, status) = curl(&server.url("/v1/models"), &[]);
    assert_eq!(status, 401);
    let body = json!({"model": MODEL, "input": texts[0]}).to_string();
    let auth = format!("Authorization: Bearer {KEY}");
    let (answer, status) = curl(
        &server.url("/v1/embeddings"),
        &[
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "-d",
            &body,
        ],
    );
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_close(
        &floats(&json!([answer["data"][0]["embedding"]]))[0],
        sentences[0],
    );
}

/// A text longer than the model's 256 tokens is truncated (as
/// sentence-transformers does) and usage counts the tokens kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_texts_are_truncated_and_usage_counts_what_was_kept() {
    let server = Server::start(&["--max-batch", "2", "--slots", "1"]);
    let longest = reference()
        .sentences
        .iter()
        .max_by_key(|s| s.ids.len())
        .unwrap();
    assert_eq!(longest.ids.len(), 256);
    let answer = embed(
        &client(),
        &server,
        json!({"model": MODEL, "input": [longest.text]}),
    )
    .await;
    assert_close(&answer.embeddings()[0], longest);
    assert_eq!(
        answer.body["usage"],
        json!({"prompt_tokens": 256, "total_tokens": 256})
    );
}
