//! SmolLM2-135M-Instruct's GGUF file through hrx's reader, tokenizer and
//! chat template, against `reference/smollm2/reference.json` (made by
//! `make_reference.py` from the `gguf` package and Hugging Face
//! `tokenizers`, independent of hrx).
//!
//! The file is fetched by `cargo xtask models` into
//! `target/models/SmolLM2-135M-Instruct/`; `HRX_SMOLLM2_GGUF` names another
//! copy (where the tests run away from the checkout).

use std::sync::OnceLock;

use hrx_models::gguf::{GgufFile, LlamaConfig, TensorType};
use hrx_models::tokenizer::{
    BpeTokenizer, ChatMessage, ChatTemplate, PreTokenizer, StreamDecoder, TokenType,
};
use hrx_test_support::models::smollm2_gguf;
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    gguf_sha256: String,
    prompts: Vec<Prompt>,
    tokenize: Vec<Tokenized>,
    dequantized_rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Prompt {
    name: String,
    messages: Option<Vec<Message>>,
    text: String,
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
    margins: Vec<f64>,
    continuation: String,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct Tokenized {
    text: String,
    ids: Vec<u32>,
    /// What the ids decode to (bytes without a token were dropped).
    decoded: String,
}

#[derive(Deserialize)]
struct Row {
    tensor: String,
    #[serde(rename = "type")]
    ty: String,
    row: u64,
    values: Vec<f64>,
}

/// The file, parsed once for all tests.
fn file() -> &'static GgufFile {
    static FILE: OnceLock<GgufFile> = OnceLock::new();
    FILE.get_or_init(|| GgufFile::open(&smollm2_gguf()).unwrap())
}

fn tokenizer() -> &'static BpeTokenizer {
    static TOKENIZER: OnceLock<BpeTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| BpeTokenizer::from_gguf(file().metadata()).unwrap())
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/reference/smollm2/reference.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    })
}

