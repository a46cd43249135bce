//! tokenizer (in progress)
