//! `hrx serve --llm` and `hrx generate` with SmolLM2-135M-Instruct: the
//! official `openai` Python package (completions and chat, whole and
//! streamed) and plain HTTP get the greedy tokens of the float64
//! reference (`hrx-models/tests/reference/smollm2`); a client that
//! disconnects mid-stream frees its sequence; SIGTERM lets a stream in
//! flight finish.

use crate::serve::{LLM, Server, client, python, smollm2_gguf};
use hrx::models::{gguf::GgufFile, tokenizer::BpeTokenizer};
use serde::Deserialize;
use serde_json::{Value, json};
use std::{
    io::Write,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const KEY: &str = "sk-hrx-test";
/// Tokens per request: every reference margin in the first 8 steps of the
/// prompts used here is far above a near-tie, so f32 must agree exactly.
const NEW: usize = 8;
/// SmolLM2's end of sequence, `<|im_end|>`.
const EOS: u32 = 2;

#[derive(Deserialize)]
struct Reference {
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    name: String,
    text: String,
    messages: Option<Vec<Value>>,
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
}

fn reference() -> Reference {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../hrx-models/tests/reference/smollm2/reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn prompt<'r>(reference: &'r Reference, name: &str) -> &'r Prompt {
    reference.prompts.iter().find(|p| p.name == name).unwrap()
}

/// The first `n` reference ids, up to the end of sequence, and why they end.
fn expected(prompt: &Prompt, n: usize) -> (Vec<u32>, &'static str) {
    let ids: Vec<u32> = prompt.ids[..n]
        .iter()
        .copied()
        .take_while(|&id| id != EOS)
        .collect();
    let reason = if ids.len() < n { "stop" } else { "length" };
    (ids, reason)
}

fn tokenizer() -> BpeTokenizer {
    BpeTokenizer::from_gguf(GgufFile::open(&smollm2_gguf()).unwrap().metadata()).unwrap()
}

