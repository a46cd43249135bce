//! The bodies of `POST /v1/completions` and `POST /v1/chat/completions`,
//! read and checked field by field so that every mistake gets a precise
//! OpenAI-style message.
//!
//! Supported: `model`, `prompt` (a string, one string in an array, token
//! ids, or one array of token ids) or `messages` (`role` and `content`, a
//! string or an array of text parts), `max_tokens` (and
//! `max_completion_tokens` for chat), `temperature` (default 1), `top_p`,
//! `top_k` (an extension), `seed`, `stop` (a string or up to 4),
//! `stream`, `stream_options.include_usage`, `n` (1 only). Settings hrx
//! does not implement (`logprobs`, `echo`, `best_of` above 1, `suffix`,
//! penalties other than 0) are refused rather than ignored; other fields
//! are ignored.

use super::{errors::ApiError, request};
use hrx::models::{llama::Sampling, tokenizer::ChatMessage};
use serde_json::{Map, Value};

/// Which endpoint a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// What to continue.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    Chat(Vec<ChatMessage>),
}

/// A checked request.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    pub max_tokens: Option<usize>,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

/// The most stop strings (OpenAI's limit).
const MAX_STOP: usize = 4;
/// The largest `max_tokens` accepted before the context check.
const MAX_TOKENS: u64 = 1 << 20;

fn invalid(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::invalid(message, Some(param))
}

/// Read `body` as a request for `endpoint`; `seed` is used when the body
/// has none.
pub fn parse(body: &[u8], endpoint: Endpoint, seed: u64) -> Result<CompletionRequest, ApiError> {
    let fields = request::json_object(body)?;
    let model = request::model_name(&fields)?;
    refuse_unsupported(&fields)?;
    let prompt = match endpoint {
        Endpoint::Completions => prompt(fields.get("prompt"))?,
        Endpoint::Chat => Prompt::Chat(messages(fields.get("messages"))?),
    };
    let max_tokens = match endpoint {
        Endpoint::Chat if fields.contains_key("max_completion_tokens") => {
            count(&fields, "max_completion_tokens")?
        }
        _ => count(&fields, "max_tokens")?,
    };
    let number = |name: &'static str, default: f64| -> Result<f64, ApiError> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Number(n)) => n
                .as_f64()
                .ok_or_else(|| invalid(format!("'{name}' must be a number"), name)),
            Some(_) => Err(invalid(format!("'{name}' must be a number"), name)),
        }
    };
    let sampling = Sampling {
        temperature: number("temperature", 1.0)? as f32,
        top_p: number("top_p", 1.0)? as f32,
        top_k: count(&fields, "top_k")?.unwrap_or(0),
        seed: match fields.get("seed") {
            None | Some(Value::Null) => seed,
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                n.as_u64().unwrap_or_else(|| n.as_i64().unwrap_or(0) as u64)
            }
            Some(_) => return Err(invalid("'seed' must be an integer", "seed")),
        },
    };
    sampling.check().map_err(|e| {
        let param = if e.to_string().contains("temperature") {
            "temperature"
        } else {
            "top_p"
        };
        invalid(e.to_string(), param)
    })?;
    let stream = match fields.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("'stream' must be a boolean", "stream")),
    };
    let include_usage = match fields.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(invalid(
                    "'stream_options.include_usage' must be a boolean",
                    "stream_options",
                ));
            }
        },
        Some(_) => {
            return Err(invalid(
                "'stream_options' must be an object",
                "stream_options",
            ));
        }
    };
    Ok(CompletionRequest {
        model,
        prompt,
        max_tokens,
        sampling,
        stop: stop(fields.get("stop"))?,
        stream,
        include_usage,
    })
}

/// A positive integer field, absent or null as `None`.
fn count(fields: &Map<String, Value>, name: &'static str) -> Result<Option<usize>, ApiError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v <= MAX_TOKENS && (v > 0 || name == "top_k") => Ok(Some(v as usize)),
            _ => Err(invalid(
                format!("'{name}' must be an integer from 1 to {MAX_TOKENS}"),
                name,
            )),
        },
        Some(_) => Err(invalid(format!("'{name}' must be an integer"), name)),
    }
}

