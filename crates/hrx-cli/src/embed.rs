//! `hrx embed`: sentences in, one JSON object per sentence out (JSON
//! Lines), through a pool of sentence-encoder slots.
//!
//! The contract scripts rely on:
//!
//! - **Input**: UTF-8 text, one sentence per line. Lines split on `\n`; a
//!   trailing `\r` is removed and nothing else is trimmed (a line of spaces
//!   is a sentence, an empty line is the empty sentence); a final `\n`
//!   does not add an empty sentence. Invalid UTF-8 is an error naming the
//!   line and byte offset, reported before anything is written.
//! - **Output**: `{"index":I,"tokens":[...],"embedding":[...]}` per
//!   sentence, in input order, floats in Rust's shortest round-trip form.
//!   With `--output FILE` the lines go to a temporary file beside FILE that
//!   is renamed into place only when every sentence was written; on failure
//!   it is removed.
//! - **Batching**: every sentence is submitted concurrently (up to
//!   [`WINDOW`] in flight), so the embedder's batches fill; results are
//!   written as they arrive, in order. They do not depend on `--batch`,
//!   `--slots` or the order of the input.

use crate::args::EmbedArgs;
use hrx::{
    Error, Result,
    inference::ModelContext,
    models::{
        bert::Precision,
        embed::{EmbedderOptions, Embedding, SentenceEmbedder},
    },
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::{
    collections::VecDeque,
    fs::File,
    io::{self, BufWriter, IsTerminal, Read, Write},
    path::{Path, PathBuf},
};

/// Sentences submitted but not yet written: bounds memory on large inputs
/// while keeping the embedder's queues full.
pub const WINDOW: usize = 4096;

/// Inputs of more sentences than this show a progress bar (on a terminal).
const PROGRESS_FROM: usize = 256;

/// Embed the sentences `args` names and write them out.
pub fn run(args: &EmbedArgs) -> Result<()> {
    check_model_dir(&args.model)?;
    let input = read_input(args.input.as_deref())?;
    let source = match &args.input {
        Some(path) => path.display().to_string(),
        None => "stdin".to_string(),
    };
    let sentences = split_lines(&input).map_err(|e| Error::msg(format!("{source}: {e}")))?;
    // Open the output before the (slow) model load, so that an unwritable
    // destination fails at once.
    let mut sink = Sink::open(args.output.as_deref())?;
    let embedder = load(args)?;
    let progress = progress_bar(sentences.len());
    let written = embed_all(&embedder, &sentences, args.batch, sink.writer(), &progress);
    progress.finish_and_clear();
    // Dropping the embedder waits for its batching thread to release the
    // device, so nothing of it outlives `main`.
    drop(embedder);
    written?;
    sink.commit()
}

/// The folder must exist before anything else is read.
fn check_model_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Err(Error::msg(format!(
            "the model folder {} does not exist (it needs config.json, tokenizer.json and \
             model.safetensors)",
            dir.display()
        )));
    }
    if !dir.is_dir() {
        return Err(Error::msg(format!(
            "--model {} is not a folder",
            dir.display()
        )));
    }
    Ok(())
}

/// The embedder `args` selects.
fn load(args: &EmbedArgs) -> Result<SentenceEmbedder> {
    let context = crate::demo::device_options(args.device.as_deref())
        .and_then(ModelContext::new)
        .map_err(|e| device_error(args.device.as_deref(), e))?;
    context
        .runtime()
        .gpu()
        .map_err(|e| device_error(args.device.as_deref(), e))?;
    let options = EmbedderOptions {
        precision: if args.f16 {
            Precision::F16
        } else {
            Precision::F32
        },
        max_batch: args.batch,
        slots: args.slots,
        ..EmbedderOptions::default()
    };
    SentenceEmbedder::load(&context, &args.model, &options).map_err(|e| {
        Error::msg(format!(
            "cannot load the model in {}: {e}",
            args.model.display()
        ))
    })
}

fn device_error(device: Option<&str>, e: Error) -> Error {
    match device {
        Some(device) => Error::msg(format!("--device `{device}`: {e}")),
        None => e,
    }
}

