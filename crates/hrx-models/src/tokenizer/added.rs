//! Added tokens (`[CLS]`, `[MASK]`, ...): found in the raw text before any
//! normalization and passed through as single ids, as Hugging Face does for
//! tokenizer.json's `added_tokens` with `"normalized": false`.

/// The added tokens, and which bytes can start one.
#[derive(Debug)]
pub(crate) struct AddedTokens {
    /// Longest first, so that the first match at a position is the longest.
    tokens: Vec<(Box<str>, u32)>,
    starts: [bool; 256],
}

impl AddedTokens {
    /// `tokens` are (content, id) pairs with non-empty contents.
    pub fn new(tokens: impl IntoIterator<Item = (Box<str>, u32)>) -> Self {
        let mut tokens: Vec<_> = tokens.into_iter().collect();
        tokens.sort_by_key(|(content, _)| std::cmp::Reverse(content.len()));
        let mut starts = [false; 256];
        for (content, _) in &tokens {
            if let Some(&byte) = content.as_bytes().first() {
                starts[usize::from(byte)] = true;
            }
        }
        Self { tokens, starts }
    }

    /// Reads `text` as runs of text separated by added tokens.
    pub fn scan<'t>(&self, text: &'t str) -> Scanner<'_, 't> {
        Scanner {
            added: self,
            rest: text,
        }
    }

    /// The added token that `text` starts with (the longest): its byte
    /// length and id.
    fn token_at(&self, text: &str) -> Option<(usize, u32)> {
        let first = *text.as_bytes().first()?;
        if !self.starts[usize::from(first)] {
            return None;
        }
        self.tokens
            .iter()
            .find(|(content, _)| text.starts_with(&**content))
            .map(|(content, id)| (content.len(), *id))
    }
}

/// Reads a text lazily, alternating [`Scanner::text`] and
/// [`Scanner::token`], so that a caller that stops early never looks at
/// the rest of a huge input.
pub(crate) struct Scanner<'a, 't> {
    added: &'a AddedTokens,
    rest: &'t str,
}

impl Scanner<'_, '_> {
    /// The chars before the next added token, or up to the end.
    pub fn text(&mut self) -> impl Iterator<Item = char> + '_ {
        std::iter::from_fn(|| {
            let c = self.rest.chars().next()?;
            if self.added.token_at(self.rest).is_some() {
                return None;
            }
            self.rest = &self.rest[c.len_utf8()..];
            Some(c)
        })
    }

    /// The id of the added token that comes next, if the text is not over;
    /// skips it.
    pub fn token(&mut self) -> Option<u32> {
        let (len, id) = self.added.token_at(self.rest)?;
        self.rest = &self.rest[len..];
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text runs as strings, tokens as ids in brackets.
    fn scanned(added: &AddedTokens, text: &str) -> Vec<String> {
        let mut scanner = added.scan(text);
        let mut out = Vec::new();
        loop {
            let text: String = scanner.text().collect();
            if !text.is_empty() {
                out.push(text);
            }
            match scanner.token() {
                Some(id) => out.push(format!("<{id}>")),
                None => return out,
            }
        }
    }

    fn added() -> AddedTokens {
        AddedTokens::new([
            ("[CLS]".into(), 1),
            ("[MASK]".into(), 2),
            ("[MASK]]".into(), 3),
        ])
    }

    #[test]
    fn splits_out_tokens() {
        let got = scanned(&added(), "a [MASK] b[CLS][CLS]");
        assert_eq!(got, ["a ", "<2>", " b", "<1>", "<1>"]);
    }

    #[test]
    fn prefers_the_longest_token() {
        assert_eq!(scanned(&added(), "[MASK]]x"), ["<3>", "x"]);
    }

    #[test]
    fn leaves_near_misses_alone() {
        assert_eq!(scanned(&added(), "[cls] é[CLS"), ["[cls] é[CLS"]);
        assert!(scanned(&added(), "").is_empty());
        assert_eq!(scanned(&AddedTokens::new([]), "[CLS]"), ["[CLS]"]);
    }
}
