//! `hrx demo --model DIR` end to end on all-MiniLM-L6-v2 (lavapipe in CI),
//! kept short: a few dozen short sentences from a few clients.
//!
//! The model folder is fetched by `cargo xtask models` into
//! `target/models/all-MiniLM-L6-v2`.

use hrx_test_support::models::{minilm_dir, workspace};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn reference() -> PathBuf {
    workspace().join("crates/hrx-models/tests/reference/minilm/reference.json")
}

/// A fresh, empty folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hrx-demo-minilm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `hrx demo --model DIR ARGS --quiet`.
fn hrx_demo(model: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hrx"))
        .arg("demo")
        .arg("--model")
        .arg(model)
        .args(args)
        .arg("--quiet")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_contains(haystack: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            haystack.contains(needle),
            "`{needle}` missing from:\n{haystack}"
        );
    }
}

#[test]
fn a_short_run_against_the_reference_checks_and_reports() {
    let reference = reference();
    let o = hrx_demo(
        &minilm_dir(),
        &[
            "--reference",
            reference.to_str().unwrap(),
            "--sentences",
            "24",
            "--clients",
            "4",
        ],
    );
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", text(&o.stderr));
    assert_contains(
        &stdout,
        &[
            "device:  ",
            "model:   all-MiniLM-L6-v2: BERT encoder, 6 layers, hidden 384, 12 heads",
            "MiB of weights",
            "buckets: 16x4, 32x4, 64x4, 128x4, 256x4 (tokens x batch)",
            "input:   24 sentences (24 distinct",
            "pool:    24 sentences",
            "from 4 tokio clients",
            "naive:   8 sentences",
            "p50 ",
            "p99 ",
            "sentences/s",
            "ratio:   the pool serves ",
            "check:   all 32 embeddings match the reference: token ids identical",
            "pair:    cosine(\"A man is eating food.\", \"A man is eating a piece of bread.\") = 0.755",
            "(published 0.7553 +/- 5e-4)",
        ],
    );
    assert!(!stdout.contains("FAILED"), "{stdout}");
}

#[test]
fn a_corrupted_reference_fails_naming_the_sentence() {
    let dir = temp_dir("corrupt");
    let path = dir.join("reference.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reference()).unwrap()).unwrap();
    let first = &mut value["sentences"][0]["embedding"][5];
    *first = serde_json::json!(first.as_f64().unwrap() + 0.01);
    std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
    let o = hrx_demo(
        &minilm_dir(),
        &[
            "--reference",
            path.to_str().unwrap(),
            "--sentences",
            "24",
            "--clients",
            "4",
        ],
    );
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_contains(
        &stdout,
        &[
            "check:   FAILED: ",
            "sentence 0 \"A man is eating food.\"",
            "at element 5",
        ],
    );
    assert_contains(
        &stderr,
        &[
            "hrx: error: ",
            "do not match the reference",
            "sentence 0 \"A man is eating food.\"",
            "max abs diff 1.00e-2",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_a_reference_the_naive_path_is_the_check() {
    let o = hrx_demo(&minilm_dir(), &["--sentences", "6", "--clients", "3"]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", text(&o.stderr));
    assert_contains(
        &stdout,
        &[
            "from the built-in sentences",
            "pool:    6 sentences",
            "from 3 tokio clients",
            "naive:   6 sentences",
            "check:   all 12 embeddings match the naive path",
            "(published 0.7553 +/- 5e-4)",
        ],
    );
}

#[test]
fn a_missing_model_folder_or_reference_is_a_clear_error() {
    let dir = temp_dir("missing");
    let o = hrx_demo(&dir.join("no-such-model"), &[]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_contains(&stderr, &["no-such-model", "does not exist"]);
    let missing = dir.join("no-reference.json");
    let o = hrx_demo(&minilm_dir(), &["--reference", missing.to_str().unwrap()]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_contains(&stderr, &["cannot read the reference", "no-reference.json"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
