//! The answer of `POST /v1/embeddings`: OpenAI's embedding list, vectors
//! as JSON numbers or as base64 of their little-endian f32 bytes.

use super::request::Encoding;
use base64::{Engine, engine::general_purpose::STANDARD};
use hrx::models::embed::Embedding;
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct EmbeddingList<'a> {
    object: &'static str,
    data: Vec<Item>,
    model: &'a str,
    usage: Usage,
}

#[derive(Debug, Serialize)]
struct Item {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// The list for `embeddings` (in input order) of `model`; usage counts
/// the tokens the encoder saw.
pub fn list(model: &str, embeddings: Vec<Embedding>, encoding: Encoding) -> EmbeddingList<'_> {
    let tokens = embeddings.iter().map(|e| e.tokens.len()).sum();
    let data = embeddings
        .into_iter()
        .enumerate()
        .map(|(index, e)| Item {
            object: "embedding",
            index,
            embedding: match encoding {
                Encoding::Float => Vector::Float(e.vector),
                Encoding::Base64 => Vector::Base64(base64(&e.vector)),
            },
        })
        .collect();
    EmbeddingList {
        object: "list",
        data,
        model,
        usage: Usage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    }
}

fn base64(vector: &[f32]) -> String {
    let mut bytes = Vec::with_capacity(4 * vector.len());
    for v in vector {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_and_base64_lists() {
        let e = |tokens: Vec<u32>, vector: Vec<f32>| Embedding { tokens, vector };
        let list = list(
            "m",
            vec![
                e(vec![1, 2, 3], vec![1.0, -0.5]),
                e(vec![1, 2], vec![0.25, 0.0]),
            ],
            Encoding::Float,
        );
        let json = serde_json::to_value(&list).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "object": "list",
                "data": [
                    {"object": "embedding", "index": 0, "embedding": [1.0, -0.5]},
                    {"object": "embedding", "index": 1, "embedding": [0.25, 0.0]},
                ],
                "model": "m",
                "usage": {"prompt_tokens": 5, "total_tokens": 5},
            })
        );
        // 1.0f32 is 00 00 80 3f.
        assert_eq!(base64(&[1.0]), "AACAPw==");
    }
}
