//! The demo's requests: deterministic token inputs and their CPU
//! references, made before any timing starts.

use hrx::{
    Error, Result,
    models::{Weights, toy::TransformerConfig},
};

/// One request: token ids as the device reads them, and the logits the CPU
/// reference expects.
pub struct Request {
    /// `i32` tokens `[batch, seq]`, little-endian bytes.
    pub bytes: Vec<u8>,
    /// The tokens themselves, for the naive path.
    pub tokens: Vec<i32>,
    /// Reference logits `[batch, seq, vocab]`.
    pub expected: Vec<f32>,
}

/// `count` requests with tokens drawn from `seed`, each with its reference.
///
/// References run on every core (std threads), since on a slow CPU they
/// would otherwise dominate the demo's wall time.
pub fn make(
    config: &TransformerConfig,
    weights: &Weights,
    seed: u64,
    count: usize,
) -> Result<Vec<Request>> {
    let tokens: Vec<Vec<i32>> = (0..count)
        .map(|i| request_tokens(config, seed, i as u64))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = count.div_ceil(threads).max(1);
    let references: Vec<Result<Vec<f32>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = tokens
            .chunks(chunk)
            .map(|part| {
                let worker = scope.spawn(move || {
                    part.iter()
                        .map(|t| config.reference(weights, t))
                        .collect::<Vec<_>>()
                });
                (part.len(), worker)
            })
            .collect();
        // One result per request even if a worker panicked, so the zip
        // below keeps requests and references aligned.
        workers
            .into_iter()
            .flat_map(|(len, worker)| {
                worker
                    .join()
                    .unwrap_or_else(|_| (0..len).map(|_| Err(panicked())).collect())
            })
            .collect()
    });
    tokens
        .into_iter()
        .zip(references)
        .enumerate()
        .map(|(index, (tokens, expected))| {
            let expected = expected
                .map_err(|e| Error::msg(format!("request {index}: CPU reference failed: {e}")))?;
            check_tokens(config, &tokens)
                .map_err(|e| Error::msg(format!("request {index}: {e}")))?;
            Ok(Request {
                bytes: tokens.iter().flat_map(|t| t.to_le_bytes()).collect(),
                tokens,
                expected,
            })
        })
        .collect()
}

fn panicked() -> Error {
    Error::msg("the CPU reference panicked")
}

/// The device gathers embeddings by token id, so ids are checked on the host
/// before `submit_host` (the naive path checks its own).
fn check_tokens(config: &TransformerConfig, tokens: &[i32]) -> Result<()> {
    match tokens
        .iter()
        .position(|&t| t < 0 || t as usize >= config.vocab)
    {
        Some(i) => Err(Error::msg(format!(
            "token {} at position {i} is outside the vocabulary of {}",
            tokens[i], config.vocab
        ))),
        None => Ok(()),
    }
}

/// Tokens of request `index`: a splitmix64 stream keyed by seed and index,
/// so every request differs and a run is reproducible.
fn request_tokens(config: &TransformerConfig, seed: u64, index: u64) -> Vec<i32> {
    let mut state = seed ^ index.wrapping_mul(0xd1b5_4a32_d192_ed03);
    (0..config.batch * config.seq)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z % config.vocab as u64) as i32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_in_range_reproducible_and_distinct() {
        let config = TransformerConfig::small();
        let a = request_tokens(&config, 3, 0);
        assert_eq!(a.len(), config.batch * config.seq);
        assert!(check_tokens(&config, &a).is_ok());
        assert_eq!(a, request_tokens(&config, 3, 0));
        assert_ne!(a, request_tokens(&config, 3, 1));
        assert_ne!(a, request_tokens(&config, 4, 0));
        assert!(check_tokens(&config, &[0, config.vocab as i32]).is_err());
        assert!(check_tokens(&config, &[-1]).is_err());
    }
}
