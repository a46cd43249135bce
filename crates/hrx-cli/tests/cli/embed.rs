//! `hrx embed` end to end on all-MiniLM-L6-v2 (lavapipe in CI): JSON Lines
//! against the float64 reference, stdin, batching independence, and the
//! errors that must leave no output behind.
//!
//! The model folder is fetched by `cargo xtask models` into
//! `target/models/all-MiniLM-L6-v2`.

use crate::serve::{Sentence, reference};
use hrx_test_support::{
    compare::{cosine, max_difference},
    models::minilm_dir,
};
use serde::Deserialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// One parsed output line.
#[derive(Debug, Deserialize)]
struct Line {
    index: usize,
    tokens: Vec<u32>,
    embedding: Vec<f32>,
}

/// Short reference sentences (lavapipe is slow), chosen to exercise the
/// line contract: leading and trailing spaces, tabs, control characters,
/// an empty line and a blank one.
fn sentences() -> Vec<&'static Sentence> {
    let wanted = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "   leading and trailing spaces   ",
        "",
        "THE CAT SAT ON THE MAT, didn't it?",
        "   \t  ",
        "null\u{0}byte and bell\u{7} inside text",
        "name\tage\tcity\tBob\t42\tParis",
    ];
    wanted
        .iter()
        .map(|text| {
            reference()
                .sentences
                .iter()
                .find(|s| s.text == *text)
                .unwrap_or_else(|| panic!("{text:?} is not in reference.json"))
        })
        .collect()
}

/// The sentences as a file: `\n` line ends, `\r\n` on the third line, a
/// final `\n`.
fn input_bytes(sentences: &[&Sentence]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (i, s) in sentences.iter().enumerate() {
        bytes.extend_from_slice(s.text.as_bytes());
        bytes.extend_from_slice(if i == 2 { b"\r\n" } else { b"\n" });
    }
    bytes
}

/// A fresh, empty folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hrx-embed-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn hrx_embed(args: &[&str], model: &Path, stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hrx"))
        .arg("embed")
        .arg("--model")
        .arg(model)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        // A command that fails before reading its input closes the pipe.
        match child.stdin.take().unwrap().write_all(bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    }
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn parse(jsonl: &str) -> Vec<Line> {
    jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Every line in order, against its reference sentence.
fn check_against_reference(lines: &[Line], sentences: &[&Sentence]) {
    assert_eq!(lines.len(), sentences.len());
    for (i, (line, want)) in lines.iter().zip(sentences).enumerate() {
        assert_eq!(line.index, i);
        assert_eq!(line.tokens, want.ids, "tokens of line {i} {:?}", want.text);
        assert_eq!(line.embedding.len(), 384);
        let cos = cosine(&line.embedding, &want.embedding);
        let diff = max_difference(&line.embedding, &want.embedding);
        assert!(
            cos >= 0.99999 && diff <= 1e-4,
            "line {i} {:?}: cosine {cos}, max difference {diff}",
            want.text
        );
    }
}

#[test]
fn a_file_embeds_to_the_reference_in_input_order() {
    let (model, sentences) = (minilm_dir(), sentences());
    let dir = temp_dir("file");
    let (input, output) = (dir.join("in.txt"), dir.join("out.jsonl"));
    std::fs::write(&input, input_bytes(&sentences)).unwrap();
    let o = hrx_embed(
        &[
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ],
        &model,
        None,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    let written = std::fs::read_to_string(&output).unwrap();
    assert!(written.ends_with('\n'));
    check_against_reference(&parse(&written), &sentences);
    // Only the output is left: the temporary file was renamed into place.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stdin_to_stdout() {
    let sentences = &sentences()[..3];
    let o = hrx_embed(&[], &minilm_dir(), Some(&input_bytes(sentences)));
    assert!(o.status.success(), "{}", text(&o.stderr));
    check_against_reference(&parse(&text(&o.stdout)), sentences);
}

#[test]
fn results_do_not_depend_on_batch_slots_or_order() {
    let (model, sentences) = (minilm_dir(), sentences());
    let forward = input_bytes(&sentences);
    let mut reversed = sentences.clone();
    reversed.reverse();
    let one = hrx_embed(&["--batch", "1", "--slots", "1"], &model, Some(&forward));
    assert!(one.status.success(), "{}", text(&one.stderr));
    let many = hrx_embed(
        &["--batch", "16", "--slots", "3"],
        &model,
        Some(&input_bytes(&reversed)),
    );
    assert!(many.status.success(), "{}", text(&many.stderr));
    let (one, mut many) = (parse(&text(&one.stdout)), parse(&text(&many.stdout)));
    assert_eq!((one.len(), many.len()), (sentences.len(), sentences.len()));
    many.reverse();
    for (i, (a, b)) in one.iter().zip(&many).enumerate() {
        assert_eq!(a.index, i);
        assert_eq!(b.index, sentences.len() - 1 - i);
        assert_eq!(a.tokens, b.tokens, "line {i}");
        let diff = max_difference(&a.embedding, &b.embedding);
        assert!(diff <= 1e-5, "line {i}: batch 1 and 16 differ by {diff}");
    }
}

#[test]
fn invalid_utf8_names_the_line_and_writes_nothing() {
    let dir = temp_dir("utf8");
    let (input, output) = (dir.join("in.txt"), dir.join("out.jsonl"));
    std::fs::write(&input, b"first line\nsecond line\nth\xffird\nfourth\n").unwrap();
    let o = hrx_embed(
        &[
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
        ],
        &minilm_dir(),
        None,
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("invalid UTF-8 on line 3"), "{stderr}");
    assert!(stderr.contains("byte offset 25"), "{stderr}");
    assert!(o.stdout.is_empty());
    assert!(!output.exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // The same on stdin, with nothing on stdout.
    let o = hrx_embed(&[], &minilm_dir(), Some(b"a\nb\n\xc3"));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("stdin: invalid UTF-8 on line 3"),
        "{stderr}"
    );
    assert!(o.stdout.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_model_folder_is_a_clear_error() {
    let dir = temp_dir("nomodel");
    let missing = dir.join("no-such-model");
    let o = hrx_embed(&[], &missing, Some(b"hello\n"));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no-such-model") && stderr.contains("does not exist"),
        "{stderr}"
    );
    assert!(o.stdout.is_empty());
    // A folder without the model's files names what is missing.
    let o = hrx_embed(&[], &dir, Some(b"hello\n"));
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot load the model"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn output_into_a_missing_folder_fails_and_leaves_nothing() {
    let dir = temp_dir("nodir");
    let output = dir.join("missing/out.jsonl");
    let o = hrx_embed(
        &["--output", output.to_str().unwrap()],
        &minilm_dir(),
        Some(b"hello\n"),
    );
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("out.jsonl"), "{stderr}");
    assert!(!dir.join("missing").exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_errors_exit_2() {
    let o = hrx_embed(&["--batch", "0"], &minilm_dir(), Some(b""));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // An empty input is no sentences and no output.
    let o = hrx_embed(&[], &minilm_dir(), Some(b""));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
}