fn server() -> Server {
    // A step takes about a second on lavapipe: these tests check tokens,
    // not latency, so no request should meet the server's timeout.
    Server::start_llm(&[
        "--timeout-ms",
        "600000",
        "--api-key",
        KEY,
        "--llm-slots",
        "4",
        "--llm-context",
        "256",
        "--llm-prefill-rows",
        "64",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_client_gets_the_reference_tokens() {
    let _alone = crate::serve::HEAVY.lock().await;
    let reference = reference();
    let tokenizer = tokenizer();
    let plain = prompt(&reference, "plain");
    let chat = prompt(&reference, "chat");
    let mut server = server();

    let mut child = Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cli/serve/openai_generate.py"
        ))
        .args([&server.base, LLM, KEY])
        .env("NO_PROXY", "*")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    let request = json!({"prompt": plain.text, "messages": chat.messages, "max_tokens": NEW});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().expect("python");
    assert!(
        output.status.success(),
        "openai client failed:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&output.stderr),
        server.stderr()
    );
    let out: Value = serde_json::from_slice(&output.stdout).expect("client output");

    let (ids, reason) = expected(plain, NEW);
    let text = tokenizer.decode(&ids).unwrap();
    let completion = &out["completion"];
    assert_eq!(completion["object"], "text_completion");
    assert_eq!(completion["model"], LLM);
    assert_eq!(completion["text"], text.as_str());
    assert_eq!(completion["finish_reason"], reason);
    let (p, c) = (plain.prompt_ids.len(), ids.len());
    assert_eq!(completion["usage"], json!([p, c, p + c]));
    assert_eq!(out["completion_stream"]["text"], text.as_str());
    assert_eq!(out["completion_stream"]["finish_reason"], reason);

    let (ids, reason) = expected(chat, NEW);
    let text = tokenizer.decode(&ids).unwrap();
    let answer = &out["chat"];
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(
        (answer["role"].as_str(), answer["content"].as_str()),
        (Some("assistant"), Some(text.as_str()))
    );
    assert_eq!(answer["finish_reason"], reason);
    let (p, c) = (chat.prompt_ids.len(), ids.len());
    assert_eq!(answer["usage"], json!([p, c, p + c]));
    assert_eq!(out["chat_stream"]["content"], text.as_str());
    assert_eq!(out["chat_stream"]["usage"], json!([p, c]));

    let seeded = out["seeded"].as_array().unwrap();
    assert_eq!(seeded[0], seeded[1]);
    let errors = &out["errors"];
    assert_eq!(errors["unknown_model"], json!([404, "model_not_found"]));
    assert_eq!(errors["too_long"], json!([400, "context_length_exceeded"]));
    assert_eq!(errors["n"], json!([400, "n"]));
    assert_eq!(errors["wrong_key"], json!([401, "invalid_api_key"]));

    // A client that goes away mid-stream frees its sequence.
    let http = client();
    let body = json!({"model": LLM, "prompt": plain.text, "max_tokens": 200, "stream": true});
    let mut response = http
        .post(server.url("/v1/completions"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // Keep-alive comments (`:`) come while the prompt waits on a slow
    // device; the first event is a token.
    let first = loop {
        let chunk = response.chunk().await.unwrap().unwrap();
        if !chunk.starts_with(b":") {
            break chunk;
        }
    };
    assert!(
        String::from_utf8_lossy(&first).starts_with("data: {"),
        "{first:?}"
    );
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server
        .metrics()
        .await
        .contains("hrx_generation_sequences_active 0")
    {
        assert!(Instant::now() < deadline, "the sequence was not freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = server.metrics().await;
    for series in [
        "hrx_generation_tokens_total",
        "hrx_generation_steps_total",
        "hrx_generation_device_bytes",
    ] {
        assert!(metrics.contains(series), "{series} missing:\n{metrics}");
    }

    // SIGTERM with a stream in flight: it is answered to the end.
    let body = json!({"model": LLM, "prompt": plain.text, "max_tokens": NEW, "stream": true, "temperature": 0});
    let mut response = http
        .post(server.url("/v1/completions"))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    server.signal("TERM");
    let mut text = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(text.contains("\"finish_reason\":\"length\""), "{text}");
    assert!(server.wait_exit(Duration::from_secs(60)).success());
}

/// `hrx generate --model SmolLM2 FLAGS` with `input` on stdin (validation
/// layers on), run to its end.
fn generate(flags: &[&str], input: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .args(["generate", "--model"])
        .arg(smollm2_gguf())
        .args(flags)
        .env("HRX_VALIDATION", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn hrx_generate_writes_the_reference_tokens_in_input_order() {
    let _alone = crate::serve::HEAVY.blocking_lock();
    let reference = reference();
    let names = ["plain", "chat", "counting"];
    let mut input = String::new();
    for name in names {
        let p = prompt(&reference, name);
        let line = match &p.messages {
            Some(messages) => json!({"messages": messages}),
            None => json!({"prompt": p.text}),
        };
        input.push_str(&format!("{line}\n"));
    }
    let new = NEW.to_string();
    let flags = [
        "--max-new",
        &new,
        "--slots",
        "2",
        "--context",
        "128",
        "--prefill-rows",
        "64",
        "--ignore-eos",
    ];
    let output = generate(&flags, &input);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), names.len());
    let tokenizer = tokenizer();
    for (line, name) in lines.iter().zip(names) {
        let p = prompt(&reference, name);
        assert_eq!(line["prompt_ids"], json!(p.prompt_ids), "{name}");
        assert_eq!(line["ids"], json!(p.ids[..NEW]), "{name}");
        assert_eq!(
            line["text"],
            tokenizer.decode(&p.ids[..NEW]).unwrap().as_str(),
            "{name}"
        );
        assert_eq!(line["finish_reason"], "length", "{name}");
    }

    // f16 caches and activations: the counting prompt's margins (1.9 and
    // more) leave no room for their rounding to change a token.
    let p = prompt(&reference, "counting");
    let line = format!("{}\n", json!({"prompt": p.text}));
    let flags = [
        "--max-new",
        &new,
        "--slots",
        "1",
        "--context",
        "64",
        "--kv-cache",
        "f16",
        "--activations",
        "f16",
        "--ignore-eos",
    ];
    let output = generate(&flags, &line);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let line: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(line["ids"], json!(p.ids[..NEW]), "f16: {stderr}");
    assert!(stderr.contains("f16 caches, f16 activations"), "{stderr}");

    // A malformed line is an error naming it; nothing runs.
    let output = generate(&[], "{\"prompt\": \"a\"}\n{\"prompt\": 3}\n");
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("stdin:2"));
    assert!(output.stdout.is_empty());
}
