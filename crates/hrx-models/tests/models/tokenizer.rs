//! hrx's WordPiece tokenizer against Hugging Face `tokenizers` on
//! all-MiniLM-L6-v2: identical ids for every string of the fixture
//! `reference/tokenizer/ids.json` (hand-picked hostile strings and seeded
//! random ones, made by `make_ids.py`) and of `reference/minilm/`, and huge
//! inputs encode quickly without panicking.
//!
//! The model folder is fetched by `cargo xtask models` into
//! `target/models/all-MiniLM-L6-v2`.

use std::path::Path;
use std::time::{Duration, Instant};

use hrx_models::tokenizer::WordPieceTokenizer;
use hrx_test_support::models::minilm_dir;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    tokenizers_version: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    max_len: usize,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct MiniLmReference {
    max_seq_length: usize,
    sentences: Vec<Sentence>,
}

#[derive(Deserialize)]
struct Sentence {
    text: String,
    ids: Vec<u32>,
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn tokenizer() -> WordPieceTokenizer {
    let json = read(&minilm_dir().join("tokenizer.json"));
    WordPieceTokenizer::from_json(&json).expect("all-MiniLM-L6-v2's tokenizer.json loads")
}

fn fixture() -> Fixture {
    let path = manifest_dir().join("tests/reference/tokenizer/ids.json");
    serde_json::from_str(&read(&path)).expect("ids.json parses")
}

/// Every case whose ids differ, described; empty when all agree.
fn mismatches(tokenizer: &WordPieceTokenizer, cases: &[Case]) -> Vec<String> {
    cases
        .iter()
        .filter_map(|case| {
            let got = tokenizer.encode(&case.text, case.max_len).ok();
            (got.as_ref() != Some(&case.ids)).then(|| {
                format!(
                    "{:?} (max_len {}):\n  hf:  {:?}\n  hrx: {got:?}",
                    case.text, case.max_len, case.ids
                )
            })
        })
        .collect()
}

fn assert_all_match(tokenizer: &WordPieceTokenizer, fixture: &Fixture) {
    let wrong = mismatches(tokenizer, &fixture.cases);
    assert!(
        wrong.is_empty(),
        "{} of {} strings differ from tokenizers {}:\n{}",
        wrong.len(),
        fixture.cases.len(),
        fixture.tokenizers_version,
        wrong.join("\n")
    );
}

#[test]
fn ids_match_hugging_face() {
    let fixture = fixture();
    assert!(fixture.cases.len() > 600, "the fixture lost cases");
    assert_all_match(&tokenizer(), &fixture);
}

#[test]
fn vocab_txt_fallback_gives_the_same_ids() {
    // A folder with only vocab.txt and tokenizer_config.json.
    let dir = std::env::temp_dir().join(format!("hrx-vocab-txt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for file in ["vocab.txt", "tokenizer_config.json"] {
        std::fs::copy(minilm_dir().join(file), dir.join(file)).expect("copy model file");
    }
    let tokenizer = WordPieceTokenizer::from_dir(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_all_match(&tokenizer.expect("vocab.txt loads"), &fixture());
}

#[test]
fn minilm_reference_ids_match() {
    let path = manifest_dir().join("tests/reference/minilm/reference.json");
    let reference: MiniLmReference = serde_json::from_str(&read(&path)).expect("reference.json");
    let cases: Vec<Case> = reference
        .sentences
        .into_iter()
        .map(|s| Case {
            text: s.text,
            max_len: reference.max_seq_length,
            ids: s.ids,
        })
        .collect();
    let wrong = mismatches(&tokenizer(), &cases);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn reports_the_vocabulary() {
    let tokenizer = tokenizer();
    assert_eq!(tokenizer.vocab_size(), 30522);
    assert_eq!(tokenizer.pad_id(), 0);
    assert_eq!(tokenizer.token(101), Some("[CLS]"));
    assert_eq!(tokenizer.token(102), Some("[SEP]"));
    assert_eq!(tokenizer.token(30522), None);
    let from_dir = WordPieceTokenizer::from_dir(&minilm_dir()).expect("from_dir");
    assert_eq!(from_dir.vocab_size(), 30522);
}

/// 10 MB inputs of several shapes: encoding stops once 256 tokens are
/// certain, and what cannot stop early (one endless word, one endless run
/// of combining marks) is still linear.
#[test]
fn huge_inputs_encode_without_panic() {
    let tokenizer = tokenizer();
    const SIZE: usize = 10 << 20;
    let repeat = |unit: &str| unit.repeat(SIZE / unit.len());
    let inputs = [
        (
            "sentences",
            repeat("The quick brown fox jumps over the lazy dog. "),
        ),
        ("one word", repeat("abcdefghij")),
        ("cjk", repeat("中文字")),
        ("combining marks", repeat("\u{301}")),
        ("mixed", repeat("é👍🏽\u{0}\u{200b} [MASK][ ")),
        ("brackets", repeat("[")),
    ];
    for (name, text) in &inputs {
        let start = Instant::now();
        let ids = tokenizer.encode(text, 256).expect("encodes");
        let took = start.elapsed();
        assert!(
            ids.len() <= 256 && ids.len() >= 2,
            "{name}: {} ids",
            ids.len()
        );
        assert_eq!((ids[0], ids[ids.len() - 1]), (101, 102), "{name}");
        // Generous, for unoptimized builds on a slow machine.
        assert!(took < Duration::from_secs(20), "{name}: took {took:?}");
        println!("{name}: {} ids in {took:?}", ids.len());
    }
}

/// Encoding speed on typical sentences; run with `cargo test --release
/// -p hrx-models --test models tokenizer::throughput -- --ignored
/// --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn throughput() {
    let tokenizer = tokenizer();
    let fixture = fixture();
    let sentences: Vec<&str> = fixture.cases[..20]
        .iter()
        .map(|c| c.text.as_str())
        .collect();
    let rounds = 5000;
    let start = Instant::now();
    let mut tokens = 0;
    for _ in 0..rounds {
        for sentence in &sentences {
            tokens += tokenizer.encode(sentence, 256).map_or(0, |ids| ids.len());
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let count = rounds * sentences.len();
    println!(
        "{:.0} sentences/s, {:.1} M tokens/s ({count} sentences of {} tokens on average)",
        count as f64 / seconds,
        tokens as f64 / seconds / 1e6,
        tokens / count
    );
}
