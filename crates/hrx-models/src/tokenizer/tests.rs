//! The tokenizer end to end on a tiny vocabulary; the comparison with
//! Hugging Face's ids on the real one is `tests/models/tokenizer.rs`.

use serde_json::{Value, json};

use super::*;

const VOCAB: [&str; 14] = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", "un", "##aff",
    "##able", "cafe", "中",
];

fn tokenizer_json() -> Value {
    let vocab: serde_json::Map<String, Value> = VOCAB
        .iter()
        .enumerate()
        .map(|(id, token)| (token.to_string(), json!(id)))
        .collect();
    let added: Vec<Value> = VOCAB[..5]
        .iter()
        .enumerate()
        .map(
            |(id, token)| json!({"id": id, "content": token, "special": true, "normalized": false}),
        )
        .collect();
    json!({
        "version": "1.0",
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true,
            "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "model": {"type": "WordPiece", "unk_token": "[UNK]",
            "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
            "vocab": vocab},
    })
}

fn tokenizer() -> WordPieceTokenizer {
    WordPieceTokenizer::from_json(&tokenizer_json().to_string()).expect("valid tokenizer.json")
}

fn error_of(edit: impl FnOnce(&mut Value)) -> String {
    let mut file = tokenizer_json();
    edit(&mut file);
    match WordPieceTokenizer::from_json(&file.to_string()) {
        Ok(_) => panic!("accepted a bad tokenizer.json"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn encodes_between_cls_and_sep() {
    let t = tokenizer();
    assert_eq!(
        t.encode("Hello, WORLD!", 64).ok(),
        Some(vec![2, 5, 7, 6, 8, 3])
    );
    assert_eq!(
        t.encode("unaffable Café", 64).ok(),
        Some(vec![2, 9, 10, 11, 12, 3])
    );
    assert_eq!(t.encode("中國", 64).ok(), Some(vec![2, 13, 1, 3]));
    assert_eq!(t.encode("", 64).ok(), Some(vec![2, 3]));
    assert_eq!(t.encode(" \t\u{0}\n ", 64).ok(), Some(vec![2, 3]));
}

#[test]
fn passes_added_tokens_through_unnormalized() {
    let t = tokenizer();
    let ids = t.encode("hello[MASK]world [mask]", 64).ok();
    assert_eq!(ids, Some(vec![2, 5, 4, 6, 1, 1, 1, 3]));
}

#[test]
fn truncates_to_max_len_including_specials() {
    let t = tokenizer();
    assert_eq!(
        t.encode("hello world hello", 4).ok(),
        Some(vec![2, 5, 6, 3])
    );
    assert_eq!(t.encode("unaffable", 3).ok(), Some(vec![2, 9, 3]));
    assert_eq!(t.encode("hello", 2).ok(), Some(vec![2, 3]));
    assert!(t.encode("hello", 1).is_err());
}

#[test]
fn reads_a_bert_processing_template() {
    let mut file = tokenizer_json();
    file["post_processor"] =
        json!({"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]});
    let t = WordPieceTokenizer::from_json(&file.to_string()).expect("BertProcessing");
    assert_eq!(t.encode("hello", 8).ok(), Some(vec![2, 5, 3]));
}

#[test]
fn reports_the_vocabulary() {
    let t = tokenizer();
    assert_eq!(t.vocab_size(), VOCAB.len());
    assert_eq!(t.pad_id(), 0);
    assert_eq!(t.token(10), Some("##aff"));
    assert_eq!(t.token(14), None);
}

#[test]
fn names_what_is_wrong_in_a_tokenizer_json() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 8] = [
        ("model: found type \"BPE\"", |f| {
            f["model"]["type"] = json!("BPE")
        }),
        ("normalizer: found null", |f| f["normalizer"] = Value::Null),
        ("pre_tokenizer: found type \"Whitespace\"", |f| {
            f["pre_tokenizer"]["type"] = json!("Whitespace");
        }),
        ("post_processor: found no type", |f| {
            f["post_processor"] = json!({})
        }),
        ("model: missing field `vocab`", |f| {
            f["model"].as_object_mut().map(|m| m.remove("vocab"));
        }),
        ("added_tokens[4] (\"[MASK]\"): lstrip: true", |f| {
            f["added_tokens"][4]["lstrip"] = json!(true);
        }),
        ("the unknown token \"<unk>\"", |f| {
            f["model"]["unk_token"] = json!("<unk>")
        }),
        ("id 3 is given to both", |f| {
            f["model"]["vocab"]["hello"] = json!(3)
        }),
    ];
    for (expected, edit) in cases {
        let error = error_of(edit);
        assert!(
            error.contains(expected),
            "{error:?} should say {expected:?}"
        );
    }
    let error = WordPieceTokenizer::from_json("{")
        .err()
        .map(|e| e.to_string());
    assert!(error.is_some_and(|e| e.starts_with("tokenizer.json: ")));
}

#[test]
fn reads_a_vocab_txt_folder() {
    let dir = std::env::temp_dir().join(format!("hrx-tokenizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("vocab.txt"), VOCAB.join("\n")).expect("vocab.txt");
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"do_lower_case": false}"#,
    )
    .expect("tokenizer_config.json");
    let cased = WordPieceTokenizer::from_dir(&dir).map(|t| t.encode("Hello hello!", 9));
    std::fs::write(dir.join("tokenizer_config.json"), "{}").expect("tokenizer_config.json");
    let uncased = WordPieceTokenizer::from_dir(&dir).map(|t| t.encode("Hello [MASK]", 9));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(cased.ok().and_then(Result::ok), Some(vec![2, 1, 5, 8, 3]));
    assert_eq!(uncased.ok().and_then(Result::ok), Some(vec![2, 5, 4, 3]));
}

#[test]
fn a_folder_without_tokenizer_files_is_an_error() {
    let error = WordPieceTokenizer::from_dir(Path::new("/nonexistent/model")).err();
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("neither tokenizer.json nor vocab.txt"),
        "{message}"
    );
}
