//! Checking embeddings against what they must be: token ids identical,
//! cosine similarity and largest difference within tolerance, unit length
//! where the model normalises.

use super::corpus::Expected;
use hrx::models::embed::Embedding;

/// Smallest cosine similarity to the expected embedding.
pub const MIN_COSINE: f64 = 0.99999;
/// Largest absolute difference from the expected embedding, per element.
pub const MAX_DIFF: f32 = 1e-4;
/// How far from 1 the length of a normalised embedding may be.
pub const NORM_TOLERANCE: f64 = 1e-5;

/// Cosine similarity, in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    let denominator = norm(a) * norm(b);
    if denominator > 0.0 {
        dot / denominator
    } else {
        0.0
    }
}

/// Euclidean length, in f64.
pub fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt()
}

/// How one embedding compares with its expected one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measure {
    /// Cosine similarity.
    pub cosine: f64,
    /// Largest absolute difference.
    pub max_diff: f32,
    /// Length of the embedding.
    pub norm: f64,
}

/// Compare `got` with `want`; `Err` says what is wrong, with the numbers.
pub fn check(got: &Embedding, want: &Expected, normalized: bool) -> Result<Measure, String> {
    if got.tokens != want.ids {
        return Err(format!(
            "token ids differ: got {:?}, expected {:?}",
            got.tokens, want.ids
        ));
    }
    if got.vector.len() != want.embedding.len() {
        return Err(format!(
            "{} dimensions, {} expected",
            got.vector.len(),
            want.embedding.len()
        ));
    }
    let (at, max_diff) = got
        .vector
        .iter()
        .zip(&want.embedding)
        .map(|(g, w)| (g - w).abs())
        .enumerate()
        .fold((0, 0.0f32), |(i, m), (j, d)| {
            if d > m || d.is_nan() { (j, d) } else { (i, m) }
        });
    let measure = Measure {
        cosine: cosine(&got.vector, &want.embedding),
        max_diff,
        norm: norm(&got.vector),
    };
    let norm_ok = !normalized || (measure.norm - 1.0).abs() <= NORM_TOLERANCE;
    if measure.cosine >= MIN_COSINE && max_diff <= MAX_DIFF && norm_ok {
        return Ok(measure);
    }
    let mut why = format!(
        "cosine {:.7} (need >= {MIN_COSINE}), max abs diff {max_diff:.2e} (need <= {MAX_DIFF:.0e}) \
         at element {at}: got {}, expected {}",
        measure.cosine,
        got.vector.get(at).copied().unwrap_or(f32::NAN),
        want.embedding.get(at).copied().unwrap_or(f32::NAN),
    );
    if !norm_ok {
        why.push_str(&format!(
            ", length {:.7} (need 1 +/- {NORM_TOLERANCE:.0e})",
            measure.norm
        ));
    }
    Err(why)
}

/// Every check of a run.
#[derive(Debug)]
pub struct Summary {
    /// Embeddings checked.
    pub checked: usize,
    /// The smallest cosine among those that passed.
    pub min_cosine: f64,
    /// The largest difference among those that passed.
    pub max_diff: f32,
    /// One line per embedding that failed.
    pub failures: Vec<String>,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            checked: 0,
            min_cosine: 1.0,
            max_diff: 0.0,
            failures: Vec::new(),
        }
    }
}

impl Summary {
    /// Record one check; `what` names the sentence in a failure.
    pub fn record(&mut self, what: impl FnOnce() -> String, result: Result<Measure, String>) {
        self.checked += 1;
        match result {
            Ok(m) => {
                self.min_cosine = self.min_cosine.min(m.cosine);
                self.max_diff = self.max_diff.max(m.max_diff);
            }
            Err(why) => self.failures.push(format!("{}: {why}", what())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = norm(v) as f32;
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn close_embeddings_pass_and_far_ones_name_the_numbers() {
        let want = Expected {
            ids: vec![101, 7, 102],
            embedding: unit(&[0.3, -0.4, 0.5, 0.1]),
        };
        let got = Embedding {
            tokens: want.ids.clone(),
            vector: want.embedding.clone(),
        };
        let m = check(&got, &want, true).unwrap();
        assert!((m.cosine - 1.0).abs() < 1e-12 && m.max_diff == 0.0);

        let mut off = got.clone();
        off.vector[2] += 0.01;
        let e = check(&off, &want, false).unwrap_err();
        assert!(e.contains("at element 2"), "{e}");
        assert!(e.contains("max abs diff 1.00e-2"), "{e}");

        let mut ids = got.clone();
        ids.tokens[1] = 8;
        let e = check(&ids, &want, true).unwrap_err();
        assert!(e.contains("token ids differ"), "{e}");

        let mut long = got.clone();
        long.vector.iter_mut().for_each(|x| *x *= 1.0001);
        assert!(check(&long, &want, false).is_ok());
        let e = check(&long, &want, true).unwrap_err();
        assert!(e.contains("length 1.0001"), "{e}");
    }

    #[test]
    fn summaries_keep_the_worst_pass_and_every_failure() {
        let mut s = Summary::default();
        let m = |cosine, max_diff| Measure {
            cosine,
            max_diff,
            norm: 1.0,
        };
        s.record(|| "a".into(), Ok(m(0.999995, 2e-5)));
        s.record(|| "b".into(), Ok(m(0.999999, 5e-5)));
        s.record(|| "c".into(), Err("bad".into()));
        assert_eq!(s.checked, 3);
        assert_eq!((s.min_cosine, s.max_diff), (0.999995, 5e-5));
        assert_eq!(s.failures, ["c: bad"]);
    }
}