/// Settings that would change the answer and that hrx does not implement.
fn refuse_unsupported(fields: &Map<String, Value>) -> Result<(), ApiError> {
    let is = |name: &str, ok: &dyn Fn(&Value) -> bool| {
        fields.get(name).is_none_or(|v| v.is_null() || ok(v))
    };
    let one = |v: &Value| v.as_u64() == Some(1);
    let zero = |v: &Value| v.as_f64() == Some(0.0);
    let off = |v: &Value| v == &Value::Bool(false);
    let checks: [(&'static str, bool, &str); 7] = [
        ("n", is("n", &one), "only n = 1 is supported"),
        (
            "best_of",
            is("best_of", &one),
            "only best_of = 1 is supported",
        ),
        ("echo", is("echo", &off), "echo is not supported"),
        (
            "logprobs",
            is("logprobs", &|v| off(v) || v.as_u64() == Some(0)),
            "logprobs are not supported",
        ),
        (
            "suffix",
            is("suffix", &|_| false),
            "suffix is not supported",
        ),
        (
            "presence_penalty",
            is("presence_penalty", &zero),
            "presence_penalty is not supported (only 0)",
        ),
        (
            "frequency_penalty",
            is("frequency_penalty", &zero),
            "frequency_penalty is not supported (only 0)",
        ),
    ];
    match checks.into_iter().find(|(_, ok, _)| !ok) {
        Some((param, _, why)) => Err(invalid(why, param)),
        None => Ok(()),
    }
}

fn prompt(value: Option<&Value>) -> Result<Prompt, ApiError> {
    const SHAPES: &str = "'prompt' must be a string, an array of one string, an array of token \
ids or an array of one array of token ids";
    let ids = |items: &[Value]| -> Option<Vec<u32>> {
        items
            .iter()
            .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
            .collect()
    };
    match value {
        None => Err(invalid("you must provide a prompt", "prompt")),
        Some(Value::String(text)) => Ok(Prompt::Text(text.clone())),
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::String(text)] => Ok(Prompt::Text(text.clone())),
            [Value::Array(inner)] => ids(inner)
                .map(Prompt::Ids)
                .ok_or_else(|| invalid(SHAPES, "prompt")),
            [] => Err(invalid("'prompt' is empty", "prompt")),
            items if items.iter().all(Value::is_number) => ids(items)
                .map(Prompt::Ids)
                .ok_or_else(|| invalid(SHAPES, "prompt")),
            items if items.iter().all(|v| v.is_string() || v.is_array()) => Err(invalid(
                "one prompt per request is supported; send the others separately",
                "prompt",
            )),
            _ => Err(invalid(SHAPES, "prompt")),
        },
        Some(_) => Err(invalid(SHAPES, "prompt")),
    }
}