/// The whole input, from the file or stdin.
pub(crate) fn read_input(path: Option<&Path>) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    match path {
        Some(path) => {
            bytes = std::fs::read(path)
                .map_err(|e| Error::msg(format!("cannot read {}: {e}", path.display())))?;
        }
        None => {
            io::stdin()
                .lock()
                .read_to_end(&mut bytes)
                .map_err(|e| Error::msg(format!("cannot read stdin: {e}")))?;
        }
    }
    Ok(bytes)
}

/// The sentences of `input`: split on `\n`, a trailing `\r` removed, no
/// other trimming; a final `\n` ends the last sentence rather than starting
/// an empty one. Invalid UTF-8 is an error naming its line (1-based) and
/// byte offsets.
pub fn split_lines(input: &[u8]) -> std::result::Result<Vec<&str>, String> {
    let text = std::str::from_utf8(input).map_err(|e| {
        let offset = e.valid_up_to();
        let before = &input[..offset];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        format!(
            "invalid UTF-8 on line {line} at byte {} of the line (byte offset {offset} of the \
             input)",
            offset - line_start
        )
    })?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    if input.is_empty() {
        return Ok(Vec::new());
    }
    Ok(text
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect())
}

/// One output line.
#[derive(Serialize)]
struct Line<'a> {
    index: usize,
    tokens: &'a [u32],
    embedding: &'a [f32],
}

/// Write `embedding` as the JSON line of sentence `index`. serde_json
/// prints an `f32` in its shortest round-trip form.
pub fn write_line(out: &mut dyn Write, index: usize, embedding: &Embedding) -> io::Result<()> {
    serde_json::to_writer(
        &mut *out,
        &Line {
            index,
            tokens: &embedding.tokens,
            embedding: &embedding.vector,
        },
    )
    .map_err(io::Error::other)?;
    out.write_all(b"\n")
}

/// Submit every sentence in requests of `chunk` from concurrent tasks, at
/// most [`WINDOW`] sentences in flight, and write the results in input
/// order as they complete.
fn embed_all(
    embedder: &SentenceEmbedder,
    sentences: &[&str],
    chunk: usize,
    out: &mut dyn Write,
    progress: &ProgressBar,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(8)))
        .build()
        .map_err(|e| Error::msg(format!("cannot start the tokio runtime: {e}")))?;
    let chunk = chunk.clamp(1, WINDOW);
    runtime.block_on(async {
        let mut pending = VecDeque::new();
        let (mut next, mut in_flight) = (0usize, 0usize);
        loop {
            while next < sentences.len() && in_flight < WINDOW {
                let end = (next + chunk).min(sentences.len());
                let texts: Vec<String> =
                    sentences[next..end].iter().map(|s| s.to_string()).collect();
                let embedder = embedder.clone();
                let task = tokio::spawn(async move {
                    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                    embedder.embed_async(&texts).await
                });
                pending.push_back((next, end - next, task));
                in_flight += end - next;
                next = end;
            }
            let Some((start, count, task)) = pending.pop_front() else {
                break;
            };
            let results = task
                .await
                .map_err(|e| Error::msg(format!("an embedding task failed: {e}")))?
                .map_err(|e| {
                    Error::msg(format!("sentences {}..={}: {e}", start + 1, start + count))
                })?;
            if results.len() != count {
                return Err(Error::msg(format!(
                    "{} embeddings came back for {count} sentences",
                    results.len()
                )));
            }
            for (k, embedding) in results.iter().enumerate() {
                write_line(out, start + k, embedding).map_err(write_error)?;
            }
            in_flight -= count;
            progress.inc(count as u64);
        }
        Ok(())
    })
}

fn write_error(e: io::Error) -> Error {
    Error::msg(format!("cannot write the output: {e}"))
}

