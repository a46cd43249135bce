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

    /// The sampling temperature (0 for greedy).
    pub fn temperature(&self) -> f32 {
        self.settings.temperature
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

    /// Draws a token from the whole row of `logits` (non-empty).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let u = self.uniform();
        draw(self.settings, logits, u)
    }

    /// Draws a token from a row's leading `candidates`: the same draw as
    /// [`sample`](Self::sample) on the whole row, with the same random
    /// number. Where that draw depends on logits past the candidates (a
    /// nucleus or a uniform draw reaching past them, or `top_k` above
    /// their count), `full_row` reads the whole row and decides.
    pub fn sample_candidates(
        &mut self,
        candidates: &Candidates,
        full_row: impl FnOnce() -> Result<Vec<f32>>,
    ) -> Result<u32> {
        let u = self.uniform();
        match draw_from_candidates(self.settings, candidates, u) {
            Some(id) => Ok(id),
            None => Ok(draw(self.settings, &full_row()?, u)),
        }
    }
}

/// A row's largest logits, as the device's top-k gives them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Candidates {
    /// Token ids, largest logit first, equal logits by smaller id.
    pub ids: Vec<u32>,
    /// Their logits.
    pub logits: Vec<f32>,
    /// The row's softmax denominator relative to its largest logit at the
    /// sampling temperature: the sum of `exp((logit - largest) / t)`.
    pub mass: f64,
    /// Whether the candidates are all of the row's logits above -inf.
    pub complete: bool,
    /// The row's length (the vocabulary).
    pub row_len: usize,
}

/// The draw of `settings` from the whole row of `logits` with uniform
/// number `u`: the `top_k` largest (equal logits by smaller id), the
/// shortest prefix of them holding `top_p` of the mass, then the token
/// where `u` falls in their cumulative weights.
fn draw(settings: Sampling, logits: &[f32], u: f64) -> u32 {
    let s = settings;
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
    let logits: Vec<f32> = order.iter().map(|&i| logits[i as usize]).collect();
    let weights = weights(s, &logits);
    let total: f64 = weights.iter().sum();
    let kept = nucleus(s, &weights, total).unwrap_or(weights.len());
    let kept_total: f64 = weights[..kept].iter().sum();
    land(&weights[..kept], u * kept_total).map_or(order[kept - 1], |n| order[n])
}

/// [`draw`] from the leading candidates of a row, or `None` where it
/// depends on logits past them.
fn draw_from_candidates(settings: Sampling, c: &Candidates, u: f64) -> Option<u32> {
    let s = settings;
    let n = c.ids.len();
    if n == 0 {
        return None;
    }
    let weights = weights(s, &c.logits);
    // The logits the draw chooses among (`top_k` of them, or the row),
    // their total weight, and whether the candidates hold all of them.
    let (set, total, whole) = if s.top_k > 0 && s.top_k <= n {
        (s.top_k, weights[..s.top_k].iter().sum(), true)
    } else if c.complete {
        (n, weights.iter().sum(), true)
    } else if (s.top_k == 0 || s.top_k >= c.row_len) && c.mass.is_finite() && c.mass > 0.0 {
        // The whole row, past the candidates: the device's denominator
        // is its total.
        (n, c.mass, false)
    } else {
        return None;
    };
    let kept = match nucleus(s, &weights[..set], total) {
        Some(kept) => kept,
        None if whole => set,
        // The nucleus reaches past the candidates: undecided here. With
        // top_p 1 (no nucleus) a draw that lands among them is decided.
        None if s.top_p < 1.0 => return None,
        None => return land(&weights[..set], u * total).map(|n| c.ids[n]),
    };
    let kept_total: f64 = weights[..kept].iter().sum();
    Some(land(&weights[..kept], u * kept_total).map_or(c.ids[kept - 1], |n| c.ids[n]))
}

/// The unnormalised probabilities of `logits` (largest first) at the
/// temperature: `exp((logit - largest) / t)`.
fn weights(s: Sampling, logits: &[f32]) -> Vec<f64> {
    let t = f64::from(s.temperature);
    let top = f64::from(logits[0]);
    logits
        .iter()
        .map(|&l| ((f64::from(l) - top) / t).exp())
        .collect()
}

/// The nucleus: the length of the shortest prefix of `weights` holding
/// `top_p` of `total`, or `None` where none does (top_p 1 included).
fn nucleus(s: Sampling, weights: &[f64], total: f64) -> Option<usize> {
    if s.top_p >= 1.0 {
        return None;
    }
    let mut mass = 0.0;
    for (n, w) in weights.iter().enumerate() {
        mass += w / total;
        if mass >= f64::from(s.top_p) {
            return Some(n + 1);
        }
    }
    None
}

/// Where `target` falls in the cumulative `weights`, if within them.
fn land(weights: &[f64], mut target: f64) -> Option<usize> {
    for (n, w) in weights.iter().enumerate() {
        if target < *w {
            return Some(n);
        }
        target -= w;
    }
    None
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

    /// The candidates the device's top-k gives: the `k` largest logits
    /// (equal ones by smaller id), and the denominator summed as `draw`
    /// sums it.
    fn candidates(logits: &[f32], k: usize, t: f32) -> Candidates {
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|a, b| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        });
        let top = f64::from(logits[order[0] as usize]);
        let mass = order
            .iter()
            .map(|&i| ((f64::from(logits[i as usize]) - top) / f64::from(t)).exp())
            .sum();
        let n = k.min(order.len());
        Candidates {
            ids: order[..n].to_vec(),
            logits: order[..n].iter().map(|&i| logits[i as usize]).collect(),
            mass,
            complete: n == logits.len(),
            row_len: logits.len(),
        }
    }

    #[test]
    fn candidates_draw_what_the_whole_row_draws() {
        let mut state = 5u64;
        let logits: Vec<f32> = (0..1000)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) * 16.0 - 8.0
            })
            .collect();
        let (mut decided, mut read_row) = (0, 0);
        let settings = [
            (1.0, 0, 1.0),
            (0.7, 40, 1.0),
            (1.0, 0, 0.9),
            (1.5, 100, 0.95),
            (0.3, 0, 0.5),
            (2.0, 0, 1.0),
            (1.0, 8, 0.99),
            (1.0, 1000, 1.0),
        ];
        for (temperature, top_k, top_p) in settings {
            for k in [16, 64, 1000] {
                for seed in 0..100 {
                    let s = sampling(temperature, top_k, top_p, seed);
                    let c = candidates(&logits, k, temperature);
                    let mut row = Sampler::new(s);
                    let mut device = Sampler::new(s);
                    let mut full = false;
                    let id = device
                        .sample_candidates(&c, || {
                            full = true;
                            Ok(logits.clone())
                        })
                        .unwrap();
                    assert_eq!(id, row.sample(&logits), "{s:?} k={k}");
                    if full {
                        read_row += 1;
                    } else {
                        decided += 1;
                    }
                }
            }
        }
        // Both ways were taken: most draws need no row, flat ones do.
        assert!(decided > read_row && read_row > 0, "{decided} {read_row}");
    }

    #[test]
    fn a_failed_row_read_is_the_draws_error() {
        // A nucleus of half of 100 equal logits reaches past 2 candidates.
        let logits = [0.0f32; 100];
        let s = sampling(1.0, 0, 0.5, 3);
        let c = candidates(&logits, 2, 1.0);
        let e = Sampler::new(s)
            .sample_candidates(&c, || Err(Error::Message("lost".into())))
            .unwrap_err();
        assert!(e.to_string().contains("lost"));
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