fn messages(value: Option<&Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let Some(value) = value else {
        return Err(invalid("you must provide messages", "messages"));
    };
    let Value::Array(items) = value else {
        return Err(invalid("'messages' must be an array", "messages"));
    };
    if items.is_empty() {
        return Err(invalid("'messages' is empty", "messages"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let bad = |why: &str| invalid(format!("messages[{i}]: {why}"), "messages");
            let Value::Object(message) = item else {
                return Err(bad("must be an object"));
            };
            let role = match message.get("role") {
                Some(Value::String(role)) if !role.is_empty() => role.clone(),
                _ => return Err(bad("'role' must be a non-empty string")),
            };
            let content = match message.get("content") {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| match (part.get("type"), part.get("text")) {
                        (Some(Value::String(t)), Some(Value::String(text))) if t == "text" => {
                            Ok(text.as_str())
                        }
                        _ => Err(bad(
                            "content parts must be {\"type\": \"text\", \"text\": ...}",
                        )),
                    })
                    .collect::<Result<String, _>>()?,
                Some(Value::Null) | None => String::new(),
                Some(_) => return Err(bad("'content' must be a string or an array of text parts")),
            };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

fn stop(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let stops = match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    invalid("'stop' must be a string or an array of strings", "stop")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(invalid(
                "'stop' must be a string or an array of strings",
                "stop",
            ));
        }
    };
    if stops.len() > MAX_STOP {
        return Err(invalid(
            format!("'stop' has {} strings; at most {MAX_STOP}", stops.len()),
            "stop",
        ));
    }
    if stops.iter().any(String::is_empty) {
        return Err(invalid("'stop' strings must not be empty", "stop"));
    }
    Ok(stops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(body: &str) -> Result<CompletionRequest, ApiError> {
        parse(body.as_bytes(), Endpoint::Completions, 7)
    }

    fn chat(body: &str) -> Result<CompletionRequest, ApiError> {
        parse(body.as_bytes(), Endpoint::Chat, 7)
    }

    #[test]
    fn prompts_in_every_shape() {
        let r = completion(r#"{"model": "m", "prompt": "hi"}"#).unwrap();
        assert_eq!(r.prompt, Prompt::Text("hi".into()));
        assert_eq!(
            (r.max_tokens, r.stream, r.sampling.temperature),
            (None, false, 1.0)
        );
        assert_eq!(r.sampling.seed, 7);
        let r = completion(r#"{"model": "m", "prompt": ["hi"], "seed": 3, "stop": "x"}"#).unwrap();
        assert_eq!(
            (r.prompt, r.sampling.seed, r.stop),
            (Prompt::Text("hi".into()), 3, vec!["x".into()])
        );
        let r = completion(r#"{"model": "m", "prompt": [1, 2]}"#).unwrap();
        assert_eq!(r.prompt, Prompt::Ids(vec![1, 2]));
        let r = completion(r#"{"model": "m", "prompt": [[5]], "max_tokens": 3}"#).unwrap();
        assert_eq!((r.prompt, r.max_tokens), (Prompt::Ids(vec![5]), Some(3)));
    }

    #[test]
    fn chats_and_their_options() {
        let r = chat(
            r#"{"model": "m", "messages": [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            "max_completion_tokens": 9, "temperature": 0, "stream": true,
            "stream_options": {"include_usage": true}}"#,
        )
        .unwrap();
        let Prompt::Chat(messages) = &r.prompt else {
            panic!()
        };
        assert_eq!(messages[1], ChatMessage::new("user", "ab"));
        assert_eq!(
            (r.max_tokens, r.stream, r.include_usage),
            (Some(9), true, true)
        );
        assert!(r.sampling.is_greedy());
    }

    #[test]
    fn mistakes_name_their_field() {
        for (body, param, words) in [
            (r#"{"prompt": "x"}"#, "model", "model"),
            (r#"{"model": "m"}"#, "prompt", "prompt"),
            (
                r#"{"model": "m", "prompt": ["a", "b"]}"#,
                "prompt",
                "one prompt",
            ),
            (r#"{"model": "m", "prompt": []}"#, "prompt", "empty"),
            (r#"{"model": "m", "prompt": [-1]}"#, "prompt", "token ids"),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": 0}"#,
                "max_tokens",
                "from 1",
            ),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": "9"}"#,
                "max_tokens",
                "integer",
            ),
            (
                r#"{"model": "m", "prompt": "x", "temperature": 3}"#,
                "temperature",
                "temperature",
            ),
            (
                r#"{"model": "m", "prompt": "x", "top_p": 0}"#,
                "top_p",
                "top_p",
            ),
            (
                r#"{"model": "m", "prompt": "x", "seed": 1.5}"#,
                "seed",
                "integer",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stop": ["a","b","c","d","e"]}"#,
                "stop",
                "at most",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stop": [""]}"#,
                "stop",
                "empty",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stream": 1}"#,
                "stream",
                "boolean",
            ),
            (r#"{"model": "m", "prompt": "x", "n": 2}"#, "n", "n = 1"),
            (
                r#"{"model": "m", "prompt": "x", "logprobs": 2}"#,
                "logprobs",
                "not supported",
            ),
            (
                r#"{"model": "m", "prompt": "x", "presence_penalty": 1}"#,
                "presence_penalty",
                "only 0",
            ),
        ] {
            let error = completion(body).unwrap_err();
            assert_eq!(error.param, Some(param), "{body}");
            assert!(error.message.contains(words), "{body}: {}", error.message);
            assert_eq!(error.status.as_u16(), 400);
        }
        for (body, words) in [
            (r#"{"model": "m"}"#, "messages"),
            (r#"{"model": "m", "messages": []}"#, "empty"),
            (r#"{"model": "m", "messages": [{"content": "x"}]}"#, "role"),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": 5}]}"#,
                "content",
            ),
        ] {
            let error = chat(body).unwrap_err();
            assert_eq!(error.param, Some("messages"), "{body}");
            assert!(error.message.contains(words), "{body}: {}", error.message);
        }
        assert!(completion("[1]").unwrap_err().message.contains("object"));
        assert!(completion("{").unwrap_err().message.contains("JSON"));
        assert!(
            parse(b"\xff", Endpoint::Chat, 0)
                .unwrap_err()
                .message
                .contains("UTF-8")
        );
    }
}