/// A bar on stderr for long inputs, only when stderr is a terminal.
fn progress_bar(len: usize) -> ProgressBar {
    if len <= PROGRESS_FROM || !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "embed [{bar:40}] {pos}/{len} sentences, {per_sec}, {elapsed}, eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Where the lines go: stdout, or a temporary file renamed into place on
/// success (and removed otherwise, including on drop).
pub(crate) enum Sink {
    Stdout(BufWriter<io::Stdout>),
    File {
        writer: Option<BufWriter<File>>,
        temporary: PathBuf,
        destination: PathBuf,
    },
}

impl Sink {
    pub(crate) fn open(output: Option<&Path>) -> Result<Sink> {
        let Some(destination) = output else {
            return Ok(Sink::Stdout(BufWriter::new(io::stdout())));
        };
        if destination.is_dir() {
            return Err(Error::msg(format!(
                "--output {} is a folder",
                destination.display()
            )));
        }
        let name = destination.file_name().ok_or_else(|| {
            Error::msg(format!(
                "--output {} does not name a file",
                destination.display()
            ))
        })?;
        let temporary = destination.with_file_name(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&temporary)
            .map_err(|e| {
                Error::msg(format!(
                    "cannot write {} (via {}): {e}",
                    destination.display(),
                    temporary.display()
                ))
            })?;
        Ok(Sink::File {
            writer: Some(BufWriter::new(file)),
            temporary,
            destination: destination.to_path_buf(),
        })
    }

    pub(crate) fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::Stdout(out) => out,
            Sink::File { writer, .. } => writer.as_mut().expect("the output is open until commit"),
        }
    }

    /// Flush; for a file, sync it and rename it into place.
    pub(crate) fn commit(mut self) -> Result<()> {
        match &mut self {
            Sink::Stdout(out) => out.flush().map_err(write_error),
            Sink::File {
                writer,
                temporary,
                destination,
            } => {
                let file = writer
                    .take()
                    .expect("the output is open until commit")
                    .into_inner()
                    .map_err(|e| write_error(e.into_error()))?;
                file.sync_all().map_err(write_error)?;
                drop(file);
                std::fs::rename(&*temporary, &*destination).map_err(|e| {
                    Error::msg(format!(
                        "cannot move {} to {}: {e}",
                        temporary.display(),
                        destination.display()
                    ))
                })?;
                // Renamed: nothing left for drop to remove.
                temporary.clear();
                Ok(())
            }
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Sink::File {
            writer, temporary, ..
        } = self
        {
            drop(writer.take());
            if !temporary.as_os_str().is_empty() {
                let _ = std::fs::remove_file(&*temporary);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_only() {
        assert_eq!(split_lines(b"").unwrap(), Vec::<&str>::new());
        assert_eq!(split_lines(b"\n").unwrap(), vec![""]);
        assert_eq!(split_lines(b"a").unwrap(), vec!["a"]);
        assert_eq!(split_lines(b"a\n").unwrap(), vec!["a"]);
        assert_eq!(split_lines(b"a\n\n").unwrap(), vec!["a", ""]);
        assert_eq!(
            split_lines(b"a\r\n  \n\nb c \r\r\nd\re").unwrap(),
            vec!["a", "  ", "", "b c \r", "d\re"]
        );
        assert_eq!(split_lines(b"\r\n").unwrap(), vec![""]);
    }

    #[test]
    fn invalid_utf8_names_line_and_offsets() {
        let e = split_lines(b"one\ntwo\nth\xffree\n").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("byte 2 of the line"), "{e}");
        assert!(e.contains("byte offset 10"), "{e}");
        let e = split_lines(b"\xc3").unwrap_err();
        assert!(e.contains("line 1 at byte 0"), "{e}");
    }

    #[test]
    fn lines_print_shortest_round_trip_floats() {
        let embedding = Embedding {
            tokens: vec![101, 102],
            vector: vec![0.1, -1.5e-7, 1.0 / 3.0],
        };
        let mut out = Vec::new();
        write_line(&mut out, 7, &embedding).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"index\":7,\"tokens\":[101,102],\"embedding\":[0.1,-1.5e-7,0.33333334]}\n"
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let back: Vec<f32> = value["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(back, embedding.vector);
    }

    #[test]
    fn a_failed_file_output_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("hrx-embed-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let destination = dir.join("out.jsonl");
        {
            let mut sink = Sink::open(Some(&destination)).unwrap();
            sink.writer().write_all(b"partial").unwrap();
        }
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let mut sink = Sink::open(Some(&destination)).unwrap();
        sink.writer().write_all(b"whole\n").unwrap();
        sink.commit().unwrap();
        assert_eq!(std::fs::read(&destination).unwrap(), b"whole\n");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
