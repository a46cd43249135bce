//! The body of `POST /v1/embeddings`, read and checked field by field so
//! that every mistake gets a precise OpenAI-style message.

use super::errors::ApiError;
use serde_json::{Map, Value};

/// What a request may carry, from the flags and the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Inputs per request.
    pub max_inputs: usize,
    /// Token ids per token-array input (the model's `max_seq_length`).
    pub max_tokens: usize,
    /// Token ids run from 0 to `vocab_size - 1`.
    pub vocab_size: usize,
    /// The embedding width.
    pub dimensions: usize,
}

/// The inputs: texts (tokenized and truncated by the server) or token ids
/// (the model's input ids, `[CLS]` and `[SEP]` included, taken as given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inputs {
    Texts(Vec<String>),
    Ids(Vec<Vec<u32>>),
}

/// How embeddings are written in the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// A JSON array of numbers.
    Float,
    /// The little-endian f32 bytes, base64.
    Base64,
}

/// A checked request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddingRequest {
    pub model: String,
    pub inputs: Inputs,
    pub encoding: Encoding,
}

const INPUT_SHAPES: &str = "'input' must be a string, an array of strings, an array of token ids \
or an array of arrays of token ids";

/// `body` as a JSON object: invalid UTF-8, invalid JSON and other JSON
/// values are errors saying which.
pub(super) fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::invalid(
            format!(
                "the request body is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
            None,
        )
    })?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}"), None))?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => Err(ApiError::invalid(
            "the request body must be a JSON object",
            None,
        )),
    }
}

/// The request's `model`: a string (absent or null is "missing").
pub(super) fn model_name(fields: &Map<String, Value>) -> Result<String, ApiError> {
    match fields.get("model") {
        Some(Value::String(model)) => Ok(model.clone()),
        None | Some(Value::Null) => Err(ApiError::invalid(
            "you must provide a model parameter",
            Some("model"),
        )),
        Some(_) => Err(ApiError::invalid("'model' must be a string", Some("model"))),
    }
}

/// Read `body` (the raw bytes) as an embeddings request within `limits`.
pub fn parse(body: &[u8], limits: &Limits) -> Result<EmbeddingRequest, ApiError> {
    let fields = json_object(body)?;
    let model = model_name(&fields)?;
    let inputs = inputs(fields.get("input"), limits)?;
    check_dimensions(&fields, limits)?;
    Ok(EmbeddingRequest {
        model,
        inputs,
        encoding: encoding(&fields)?,
    })
}

fn inputs(input: Option<&Value>, limits: &Limits) -> Result<Inputs, ApiError> {
    let invalid = |message: String| ApiError::invalid(message, Some("input"));
    let items = match input {
        None | Some(Value::Null) => return Err(invalid("'input' is a required property".into())),
        Some(text @ Value::String(_)) => return texts(std::slice::from_ref(text)),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(invalid(INPUT_SHAPES.into())),
    };
    if items.is_empty() {
        return Err(invalid("'input' must not be an empty array".into()));
    }
    match &items[0] {
        Value::String(_) => {
            if items.len() > limits.max_inputs {
                return Err(invalid(format!(
                    "'input' has {} items; this server takes at most {} per request",
                    items.len(),
                    limits.max_inputs
                )));
            }
            texts(items)
        }
        Value::Number(_) => Ok(Inputs::Ids(vec![token_ids(items, None, limits)?])),
        Value::Array(_) => {
            if items.len() > limits.max_inputs {
                return Err(invalid(format!(
                    "'input' has {} token arrays; this server takes at most {} per request",
                    items.len(),
                    limits.max_inputs
                )));
            }
            let arrays = items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::Array(ids) => token_ids(ids, Some(i), limits),
                    _ => Err(invalid(INPUT_SHAPES.into())),
                })
                .collect::<Result<_, _>>()?;
            Ok(Inputs::Ids(arrays))
        }
        _ => Err(invalid(INPUT_SHAPES.into())),
    }
}

/// Strings, none empty.
fn texts(items: &[Value]) -> Result<Inputs, ApiError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(text) if text.is_empty() => Err(ApiError::invalid(
                format!("input {i} is an empty string; every input needs text"),
                Some("input"),
            )),
            Value::String(text) => Ok(text.clone()),
            _ => Err(ApiError::invalid(INPUT_SHAPES, Some("input"))),
        })
        .collect::<Result<_, _>>()
        .map(Inputs::Texts)
}

/// One token array (input `index` of several, or the only one).
fn token_ids(ids: &[Value], index: Option<usize>, limits: &Limits) -> Result<Vec<u32>, ApiError> {
    let which = index.map_or_else(
        || "the token array".to_string(),
        |i| format!("token array {i}"),
    );
    let invalid = |message: String| ApiError::invalid(message, Some("input"));
    if ids.is_empty() {
        return Err(invalid(format!("{which} is empty")));
    }
    if ids.len() > limits.max_tokens {
        return Err(invalid(format!(
            "{which} has {} token ids; the model takes at most {}",
            ids.len(),
            limits.max_tokens
        )));
    }
    ids.iter()
        .enumerate()
        .map(|(position, id)| match id.as_u64() {
            Some(id) if (id as usize) < limits.vocab_size => Ok(id as u32),
            Some(id) => Err(invalid(format!(
                "{which}: token id {id} at position {position} is outside the vocabulary 0..{}",
                limits.vocab_size
            ))),
            None => Err(invalid(format!(
                "{which}: position {position} holds {id}, not a token id (an integer from 0 to {})",
                limits.vocab_size - 1
            ))),
        })
        .collect()
}

