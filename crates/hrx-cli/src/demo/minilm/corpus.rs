//! The sentences the demo sends: a reference file's (with the token ids
//! and embeddings it expects) or a built-in set, and the order the clients
//! take them in.

use hrx::{Error, Result};
use serde::Deserialize;
use std::path::Path;

/// The pair whose cosine similarity sentence-transformers publishes for
/// all-MiniLM-L6-v2.
pub const PUBLISHED_PAIR: (&str, &str, f64) = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    0.7553,
);

/// How far the pair's cosine may be from the expected value.
pub const PAIR_TOLERANCE: f64 = 5e-4;

/// The model the published pair cosine belongs to.
pub const PUBLISHED_MODEL: &str = "all-MiniLM-L6-v2";

/// Sentences of at most this many tokens make the bulk of the run: a CPU
/// device takes over a second per sentence of 128 tokens.
pub const SHORT_TOKENS: usize = 32;

/// Sentences the demo embeds without a reference (each checked against
/// the naive path instead). Short, so that a CPU device runs them quickly.
const BUILT_IN: &[&str] = &[
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "A woman is playing the violin.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "The new movie is awesome.",
    "The cat sits outside.",
    "The new movie is so great.",
    "A cheetah is running behind its prey.",
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password?",
    "Where can I find the nearest train station?",
    "GPUs run thousands of threads at once.",
    "Vulkan is a low-overhead graphics and compute API.",
    "Sentence embeddings map text to vectors.",
    "Il pleut depuis ce matin à Paris.",
    "Das Wetter ist heute schön.",
    "I love pizza so much!!!",
    "Hello",
    "?",
    "",
    "   leading and trailing spaces   ",
    "The price is 100 euros, not 200.",
];

/// One sentence and, from a reference, what it must embed to.
pub struct Sentence {
    /// The text as sent.
    pub text: String,
    /// The expected token ids and embedding (from the reference file).
    pub expected: Option<Expected>,
}

/// The token ids and embedding a sentence must produce.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    /// Token ids with `[CLS]` and `[SEP]`.
    pub ids: Vec<u32>,
    /// The embedding.
    pub embedding: Vec<f32>,
}

/// Two sentences and the cosine similarity of their embeddings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    /// Index of the first sentence.
    pub a: usize,
    /// Index of the second sentence.
    pub b: usize,
    /// The expected cosine.
    pub cosine: f64,
    /// Where the expected value comes from.
    pub source: &'static str,
}

/// The demo's distinct sentences.
pub struct Corpus {
    /// Where they come from, for the report.
    pub source: String,
    /// The sentences, each sent at least once when N allows.
    pub sentences: Vec<Sentence>,
    /// The pair to check, when its expected cosine is known.
    pub pair: Option<Pair>,
}

#[derive(Deserialize)]
struct ReferenceFile {
    #[serde(default)]
    model: Option<String>,
    sentences: Vec<ReferenceSentence>,
    #[serde(default)]
    pair: Option<ReferencePair>,
}

#[derive(Deserialize)]
struct ReferenceSentence {
    text: String,
    ids: Vec<u32>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct ReferencePair {
    a: usize,
    b: usize,
    cosine: f64,
}

impl Corpus {
    /// The sentences of a reference file (`{"sentences": [{"text", "ids",
    /// "embedding"}], "pair": {"a", "b", "cosine"}}`). The pair is checked
    /// against the published value for all-MiniLM-L6-v2, else against the
    /// file's.
    pub fn from_reference(path: &Path) -> Result<Corpus> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::msg(format!("cannot read the reference {}: {e}", path.display()))
        })?;
        let file: ReferenceFile = serde_json::from_str(&text).map_err(|e| {
            Error::msg(format!(
                "the reference {} is not a reference file: {e}",
                path.display()
            ))
        })?;
        if file.sentences.is_empty() {
            return Err(Error::msg(format!(
                "the reference {} has no sentences",
                path.display()
            )));
        }
        let sentences: Vec<Sentence> = file
            .sentences
            .into_iter()
            .map(|s| Sentence {
                text: s.text,
                expected: Some(Expected {
                    ids: s.ids,
                    embedding: s.embedding,
                }),
            })
            .collect();
        let published = file.model.as_deref() == Some(PUBLISHED_MODEL);
        let pair = match file.pair {
            Some(p) if p.a < sentences.len() && p.b < sentences.len() => {
                let is_published = published
                    && sentences[p.a].text == PUBLISHED_PAIR.0
                    && sentences[p.b].text == PUBLISHED_PAIR.1;
                Some(if is_published {
                    Pair {
                        a: p.a,
                        b: p.b,
                        cosine: PUBLISHED_PAIR.2,
                        source: "published",
                    }
                } else {
                    Pair {
                        a: p.a,
                        b: p.b,
                        cosine: p.cosine,
                        source: "reference",
                    }
                })
            }
            Some(p) => {
                return Err(Error::msg(format!(
                    "the reference {}: its pair ({}, {}) names a sentence it does not have",
                    path.display(),
                    p.a,
                    p.b
                )));
            }
            None if published => find_pair(&sentences),
            None => None,
        };
        Ok(Corpus {
            source: path.display().to_string(),
            sentences,
            pair,
        })
    }

    /// The built-in sentences, without expectations. The published pair is
    /// checked only for the model it was published for (`published`).
    pub fn built_in(published: bool) -> Corpus {
        let sentences: Vec<Sentence> = BUILT_IN
            .iter()
            .map(|t| Sentence {
                text: t.to_string(),
                expected: None,
            })
            .collect();
        let pair = if published {
            find_pair(&sentences)
        } else {
            None
        };
        Corpus {
            source: "the built-in sentences".into(),
            sentences,
            pair,
        }
    }
}

