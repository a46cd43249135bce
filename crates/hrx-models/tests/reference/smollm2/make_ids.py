#!/usr/bin/env python3
"""Writes ids.json: Hugging Face `tokenizers` ids for SmolLM2's byte-level BPE on seeded random
strings built to stress the split (whitespace runs of every kind, contractions, digits, letters,
marks and numbers of many scripts, emoji sequences, punctuation runs, control tokens written in
the text, lone surrogate-free odd code points), for crates/hrx-models/tests/models/smollm2.rs.

    target/ref-venv/bin/python crates/hrx-models/tests/reference/smollm2/make_ids.py [GGUF]

The tokenizer is built from the GGUF as make_reference.py builds it (imported from there).
"""

import json
import random
import sys
from pathlib import Path

from gguf import GGUFReader

from make_reference import DEFAULT_GGUF, HERE, build_tokenizer

SEED, COUNT = 20261202, 300

PARTS = [
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u2028", "\u3000", " \n ", "\t ",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", "\"", "''",
    "0", "7", "42", "2024", "3.14", "1,000", "½", "²", "٣", "๕", "Ⅻ",
    "the", "The", "THE", "hello", "world", "naïve", "Straße", "İstanbul", "e\u0301", "\u0301",
    "日本語", "中文", "한국어", "Ελληνικά", "русский", "हिन्दी", "عربى", "עברית", "ไทย",
    "😀", "👩‍👩‍👧‍👦", "🏳️‍🌈", "✨", "🇫🇷", "\u200b", "\u200d", "\ufeff", "\U0001d518",
    "!", "?", "...", "->", "::", "{}", "()", "[]", "$", "%", "#", "@", "_", "__init__", "`", "~",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<|im_start", "im_end|>", "<", "|>",
    "fn", "def", "return", "x=1", "a_b", "camelCase", "snake_case", "http://example.com/a?b=c",
]


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_GGUF
    tok = build_tokenizer(GGUFReader(str(path)))
    rng = random.Random(SEED)
    cases = []
    for _ in range(COUNT):
        text = "".join(rng.choice(PARTS) for _ in range(rng.randint(1, 12)))
        if rng.random() < 0.2:
            # Random code points, excluding surrogates.
            text += "".join(chr(rng.choice([rng.randint(0x20, 0x7F), rng.randint(0xA0, 0xD7FF), rng.randint(0xE000, 0x10FFFF)])) for _ in range(rng.randint(1, 4)))
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(HERE / "ids.json", "w", encoding="utf-8") as f:
        json.dump({"seed": SEED, "cases": cases}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases to {HERE / 'ids.json'}")


if __name__ == "__main__":
    main()