fn encoding(fields: &Map<String, Value>) -> Result<Encoding, ApiError> {
    match fields.get("encoding_format") {
        None | Some(Value::Null) => Ok(Encoding::Float),
        Some(Value::String(f)) if f == "float" => Ok(Encoding::Float),
        Some(Value::String(f)) if f == "base64" => Ok(Encoding::Base64),
        Some(other) => Err(ApiError::invalid(
            format!("'encoding_format' must be \"float\" or \"base64\", not {other}"),
            Some("encoding_format"),
        )),
    }
}

/// `dimensions` may only repeat the model's width.
fn check_dimensions(fields: &Map<String, Value>, limits: &Limits) -> Result<(), ApiError> {
    match fields.get("dimensions") {
        None | Some(Value::Null) => Ok(()),
        Some(d) if d.as_u64() == Some(limits.dimensions as u64) => Ok(()),
        Some(d) => Err(ApiError::invalid(
            format!(
                "this model's embeddings have {} dimensions and cannot be shortened (dimensions = {d})",
                limits.dimensions
            ),
            Some("dimensions"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_inputs: 3,
        max_tokens: 8,
        vocab_size: 100,
        dimensions: 4,
    };

    fn ok(body: &str) -> EmbeddingRequest {
        parse(body.as_bytes(), &LIMITS).unwrap_or_else(|e| panic!("{body}: {e:?}"))
    }

    fn bad(body: &[u8]) -> ApiError {
        let e = parse(body, &LIMITS).expect_err(&String::from_utf8_lossy(body));
        assert_eq!((e.status.as_u16(), e.kind), (400, "invalid_request_error"));
        e
    }

    #[test]
    fn every_input_shape() {
        let texts = |v: &[&str]| Inputs::Texts(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(ok(r#"{"model":"m","input":"a b"}"#).inputs, texts(&["a b"]));
        assert_eq!(
            ok(r#"{"model":"m","input":["a","b"]}"#).inputs,
            texts(&["a", "b"])
        );
        assert_eq!(
            ok(r#"{"model":"m","input":[1,2,3]}"#).inputs,
            Inputs::Ids(vec![vec![1, 2, 3]])
        );
        assert_eq!(
            ok(r#"{"model":"m","input":[[1],[2,99]],"user":"u","dimensions":4}"#).inputs,
            Inputs::Ids(vec![vec![1], vec![2, 99]])
        );
        assert_eq!(ok(r#"{"model":"m","input":"x"}"#).encoding, Encoding::Float);
        let r = ok(r#"{"model":"m","input":"x","encoding_format":"base64"}"#);
        assert_eq!((r.model.as_str(), r.encoding), ("m", Encoding::Base64));
    }

    #[test]
    fn mistakes_name_their_field() {
        let param = |body: &str| bad(body.as_bytes()).param;
        assert!(bad(b"{\"model\":\"m\",").message.contains("not valid JSON"));
        assert!(
            bad(b"{\"model\":\"m\",\"input\":\"\xff\"}")
                .message
                .contains("UTF-8")
        );
        assert!(bad(b"[1]").message.contains("JSON object"));
        assert_eq!(param(r#"{"input":"x"}"#), Some("model"));
        assert_eq!(param(r#"{"model":1,"input":"x"}"#), Some("model"));
        for input in [
            "null",
            "\"\"",
            "[]",
            "[\"\"]",
            "7",
            "{}",
            "[\"a\",1]",
            "[1,\"a\"]",
            "[1.5]",
            "[-1]",
            "[100]",
            "[[]]",
            "[[1],2]",
            "[[1,2,3,4,5,6,7,8,9]]",
            "[1,2,3,4,5,6,7,8,9]",
            "[\"a\",\"b\",\"c\",\"d\"]",
            "[[1],[1],[1],[1]]",
            "[true]",
        ] {
            let body = format!(r#"{{"model":"m","input":{input}}}"#);
            assert_eq!(param(&body), Some("input"), "{body}");
        }
        assert!(
            bad(br#"{"model":"m","input":[1,100]}"#)
                .message
                .contains("outside the vocabulary")
        );
        assert!(
            bad(br#"{"model":"m","input":["a","b","c","d"]}"#)
                .message
                .contains("at most 3")
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","encoding_format":"int8"}"#),
            Some("encoding_format")
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","dimensions":2}"#),
            Some("dimensions")
        );
        assert_eq!(
            param(r#"{"model":"m","input":"x","dimensions":"4"}"#),
            Some("dimensions")
        );
    }
}
