//! Checking one output against its CPU reference.

use hrx::{
    Error, Result,
    models::{compare, toy::TransformerConfig},
};

/// Absolute tolerance: f32 device arithmetic against an f64 reference over
/// two blocks of sums of up to `d_ff` terms.
pub const ATOL: f32 = 2e-3;
/// Relative tolerance, for logits far from zero.
pub const RTOL: f32 = 2e-3;

/// Decode little-endian f32 output bytes.
pub fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The largest absolute difference, or an error naming the request and the
/// first element outside the tolerance.
pub fn check(
    config: &TransformerConfig,
    request: usize,
    actual: &[f32],
    expected: &[f32],
) -> Result<f32> {
    if actual.len() != expected.len() {
        return Err(Error::msg(format!(
            "request {request}: {} logits came back, {} expected",
            actual.len(),
            expected.len()
        )));
    }
    if let Err(index) = compare(actual, expected, ATOL, RTOL) {
        let vocab = config.vocab.max(1);
        let row = index / vocab;
        let seq = config.seq.max(1);
        return Err(Error::msg(format!(
            "request {request}: mismatch at index {index} (sequence {}, position {}, \
             logit {}): device {}, CPU reference {} (tolerance {ATOL} + {RTOL} x |reference|)",
            row / seq,
            row % seq,
            index % vocab,
            actual[index],
            expected[index]
        )));
    }
    Ok(actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, f32::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatches_name_request_and_place() {
        let config = TransformerConfig::small();
        let n = config.batch * config.seq * config.vocab;
        let expected = vec![1.0f32; n];
        let mut actual = expected.clone();
        actual[n - 1] += 0.5;
        assert!(check(&config, 3, &expected, &expected).unwrap() == 0.0);
        let err = check(&config, 3, &actual, &expected)
            .unwrap_err()
            .to_string();
        assert!(err.contains("request 3"), "{err}");
        assert!(err.contains(&format!("index {}", n - 1)), "{err}");
        assert!(check(&config, 0, &actual[1..], &expected).is_err());
    }
}
