//! Byte-pair merging: the ranked merge rules applied to one piece.
//!
//! As Hugging Face's BPE does: the piece starts as one symbol per
//! byte-level char; repeatedly the adjacent pair with the best (lowest)
//! rank merges, the leftmost first among equals, until no adjacent pair
//! has a rule. A heap of candidate pairs over a linked list of symbols
//! makes that O(n log n) in the piece's length, so a hostile piece of a
//! million chars costs no more than its length says.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// The merge rules by the ids they join.
#[derive(Debug)]
pub(crate) struct Merges {
    /// (left id, right id) to (rank, merged id).
    rules: HashMap<(u32, u32), (u32, u32)>,
}

/// A symbol of a piece being merged: its token and its live neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Merges {
    /// Rules from GGUF's `tokenizer.ggml.merges` (`"left right"`, best
    /// first), with `id_of` giving a token text's id. A rule whose halves
    /// or result are not tokens is an error naming it.
    pub fn new<'m>(
        merges: impl IntoIterator<Item = &'m str>,
        id_of: impl Fn(&str) -> Option<u32>,
    ) -> Result<Self, String> {
        let mut rules = HashMap::new();
        for (rank, merge) in merges.into_iter().enumerate() {
            let bad = |why: &str| format!("merge {rank} ({merge:?}) {why}");
            let (left, right) = merge
                .split_once(' ')
                .ok_or_else(|| bad("is not two tokens separated by a space"))?;
            let id = |text: &str| {
                id_of(text).ok_or_else(|| bad(&format!("names {text:?}, not a token")))
            };
            let merged = id(&[left, right].concat())?;
            let rank = u32::try_from(rank).map_err(|_| bad("is past 2^32 rules"))?;
            // A repeated rule keeps its best rank, as a ranked map would.
            rules
                .entry((id(left)?, id(right)?))
                .or_insert((rank, merged));
        }
        Ok(Self { rules })
    }

    /// Merges the symbols `ids` (one per byte-level char of a piece) in
    /// place into the piece's tokens.
    pub fn apply(&self, ids: &mut Vec<u32>) {
        if ids.len() < 2 {
            return;
        }
        let n = ids.len();
        let mut symbols: Vec<Symbol> = (0..n)
            .map(|i| Symbol {
                id: ids[i],
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();
        let mut alive = vec![true; n];
        // Candidates: (rank, left position, left id, right id), best first.
        let mut heap = BinaryHeap::new();
        let candidate = |left: usize, symbols: &[Symbol], heap: &mut BinaryHeap<_>| {
            if let Some(right) = symbols[left].next {
                let pair = (symbols[left].id, symbols[right].id);
                if let Some(&(rank, _)) = self.rules.get(&pair) {
                    heap.push(Reverse((rank, left, pair.0, pair.1)));
                }
            }
        };
        for left in 0..n - 1 {
            candidate(left, &symbols, &mut heap);
        }
        while let Some(Reverse((_, left, left_id, right_id))) = heap.pop() {
            // Skip candidates that an earlier merge made stale.
            let Some(right) = symbols[left].next else {
                continue;
            };
            if !alive[left] || symbols[left].id != left_id || symbols[right].id != right_id {
                continue;
            }
            let (_, merged) = self.rules[&(left_id, right_id)];
            let after = symbols[right].next;
            symbols[left].id = merged;
            symbols[left].next = after;
            alive[right] = false;
            if let Some(after) = after {
                symbols[after].prev = Some(left);
            }
            if let Some(before) = symbols[left].prev {
                candidate(before, &symbols, &mut heap);
            }
            candidate(left, &symbols, &mut heap);
        }
        ids.clear();
        let mut at = Some(0);
        while let Some(i) = at {
            ids.push(symbols[i].id);
            at = symbols[i].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merges(rules: &[&str], vocab: &[&str]) -> Merges {
        let id_of = |t: &str| vocab.iter().position(|v| *v == t).map(|i| i as u32);
        Merges::new(rules.iter().copied(), id_of).unwrap()
    }

    #[test]
    fn best_rank_first_then_leftmost() {
        // Tokens: a b c ab bc abc aa
        let vocab = ["a", "b", "c", "ab", "bc", "abc", "aa"];
        let m = merges(&["b c", "a b", "a bc", "a a"], &vocab);
        let mut ids = vec![0, 1, 2]; // a b c: "b c" wins, then "a bc"
        m.apply(&mut ids);
        assert_eq!(ids, [5]);
        let mut ids = vec![0, 0, 0]; // a a a: the leftmost pair merges
        m.apply(&mut ids);
        assert_eq!(ids, [6, 0]);
        let mut ids = vec![2, 0];
        m.apply(&mut ids);
        assert_eq!(ids, [2, 0]);
    }

    #[test]
    fn bad_rules_are_named() {
        let vocab = ["a", "b"];
        let id_of = |t: &str| vocab.iter().position(|v| *v == t).map(|i| i as u32);
        let error = Merges::new(["a b"], id_of).unwrap_err();
        assert!(
            error.contains("merge 0") && error.contains("\"ab\""),
            "{error}"
        );
        assert!(
            Merges::new(["ab"], id_of)
                .unwrap_err()
                .contains("two tokens")
        );
    }

    #[test]
    fn a_long_piece_is_fast() {
        let vocab = ["a", "aa", "aaaa"];
        let m = merges(&["a a", "aa aa"], &vocab);
        let mut ids = vec![0; 1 << 16];
        m.apply(&mut ids);
        assert_eq!(ids.len(), 1 << 14);
        assert!(ids.iter().all(|&id| id == 2));
    }
}
