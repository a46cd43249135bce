//! The llama constants of a GGUF file: read, defaulted where llama.cpp
//! has defaults, and checked (inconsistent or absurd counts are errors
//! naming the key); the tensor check names the first missing or wrong
//! tensor; corrupting a tiny llama file never panics.

use crate::gguf_common::{string, tiny_llama, use_everything};
use hrx_models::gguf::{GgufErrorKind, LlamaConfig};
use proptest::prelude::*;

fn llama_error(edit: impl FnOnce(&mut Vec<(&'static str, Vec<u8>)>)) -> String {
    let file = tiny_llama(edit).parse().unwrap();
    LlamaConfig::from_gguf(&file).unwrap_err().to_string()
}

fn set_u32(keys: &mut [(&'static str, Vec<u8>)], key: &str, value: u32) {
    keys.iter_mut().find(|(k, _)| *k == key).unwrap().1 =
        [vec![4, 0, 0, 0], value.to_le_bytes().to_vec()].concat();
}

#[test]
fn llama_constants_are_read_and_checked() {
    let file = tiny_llama(|_| {}).parse().unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    assert_eq!(
        (
            config.layers,
            config.width,
            config.ffn_width,
            config.heads,
            config.kv_heads
        ),
        (2, 8, 16, 2, 1)
    );
    assert_eq!(
        (config.head_dim, config.rope_dims, config.vocab_size),
        (4, 4, 4)
    );
    assert_eq!((config.rope_base, config.context_length), (10000.0, 64));
    assert!(config.tied_embedding);
    config.check_tensors(&file).unwrap();

    // Defaults where llama.cpp has them.
    let file = tiny_llama(|k| {
        k.retain(|(key, _)| !key.ends_with("head_count_kv") && !key.ends_with("freq_base"))
    })
    .parse()
    .unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    assert_eq!((config.kv_heads, config.rope_base), (2, 10000.0));
    // Two query heads read two key/value heads now: attn_k is too small.
    let error = config.check_tensors(&file).unwrap_err();
    assert!(error.to_string().contains("blk.0.attn_k.weight"), "{error}");
}

#[test]
fn inconsistent_llama_constants_are_errors_naming_the_key() {
    let cases: [(&str, u32, &str); 6] = [
        ("llama.attention.head_count", 3, "do not divide the width"),
        ("llama.attention.head_count", 8, "odd"),
        ("llama.attention.head_count_kv", 3, "do not divide the 2"),
        ("llama.block_count", 0, "not a count"),
        ("llama.vocab_size", 0, "not a count"),
        ("llama.block_count", 1 << 24, "not a count from 1 to 4096"),
    ];
    for (key, value, expect) in cases {
        let error = llama_error(|k| set_u32(k, key, value));
        assert!(
            error.contains(key) && error.contains(expect),
            "{key}={value}: {error}"
        );
    }
    let error = llama_error(|k| k.retain(|(key, _)| *key != "llama.embedding_length"));
    assert!(
        error.contains("\"llama.embedding_length\" is missing"),
        "{error}"
    );
    let error = llama_error(|k| {
        k[0].1 = [8u32.to_le_bytes().to_vec(), string(b"gpt2")].concat();
    });
    assert!(error.contains("not a llama-family architecture"), "{error}");
    let error = llama_error(|k| {
        k.iter_mut()
            .find(|(key, _)| key.ends_with("rms_epsilon"))
            .unwrap()
            .1 = [vec![6, 0, 0, 0], f32::NAN.to_le_bytes().to_vec()].concat();
    });
    assert!(error.contains("finite positive"), "{error}");
}

#[test]
fn check_tensors_names_the_missing_one() {
    let mut w = tiny_llama(|_| {});
    w.infos
        .retain(|i| !i.windows(16).any(|s| s == b"blk.1.ffn_up.wei"));
    let file = w.parse().unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let error = config.check_tensors(&file).unwrap_err();
    assert_eq!(
        error.kind,
        GgufErrorKind::MissingTensor("blk.1.ffn_up.weight".into())
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn corrupted_llama_files_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = tiny_llama(|_| {}).bytes();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        use_everything(bytes);
    }
}
