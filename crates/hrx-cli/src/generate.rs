//! `hrx generate`: prompts in, generations out, both JSON Lines, through
//! one generator that batches every prompt continuously.
//!
//! The contract scripts rely on:
//!
//! - **Input**: one JSON object per line: `{"prompt": "..."}` (text;
//!   special tokens written in it are single tokens, BOS only where the
//!   model asks for it) or `{"messages": [{"role", "content"}, ...]}`
//!   (rendered with the model's chat template, ending with the
//!   assistant's turn). Blank lines are skipped. A malformed line is an
//!   error naming it, reported before anything runs.
//! - **Output**: `{"prompt_ids": [...], "ids": [...], "text": "...",
//!   "finish_reason": "stop"|"length"}` per input line, in input order.
//!   Greedy unless `--temperature` is above 0; with a seed, sampling is
//!   deterministic. With `--output FILE` the file appears only when every
//!   line was written.
//! - **Progress**: one line on stderr once the model is loaded (its
//!   device memory and the element types of the caches, `--kv-cache`,
//!   and of the activations between kernels, `--activations`).
//! - **Batching**: every prompt is submitted at once; the generator runs
//!   up to `--slots` sequences per step and admits the rest as slots free
//!   up. Greedy results do not depend on `--slots` beyond float rounding
//!   at near-ties.

use crate::args::GenerateArgs;
use crate::embed::{Sink, read_input};
use hrx::{
    Error, Result,
    inference::ModelContext,
    models::{
        llama::{GenerateRequest, Generation, Generator, GeneratorOptions, Sampling},
        tokenizer::ChatMessage,
    },
};
use serde::{Deserialize, Serialize};

/// One input line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Prompt {
    prompt: Option<String>,
    messages: Option<Vec<Message>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Message {
    role: String,
    content: String,
}

/// One output line.
#[derive(Serialize)]
struct Line<'a> {
    prompt_ids: &'a [u32],
    ids: &'a [u32],
    text: &'a str,
    finish_reason: &'a str,
}

/// A parsed prompt: text or a chat.
enum Input {
    Text(String),
    Chat(Vec<ChatMessage>),
}

/// Generate for every line of the input and write the results in order.
pub fn run(args: &GenerateArgs) -> Result<()> {
    if !args.model.is_file() {
        return Err(Error::msg(format!(
            "--model {} is not a GGUF file",
            args.model.display()
        )));
    }
    let source = args
        .input
        .as_ref()
        .map_or("stdin".to_string(), |p| p.display().to_string());
    let inputs = parse(&read_input(args.input.as_deref())?, &source)?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling
        .check()
        .map_err(|e| Error::msg(format!("sampling: {e}")))?;
    let mut sink = Sink::open(args.output.as_deref())?;
    let context =
        crate::demo::device_options(args.device.as_deref()).and_then(ModelContext::new)?;
    let options = GeneratorOptions {
        sequences: args.slots,
        context: args.context,
        prefill_rows: args.prefill_rows,
        cache: args.kv_cache.into(),
        activations: args.activations.into(),
        // Every prompt is submitted at once.
        queue: inputs.len().max(1),
        ..GeneratorOptions::default()
    };
    let generator = Generator::open(&context, &args.model, options)
        .map_err(|e| Error::msg(format!("cannot load {}: {e}", args.model.display())))?;
    eprintln!(
        "hrx generate: loaded {}: {:.1} MiB on the device, {} caches, {} activations",
        args.model.display(),
        generator.stats().device_bytes as f64 / f64::from(1 << 20),
        args.kv_cache.name(),
        args.activations.name(),
    );
    let mut streams = Vec::with_capacity(inputs.len());
    let mut prompts = Vec::with_capacity(inputs.len());
    for (line, input) in inputs {
        let prompt = match input {
            Input::Text(text) => generator.encode(&text),
            Input::Chat(messages) => generator.encode_chat(&messages)?,
        };
        let request = GenerateRequest {
            prompt: prompt.clone(),
            max_new_tokens: args.max_new,
            sampling,
            stop: Vec::new(),
            stop_at_eos: !args.ignore_eos,
        };
        let stream = generator
            .generate(request)
            .map_err(|e| Error::msg(format!("{source}:{line}: {e}")))?;
        streams.push(stream);
        prompts.push(prompt);
    }
    let out = sink.writer();
    for (stream, prompt) in streams.into_iter().zip(&prompts) {
        let generation: Generation = stream.collect_blocking()?;
        let line = Line {
            prompt_ids: prompt,
            ids: &generation.ids,
            text: &generation.text,
            finish_reason: generation.reason.as_str(),
        };
        serde_json::to_writer(&mut *out, &line).map_err(|e| Error::msg(e.to_string()))?;
        out.write_all(b"\n")
            .map_err(|e| Error::msg(format!("cannot write the output: {e}")))?;
    }
    drop(generator);
    sink.commit()
}

/// The prompts of `input` with their 1-based line numbers.
fn parse(input: &[u8], source: &str) -> Result<Vec<(usize, Input)>> {
    let text = std::str::from_utf8(input).map_err(|e| {
        Error::msg(format!(
            "{source}: invalid UTF-8 at byte offset {}",
            e.valid_up_to()
        ))
    })?;
    let mut prompts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| Error::msg(format!("{source}:{number}: {why}"));
        let prompt: Prompt = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let input = match (prompt.prompt, prompt.messages) {
            (Some(text), None) => Input::Text(text),
            (None, Some(messages)) if !messages.is_empty() => Input::Chat(
                messages
                    .into_iter()
                    .map(|m| ChatMessage::new(m.role, m.content))
                    .collect(),
            ),
            (None, Some(_)) => return Err(bad("`messages` is empty".into())),
            _ => {
                return Err(bad(
                    "each line needs exactly one of `prompt` or `messages`".into()
                ));
            }
        };
        prompts.push((number, input));
    }
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_prompts_or_chats_and_bad_lines_are_named() {
        let input =
            b"{\"prompt\": \"a\"}\n\n{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n";
        let parsed = parse(input, "in").unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].0, 3);
        assert!(matches!(&parsed[0].1, Input::Text(t) if t == "a"));
        assert!(matches!(&parsed[1].1, Input::Chat(m) if m.len() == 1));
        for (bad, why) in [
            (&b"{\"prompt\": 3}"[..], "in:1"),
            (b"{}", "exactly one"),
            (b"{\"prompt\": \"a\", \"messages\": []}", "exactly one"),
            (b"{\"messages\": []}", "empty"),
            (b"{\"prompt\": \"a\", \"x\": 1}", "unknown field"),
            (b"\xff", "UTF-8"),
        ] {
            let error = parse(bad, "in").err().expect("an error").to_string();
            assert!(error.contains(why), "{error}");
        }
    }
}
