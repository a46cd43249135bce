//! Length buckets: the fixed shapes sentences are padded to.

use crate::bert::BertConfig;
use hrx_core::{Error, Result};

/// The smallest bucket; shorter sentences pad up to it.
const SMALLEST: usize = 16;

/// One fixed shape: `batch` sentences of up to `seq` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens per sentence, padding included.
    pub seq: usize,
    /// Sentences per submission.
    pub batch: usize,
}

/// Powers of two from 16 up to the model's `max_seq_length` (which is the
/// last bucket even when it is no power of two). Each bucket's batch is
/// `max_batch`, cut so that its largest tensor (the attention scores, the
/// feed-forward activations) fits one storage binding of
/// `max_binding_bytes`, and its attention rows (`batch x heads x seq`, a
/// workgroup each in the row kernels) fit `max_groups` workgroups.
pub fn plan(
    config: &BertConfig,
    max_batch: usize,
    max_binding_bytes: u64,
    max_groups: u64,
) -> Result<Vec<Bucket>> {
    if max_batch == 0 {
        return Err(Error::msg("the batch must hold at least one sentence"));
    }
    let mut lengths = Vec::new();
    let mut seq = SMALLEST.min(config.max_seq_length);
    while seq < config.max_seq_length {
        lengths.push(seq);
        seq *= 2;
    }
    lengths.push(config.max_seq_length);
    lengths
        .into_iter()
        .map(|seq| {
            let widest = [
                config.heads * seq * seq,
                seq * config.intermediate,
                seq * 3 * config.hidden,
            ]
            .into_iter()
            .max()
            .unwrap_or(0) as u64
                * 4;
            let rows = (config.heads * seq) as u64;
            let fits = (max_binding_bytes / widest.max(1)).min(max_groups / rows.max(1)) as usize;
            if fits == 0 {
                return Err(Error::msg(format!(
                    "one sentence of {seq} tokens needs {widest} bytes in one binding and {rows} workgroups; the device binds at most {max_binding_bytes} bytes and launches {max_groups} workgroups"
                )));
            }
            Ok(Bucket {
                seq,
                batch: max_batch.min(fits),
            })
        })
        .collect()
}

/// The index of the smallest bucket that holds `tokens` tokens.
pub fn pick(buckets: &[Bucket], tokens: usize) -> Option<usize> {
    buckets.iter().position(|b| b.seq >= tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bert::{Activation, Pooling};

    fn config(max_seq_length: usize) -> BertConfig {
        BertConfig {
            vocab_size: 100,
            hidden: 384,
            layers: 1,
            heads: 12,
            intermediate: 1536,
            max_position: 512,
            layer_norm_eps: 1e-12,
            activation: Activation::Gelu,
            max_seq_length,
            pooling: Pooling::Mean,
            normalize: true,
        }
    }

    #[test]
    fn powers_of_two_up_to_the_limit() {
        let seqs: Vec<usize> = plan(&config(256), 8, u64::MAX, u64::MAX)
            .unwrap()
            .iter()
            .map(|b| b.seq)
            .collect();
        assert_eq!(seqs, [16, 32, 64, 128, 256]);
        let seqs: Vec<usize> = plan(&config(200), 8, u64::MAX, u64::MAX)
            .unwrap()
            .iter()
            .map(|b| b.seq)
            .collect();
        assert_eq!(seqs, [16, 32, 64, 128, 200]);
        let seqs: Vec<usize> = plan(&config(8), 8, u64::MAX, u64::MAX)
            .unwrap()
            .iter()
            .map(|b| b.seq)
            .collect();
        assert_eq!(seqs, [8]);
    }

    #[test]
    fn batches_fit_one_binding() {
        // lavapipe binds 128 MiB: 256-token scores take 3 MiB a sentence.
        let buckets = plan(&config(256), 64, 128 << 20, u64::MAX).unwrap();
        assert_eq!(buckets[0].batch, 64);
        assert_eq!(buckets[4].batch, 42);
        assert!(plan(&config(256), 1, 1 << 20, u64::MAX).is_err());
        assert!(plan(&config(256), 0, u64::MAX, u64::MAX).is_err());
        // lavapipe launches 65,535 workgroups a dimension: 12 heads x 256
        // rows a sentence leave room for 21.
        let buckets = plan(&config(256), 32, 128 << 20, 65_535).unwrap();
        assert_eq!((buckets[3].batch, buckets[4].batch), (32, 21));
        assert_eq!(pick(&buckets, 17), Some(1));
        assert_eq!(pick(&buckets, 257), None);
    }
}