#[test]
fn the_reference_was_made_from_this_file() {
    // The xtask pins the same hash; a mismatch means a stale reference.
    assert_eq!(
        reference().gguf_sha256,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
}

#[test]
fn metadata_gives_the_llama_constants() {
    let file = file();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset() % 32, 0);
    assert_eq!(file.tensors().len(), 272);
    let config = LlamaConfig::from_gguf(file).unwrap();
    assert_eq!(
        config,
        LlamaConfig {
            architecture: "llama".into(),
            layers: 30,
            width: 576,
            ffn_width: 1536,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
            rope_dims: 64,
            rope_base: 100_000.0,
            rms_eps: f64::from(1e-5f32),
            context_length: 8192,
            vocab_size: 49152,
            tied_embedding: true,
        }
    );
    config.check_tensors(file).unwrap();
    let meta = file.metadata();
    assert_eq!(meta.string("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(meta.strings("tokenizer.ggml.tokens").unwrap().len(), 49152);
    assert_eq!(meta.strings("tokenizer.ggml.merges").unwrap().len(), 48900);
}

#[test]
fn tensors_have_the_expected_types_and_shapes() {
    let file = file();
    let expect = [
        ("token_embd.weight", TensorType::Q8_0, vec![576, 49152]),
        ("output_norm.weight", TensorType::F32, vec![576]),
        ("blk.0.attn_q.weight", TensorType::Q4_1, vec![576, 576]),
        ("blk.0.attn_k.weight", TensorType::Q4_1, vec![576, 192]),
        ("blk.29.ffn_down.weight", TensorType::Q4_1, vec![1536, 576]),
        ("blk.29.ffn_norm.weight", TensorType::F32, vec![576]),
    ];
    for (name, ty, dims) in expect {
        let tensor = file.tensor(name).unwrap();
        assert_eq!(tensor.tensor_type(), ty, "{name}");
        assert_eq!(tensor.dims(), dims, "{name}");
        let blocks = tensor.element_count() / u64::from(ty.block_len());
        assert_eq!(tensor.byte_len(), blocks * u64::from(ty.block_bytes()));
        assert_eq!(file.tensor_data(tensor).len() as u64, tensor.byte_len());
        assert_eq!(tensor.row_bytes() * tensor.rows(), tensor.byte_len());
    }
    // Every tensor is one of the three types, and the data is all used.
    let used: u64 = file.tensors().iter().map(|t| t.byte_len()).sum();
    let data_len = file.bytes().len() as u64 - file.data_offset();
    assert!(
        used <= data_len && data_len - used < 272 * 32,
        "{used} of {data_len}"
    );
    assert!(file.tensors().iter().all(|t| t.tensor_type().is_readable()));
}

#[test]
fn dequantized_rows_match_the_gguf_package() {
    let file = file();
    let rows = &reference().dequantized_rows;
    assert!(rows.iter().any(|r| r.ty == "Q4_1") && rows.iter().any(|r| r.ty == "Q8_0"));
    for row in rows {
        let tensor = file.tensor(&row.tensor).unwrap();
        assert_eq!(tensor.tensor_type().name(), row.ty);
        let values = file.dequantize_rows(tensor, row.row..row.row + 1).unwrap();
        assert_eq!(values.len(), row.values.len());
        for (i, (&got, &want)) in values.iter().zip(&row.values).enumerate() {
            // The reference holds each f32 as its shortest decimal.
            assert_eq!(got, want as f32, "{} row {} value {i}", row.tensor, row.row);
        }
    }
    // The norms are plain f32, and whole-tensor decoding agrees with rows.
    let norm = file.tensor("output_norm.weight").unwrap();
    let all = file.dequantize(norm).unwrap();
    assert_eq!(all.len(), 576);
    assert_eq!(file.dequantize_rows(norm, 0..1).unwrap(), all);
    assert!(all.iter().all(|v| v.is_finite()));
}

#[test]
fn the_tokenizer_reads_its_metadata() {
    let tokenizer = tokenizer();
    assert_eq!(tokenizer.vocab_size(), 49152);
    assert_eq!(tokenizer.pre_tokenizer(), PreTokenizer::SmolLm);
    assert_eq!(
        (tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.pad_id()),
        (Some(1), Some(2), Some(2))
    );
    assert!(!tokenizer.adds_bos(), "SmolLM2 says add_bos_token = false");
    assert_eq!(tokenizer.token(1), Some("<|im_start|>"));
    assert_eq!(tokenizer.token_type(1), Some(TokenType::Control));
    assert_eq!(tokenizer.id_of("Ġthe"), Some(260));
}

#[test]
fn prompt_ids_match_the_reference() {
    let tokenizer = tokenizer();
    let reference = reference();
    assert!(reference.prompts.len() >= 8);
    for prompt in &reference.prompts {
        let ids = tokenizer.encode(&prompt.text);
        assert_eq!(ids, prompt.prompt_ids, "{}: {:?}", prompt.name, prompt.text);
        assert_eq!(
            tokenizer.decode(&ids).unwrap(),
            prompt.text,
            "{}",
            prompt.name
        );
        // The reference's continuation decodes to the reference's text.
        assert_eq!(tokenizer.decode(&prompt.ids).unwrap(), prompt.continuation);
        assert_eq!(prompt.ids.len(), prompt.margins.len());
    }
    for case in &reference.tokenize {
        let ids = tokenizer.encode(&case.text);
        assert_eq!(ids, case.ids, "{:?}", case.text);
        assert_eq!(tokenizer.decode(&ids).unwrap(), case.decoded);
    }
}

#[test]
fn the_chat_template_renders_as_jinja_does() {
    let template = ChatTemplate::from_gguf(file().metadata()).unwrap();
    let mut chats = 0;
    for prompt in &reference().prompts {
        let Some(messages) = &prompt.messages else {
            continue;
        };
        let messages: Vec<ChatMessage> = messages
            .iter()
            .map(|m| ChatMessage::new(&m.role, &m.content))
            .collect();
        assert_eq!(
            template.render(&messages, true),
            prompt.text,
            "{}",
            prompt.name
        );
        chats += 1;
    }
    assert!(chats >= 2);
}

#[test]
fn special_tokens_are_single_tokens_only_when_asked() {
    let tokenizer = tokenizer();
    assert_eq!(tokenizer.encode("<|im_start|>user"), [1, 4093]);
    assert_eq!(tokenizer.encode("<|im_start|><|im_end|>"), [1, 2]);
    let plain = tokenizer.encode_plain("<|im_start|>");
    assert!(plain.len() > 1 && !plain.contains(&1), "{plain:?}");
    assert_eq!(tokenizer.decode(&plain).unwrap(), "<|im_start|>");
}

#[test]
fn decoding_handles_partial_utf8_and_bad_ids() {
    let tokenizer = tokenizer();
    let euro = tokenizer.encode("€");
    let bytes: Vec<u8> = euro
        .iter()
        .flat_map(|&id| tokenizer.token_bytes(id).unwrap().to_vec())
        .collect();
    assert_eq!(bytes, "€".as_bytes());
    // The lone lead byte of a 3-byte char is one replacement char.
    let lead = tokenizer.id_of("â").unwrap();
    assert_eq!(tokenizer.token_bytes(lead), Some(&[0xE2][..]));
    assert_eq!(tokenizer.decode(&[lead, 57]).unwrap(), "\u{FFFD}I");
    assert!(tokenizer.decode(&[49152]).is_err());
}

#[test]
fn long_inputs_encode_in_linear_time() {
    let tokenizer = tokenizer();
    let start = std::time::Instant::now();
    let unbroken = "ab".repeat(200_000);
    let ids = tokenizer.encode(&unbroken);
    assert_eq!(tokenizer.decode(&ids).unwrap(), unbroken);
    let text = "The quick brown fox, 12 jumps! ".repeat(10_000);
    let ids = tokenizer.encode(&text);
    assert_eq!(tokenizer.decode(&ids).unwrap(), text);
    let elapsed = start.elapsed();
    assert!(elapsed.as_secs() < 20, "{elapsed:?}");
}

#[derive(Deserialize)]
struct RandomIds {
    cases: Vec<Tokenized>,
}

#[test]
fn random_strings_match_the_reference() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/reference/smollm2/ids.json"
    );
    let fixture: RandomIds = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(fixture.cases.len() >= 300);
    let tokenizer = tokenizer();
    let mut wrong = Vec::new();
    for case in &fixture.cases {
        let ids = tokenizer.encode(&case.text);
        if ids != case.ids {
            wrong.push(format!(
                "{:?}\n  got  {ids:?}\n  want {:?}",
                case.text, case.ids
            ));
        }
        assert_eq!(tokenizer.decode(&case.ids).unwrap(), case.decoded);
    }
    assert!(
        wrong.is_empty(),
        "{} of {}:\n{}",
        wrong.len(),
        fixture.cases.len(),
        wrong.join("\n")
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Printable text (no control or unassigned chars, so every byte has a
    /// token) survives encoding and decoding, whole and streamed.
    #[test]
    fn printable_text_round_trips(text in "\\PC{0,40}") {
        let tokenizer = tokenizer();
        let ids = tokenizer.encode_plain(&text);
        proptest::prop_assert_eq!(tokenizer.decode(&ids).unwrap(), text.clone());
        let mut stream = StreamDecoder::new(tokenizer);
        let mut streamed = String::new();
        for &id in &ids {
            streamed.push_str(&stream.push(id).unwrap());
        }
        streamed.push_str(&stream.finish());
        proptest::prop_assert_eq!(streamed, text);
    }
}