/// The published pair among `sentences`.
fn find_pair(sentences: &[Sentence]) -> Option<Pair> {
    let find = |text: &str| sentences.iter().position(|s| s.text == text);
    Some(Pair {
        a: find(PUBLISHED_PAIR.0)?,
        b: find(PUBLISHED_PAIR.1)?,
        cosine: PUBLISHED_PAIR.2,
        source: "published",
    })
}

/// The order of `n` requests over sentences of `lengths` tokens: with room
/// for all, every sentence once and then the short ones (at most
/// [`SHORT_TOKENS`]) again, round robin; otherwise the `first` sentences,
/// then short ones, then longer ones, shortest first. Shuffled with a fixed
/// seed, the longer sentences spread evenly through the run (as in traffic
/// where they are a minority), so every run sends the same mix in the same
/// order.
pub fn schedule(lengths: &[usize], first: &[usize], n: usize) -> Vec<usize> {
    if lengths.is_empty() {
        return Vec::new();
    }
    let short: Vec<usize> = (0..lengths.len())
        .filter(|&i| lengths[i] <= SHORT_TOKENS)
        .collect();
    let order: Vec<usize> = if n >= lengths.len() {
        let again: Vec<usize> = if short.is_empty() {
            (0..lengths.len()).collect()
        } else {
            short
        };
        (0..lengths.len())
            .chain(again.iter().copied().cycle().take(n - lengths.len()))
            .collect()
    } else {
        let mut rest: Vec<usize> = (0..lengths.len()).filter(|i| !first.contains(i)).collect();
        // Stable: short sentences keep the file's order, longer ones come
        // shortest first.
        rest.sort_by_key(|&i| {
            if lengths[i] <= SHORT_TOKENS {
                (0, 0)
            } else {
                (1, lengths[i])
            }
        });
        first
            .iter()
            .copied()
            .filter(|&i| i < lengths.len())
            .chain(rest)
            .take(n)
            .collect()
    };
    spread(&order, lengths)
}

/// `order` shuffled, its sentences over [`SHORT_TOKENS`] at evenly spaced
/// positions among the short ones.
fn spread(order: &[usize], lengths: &[usize]) -> Vec<usize> {
    let (mut long, mut short): (Vec<usize>, Vec<usize>) = order
        .iter()
        .copied()
        .partition(|&i| lengths[i] > SHORT_TOKENS);
    shuffle(&mut long, 0x6869_7278);
    shuffle(&mut short, 0x7872_6968);
    let n = order.len();
    let places: Vec<usize> = (0..long.len())
        .map(|k| (2 * k + 1) * n / (2 * long.len()))
        .collect();
    let (mut long, mut short) = (long.into_iter(), short.into_iter());
    let mut next = places.iter().peekable();
    (0..n)
        .map(|position| {
            if next.next_if(|&&p| p == position).is_some() {
                long.next()
            } else {
                short.next().or_else(|| long.next())
            }
            .expect("as many positions as sentences")
        })
        .collect()
}

/// Fisher-Yates with a splitmix64 stream.
fn shuffle(items: &mut [usize], seed: u64) {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..items.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// `count` positions of `order` spread over its range of lengths (evenly
/// spaced ranks by token count), so a small sample has the mix of lengths
/// the whole run has.
pub fn sample(order: &[usize], lengths: &[usize], count: usize) -> Vec<usize> {
    let mut ranked: Vec<usize> = (0..order.len()).collect();
    ranked.sort_by_key(|&p| (lengths[order[p]], p));
    let count = count.min(order.len());
    (0..count)
        .map(|k| ranked[(2 * k + 1) * ranked.len() / (2 * count)])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sentence_once_then_short_ones() {
        let lengths = [8, 200, 12, 40, 16];
        let order = schedule(&lengths, &[0, 2], 11);
        assert_eq!(order.len(), 11);
        for i in 0..lengths.len() {
            assert!(order.contains(&i), "{i} missing from {order:?}");
        }
        let long: Vec<usize> = (0..order.len())
            .filter(|&p| lengths[order[p]] > SHORT_TOKENS)
            .collect();
        // Two long sentences, spread over the run rather than side by side.
        assert_eq!(long.len(), 2);
        assert!(long[1] - long[0] >= 4, "{order:?}");
        assert_eq!(order, schedule(&lengths, &[0, 2], 11));
    }

    #[test]
    fn fewer_requests_take_the_first_then_the_short() {
        let lengths = [8, 200, 12, 40, 16, 30];
        let mut order = schedule(&lengths, &[0, 2], 4);
        order.sort_unstable();
        assert_eq!(order, [0, 2, 4, 5]);
        let mut order = schedule(&lengths, &[0, 2], 5);
        order.sort_unstable();
        assert_eq!(order, [0, 2, 3, 4, 5]);
        assert!(schedule(&[], &[], 3).is_empty());
    }

    #[test]
    fn samples_spread_over_the_lengths() {
        let lengths = [2, 4, 6, 8, 10, 12, 14, 16];
        let order: Vec<usize> = (0..8).rev().collect();
        let picked: Vec<usize> = sample(&order, &lengths, 4)
            .iter()
            .map(|&p| lengths[order[p]])
            .collect();
        assert_eq!(picked, [4, 8, 12, 16]);
        assert_eq!(sample(&order, &lengths, 20).len(), 8);
    }

    #[test]
    fn the_built_in_set_holds_the_published_pair() {
        let corpus = Corpus::built_in(true);
        let pair = corpus.pair.unwrap();
        assert_eq!(corpus.sentences[pair.a].text, PUBLISHED_PAIR.0);
        assert_eq!(corpus.sentences[pair.b].text, PUBLISHED_PAIR.1);
        assert!(Corpus::built_in(false).pair.is_none());
    }
}
