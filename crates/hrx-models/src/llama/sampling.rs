//! Choosing the next token: greedy (the device's argmax) or sampled from
//! the logits with temperature, top-k and top-p, deterministically per
//! seed.

use hrx_core::{Error, Result};

/// How the next token is chosen.
///
/// ```
/// use hrx_models::llama::Sampling;
/// assert!(Sampling::greedy().is_greedy());
/// let s = Sampling { temperature: 0.7, top_k: 40, top_p: 0.9, seed: 7 };
/// assert!(s.check().is_ok() && !s.is_greedy());
/// assert!(Sampling { top_p: 0.0, ..s }.check().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 is greedy (the most likely token, ties to the lowest id); above
    /// 0 the logits are divided by it before the softmax.
    pub temperature: f32,
    /// Sample among the `top_k` most likely tokens; 0 means all.
    pub top_k: usize,
    /// Sample among the most likely tokens whose probabilities sum to at
    /// least `top_p` (nucleus sampling); 1 means all.
    pub top_p: f32,
    /// The seed of the sequence's random numbers: the same seed, prompt
    /// and settings give the same tokens.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self::greedy()
    }
}

/// The highest temperature accepted (OpenAI's limit).
pub const MAX_TEMPERATURE: f32 = 2.0;

impl Sampling {
    /// The most likely token every step.
    pub fn greedy() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }

    /// Whether this is greedy decoding (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks the settings: temperature in `0..=2`, `top_p` in `(0, 1]`.
    pub fn check(&self) -> Result<()> {
        if !(0.0..=MAX_TEMPERATURE).contains(&self.temperature) {
            return Err(Error::Message(format!(
                "temperature {} is outside 0..={MAX_TEMPERATURE}",
                self.temperature
            )));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Message(format!(
                "top_p {} is outside (0, 1]",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// One sequence's sampler: its settings and its random stream.
pub(crate) struct Sampler {
    settings: Sampling,
    state: u64,
}

impl Sampler {
    pub fn new(settings: Sampling) -> Self {
        Sampler {
            settings,
            state: settings.seed,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.settings.is_greedy()
    }

    /// SplitMix64: a fixed, portable sequence per seed.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Draws a token from `logits` (non-empty).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let s = self.settings;
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        if s.top_k > 0 && s.top_k < order.len() {
            order.select_nth_unstable_by(s.top_k - 1, by_logit);
            order.truncate(s.top_k);
        }
        order.sort_unstable_by(by_logit);
        let t = f64::from(s.temperature);
        let top = f64::from(logits[order[0] as usize]);
        let weights: Vec<f64> = order
            .iter()
            .map(|&i| ((f64::from(logits[i as usize]) - top) / t).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        // The nucleus: the shortest prefix holding top_p of the mass.
        let mut kept = weights.len();
        if s.top_p < 1.0 {
            let mut mass = 0.0;
            for (n, w) in weights.iter().enumerate() {
                mass += w / total;
                if mass >= f64::from(s.top_p) {
                    kept = n + 1;
                    break;
                }
            }
        }
        let kept_total: f64 = weights[..kept].iter().sum();
        let mut target = self.uniform() * kept_total;
        for (n, w) in weights[..kept].iter().enumerate() {
            if target < *w {
                return order[n];
            }
            target -= w;
        }
        order[kept - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampling(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampling {
        Sampling {
            temperature,
            top_k,
            top_p,
            seed,
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_tokens() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(sampling(1.0, 0, 1.0, seed));
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn top_k_one_and_a_tiny_nucleus_are_greedy() {
        let logits = [0.1, 2.0, 1.9, -3.0];
        let mut k = Sampler::new(sampling(1.0, 1, 1.0, 9));
        let mut p = Sampler::new(sampling(1.0, 0, 1e-6, 9));
        for _ in 0..20 {
            assert_eq!(k.sample(&logits), 1);
            assert_eq!(p.sample(&logits), 1);
        }
    }

    #[test]
    fn frequencies_follow_the_softmax() {
        // Two tokens with probabilities 1/(1+e^-1) and e^-1/(1+e^-1).
        let logits = [1.0, 0.0];
        let mut s = Sampler::new(sampling(1.0, 0, 1.0, 1));
        let n = 20_000;
        let zeros = (0..n).filter(|_| s.sample(&logits) == 0).count();
        let expected = 1.0 / (1.0 + (-1.0f64).exp());
        assert!((zeros as f64 / n as f64 - expected).abs() < 0.02);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(sampling(-0.1, 0, 1.0, 0).check().is_err());
        assert!(sampling(2.5, 0, 1.0, 0).check().is_err());
        assert!(sampling(f32::NAN, 0, 1.0, 0).check().is_err());
        assert!(sampling(1.0, 0, 1.5, 0).check().is_err());
        assert!(sampling(1.0, 0, f32::NAN, 0).check().is_err());
        assert!(sampling(0.0, 0, 1.0, 0).check().is_ok());
    }
}
