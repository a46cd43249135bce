#!/usr/bin/env python3
"""Float64 reference for SmolLM2-135M-Instruct (GGUF, Q4_1): prompt ids, greedy ids, margins.

    python3 -m venv target/ref-venv
    target/ref-venv/bin/pip install gguf numpy tokenizers jinja2
    target/ref-venv/bin/python crates/hrx-models/tests/reference/smollm2/make_reference.py [GGUF [OUT]]

GGUF (default: target/models/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf under the
repository root, as `cargo xtask models` fetches it); OUT (default: reference.json) names the file
written next to this one.  Nothing here uses hrx code:

  * the file is read with the `gguf` package (GGUFReader) and every tensor dequantised with
    its numpy code (gguf.quants.dequantize), then widened to float64;
  * the tokenizer is Hugging Face `tokenizers`, built here from the GGUF vocabulary and merges
    the way SmolLM2's own tokenizer.json is: byte-level BPE, pre-tokenizer Digits (each digit
    alone) then ByteLevel (GPT-2's split, no prefix space), control tokens (token type 3) as
    special added tokens, ByteLevel decoder;
  * chat prompts are rendered with jinja2 from the file's `tokenizer.chat_template`;
  * the forward pass is written out below in float64: every shape and constant comes from the
    `llama.*` metadata.  llama with RMS norm, RoPE on adjacent pairs (GGUF stores Q and K rows
    permuted for exactly that, so no un-permuting), grouped-query attention (query head h reads
    key/value head h // (heads / kv_heads)), SwiGLU, tied embedding when there is no
    output.weight.  Greedy decoding with a KV cache, 32 new tokens, no stopping at EOS.

Writes OUT next to this file: per prompt its text (or chat messages and the rendered
text), prompt ids, greedy ids, the top-1 minus top-2 logit margin at each step and the decoded
continuation; extra tokenizer-only cases (ids and their decoded text); a few dequantised rows of one Q4_1 and one
Q8_0 tensor.  Checks, stopping with an error if one fails: the tokenizer reproduces the file's
token count and round-trips every prompt; decoding with the KV cache equals a full recompute at
the last step; the plain chat answer contains "Paris" (a coherent English answer).
"""

import hashlib
import json
import sys
from pathlib import Path

import jinja2
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[4]  # smollm2 -> reference -> tests -> hrx-models -> crates -> root
DEFAULT_GGUF = (
    REPO_ROOT / "target" / "models" / "SmolLM2-135M-Instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
)
NEW_TOKENS = 32
CONTROL = 3  # llama.cpp's token type for control tokens

# Prompts generated from: (name, text) or (name, messages) rendered with the chat template.
GENERATE = [
    ("plain", "The capital of France is"),
    ("story", "Once upon a time, in a small village by the sea, there lived"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("counting", "1, 2, 3, 4, 5, 6,"),
    ("chat", [{"role": "user", "content": "What is the capital of France?"}]),
    (
        "chat_turns",
        [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Hi! Who are you?"},
            {"role": "assistant", "content": "I am a small language model. How can I help?"},
            {"role": "user", "content": "Name three primary colours."},
        ],
    ),
    ("special_tokens", "<|im_start|>user\nWrite a haiku about rain.<|im_end|>\n<|im_start|>assistant\n"),
    ("unicode", "Café ☕, naïve résumé 😀 日本語 — “quotes” and emoji 🎉:"),
    ("digits", "In 2024, 12345 people paid $678.90 each, a total of"),
]

# Tokenizer-only cases: whitespace runs, contractions, control tokens next to text, bytes.
TOKENIZE = [
    "",
    " ",
    "   leading spaces\n\n\ttabs   and  trailing  ",
    "I'm sure they've said we'll go, but he'd say it's 'fine' and you're right. DON'T",
    "x<|im_end|>y <|endoftext|> <file_sep><reponame>z",
    "<|im_start|",
    "3.14159 + 2e10 = 0x1F; 1,000,000",
    "Ünïcödé ÀÉÎ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ￥ 한국어 Ελληνικά русский हिन्दी عربى",
    "👩‍👩‍👧‍👦 🏳️‍🌈 ✨\u200b\u00a0\ufeff",
    "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
    "a\r\nb\rc\u2028d  \n  e",
    "bytes without tokens: a\x04b\x06c \U00040000 \x00\x7f",
]

# Rows of these tensors, dequantised, for the host dequantisation tests.
DEQUANT_ROWS = [("blk.0.attn_q.weight", [0, 1, 575]), ("token_embd.weight", [0, 1000, 49151])]


def fail(msg):
    sys.exit("FAILED: " + msg)


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        fail(f"metadata key {key} missing")
    return f.contents()


def build_tokenizer(reader):
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges")]
    if field(reader, "tokenizer.ggml.model") != "gpt2":
        fail("tokenizer.ggml.model is not gpt2")
    if field(reader, "tokenizer.ggml.pre") != "smollm":
        fail("tokenizer.ggml.pre is not smollm: this script builds SmolLM2's pre-tokenizer")
    vocab = {t: i for i, t in enumerate(tokens)}
    if len(vocab) != len(tokens):
        fail("repeated token texts")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == CONTROL]
    tok.add_special_tokens(specials)
    if tok.get_vocab_size() != len(tokens):
        fail(f"tokenizer has {tok.get_vocab_size()} tokens, the file {len(tokens)}")
    return tok


def render_chat(template, messages):
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


class Llama:
    """A float64 llama forward pass over the GGUF's dequantised tensors."""

    def __init__(self, reader):
        arch = field(reader, "general.architecture")
        meta = lambda k: field(reader, f"{arch}.{k}")  # noqa: E731
        self.layers = int(meta("block_count"))
        self.width = int(meta("embedding_length"))
        self.heads = int(meta("attention.head_count"))
        self.kv_heads = int(meta("attention.head_count_kv"))
        self.head_dim = self.width // self.heads
        self.eps = float(meta("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(meta("rope.freq_base"))
        tensors = {t.name: t for t in reader.tensors}

        def load(name):
            t = tensors[name]
            values = dequantize(t.data, t.tensor_type).astype(np.float64)
            # GGUF dims run fastest first; numpy rows are the last dim.
            return values.reshape([int(d) for d in reversed(t.shape)])

        self.embed = load("token_embd.weight")
        self.output = load("output.weight") if "output.weight" in tensors else self.embed
        self.output_norm = load("output_norm.weight")
        names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
        self.blocks = [{n: load(f"blk.{i}.{n}.weight") for n in names} for i in range(self.layers)]
        half = self.head_dim // 2
        self.inv_freq = self.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / self.head_dim)

    def rms_norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, positions):
        """x: (tokens, heads, head_dim); rotate adjacent pairs (x[2i], x[2i+1])."""
        angles = positions[:, None].astype(np.float64) * self.inv_freq[None, :]
        cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    def forward(self, ids, cache):
        """Logits (tokens, vocab) for `ids` following the cache's tokens; extends the cache."""
        start = cache["len"]
        positions = np.arange(start, start + len(ids))
        x = self.embed[np.array(ids)]
        group = self.heads // self.kv_heads
        for layer, b in enumerate(self.blocks):
            h = self.rms_norm(x, b["attn_norm"])
            q = (h @ b["attn_q"].T).reshape(len(ids), self.heads, self.head_dim)
            k = (h @ b["attn_k"].T).reshape(len(ids), self.kv_heads, self.head_dim)
            v = (h @ b["attn_v"].T).reshape(len(ids), self.kv_heads, self.head_dim)
            q, k = self.rope(q, positions), self.rope(k, positions)
            keys = np.concatenate([cache["k"][layer], k]) if start else k
            values = np.concatenate([cache["v"][layer], v]) if start else v
            cache["k"][layer], cache["v"][layer] = keys, values
            kv_positions = np.arange(len(keys))
            mask = kv_positions[None, :] > positions[:, None]
            out = np.empty((len(ids), self.heads, self.head_dim))
            for head in range(self.heads):
                kv = head // group
                scores = q[:, head, :] @ keys[:, kv, :].T / np.sqrt(self.head_dim)
                scores[mask] = -np.inf
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                scores /= scores.sum(axis=-1, keepdims=True)
                out[:, head, :] = scores @ values[:, kv, :]
            x = x + out.reshape(len(ids), self.width) @ b["attn_output"].T
            h = self.rms_norm(x, b["ffn_norm"])
            gate = h @ b["ffn_gate"].T
            up = h @ b["ffn_up"].T
            x = x + (gate / (1.0 + np.exp(-gate)) * up) @ b["ffn_down"].T
        cache["len"] = start + len(ids)
        return self.rms_norm(x, self.output_norm) @ self.output.T

    def new_cache(self):
        return {"len": 0, "k": [None] * self.layers, "v": [None] * self.layers}

    def greedy(self, prompt_ids, steps):
        cache = self.new_cache()
        logits = self.forward(prompt_ids, cache)[-1]
        ids, margins = [], []
        for step in range(steps):
            top2 = np.argsort(logits)[-2:]
            ids.append(int(top2[1]))
            margins.append(float(logits[top2[1]] - logits[top2[0]]))
            if step + 1 < steps:
                logits = self.forward([ids[-1]], cache)[-1]
        return ids, margins, logits


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_GGUF
    out_name = sys.argv[2] if len(sys.argv) > 2 else "reference.json"
    reader = GGUFReader(str(path))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    tok = build_tokenizer(reader)
    template = field(reader, "tokenizer.chat_template")
    add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token"))
    bos = int(field(reader, "tokenizer.ggml.bos_token_id"))

    def encode(text, round_trip=True):
        ids = tok.encode(text, add_special_tokens=False).ids
        if round_trip and tok.decode(ids, skip_special_tokens=False) != text:
            fail(f"{text!r} does not round-trip")
        return [bos] + ids if add_bos else ids

    model = Llama(reader)
    prompts = []
    for name, prompt in GENERATE:
        entry = {"name": name}
        if isinstance(prompt, list):
            entry["messages"] = prompt
            text = render_chat(template, prompt)
        else:
            text = prompt
        entry["text"] = text
        entry["prompt_ids"] = encode(text)
        ids, margins, last_logits = model.greedy(entry["prompt_ids"], NEW_TOKENS)
        entry["ids"] = ids
        entry["margins"] = [round(m, 6) for m in margins]
        entry["continuation"] = tok.decode(ids, skip_special_tokens=False)
        print(f"{name}: {len(entry['prompt_ids'])} prompt ids, min margin {min(margins):.4f}")
        print("   ", repr(entry["continuation"]))
        prompts.append(entry)
        if name == "plain":
            # The KV cache changes nothing: a full recompute gives the same last logits.
            full = model.forward(entry["prompt_ids"] + ids[:-1], model.new_cache())[-1]
            if not np.allclose(full, last_logits, rtol=0, atol=1e-9):
                fail("KV-cached decoding differs from a full recompute")
    chat = next(p for p in prompts if p["name"] == "chat")
    if "Paris" not in chat["continuation"]:
        fail("the chat answer does not name Paris: the forward pass is wrong")

    # Bytes without a byte-level token (such as 0x04) are dropped, so these need not round-trip.
    tokenize = []
    for text in TOKENIZE:
        ids = encode(text, round_trip=False)
        tokenize.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})

    tensors = {t.name: t for t in reader.tensors}
    dequant = []
    for name, rows in DEQUANT_ROWS:
        t = tensors[name]
        # Shortest float32 text: parses back to the same float32.
        values = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(d) for d in reversed(t.shape)])
        for row in rows:
            dequant.append(
                {"tensor": name, "type": t.tensor_type.name, "row": row, "values": [float(str(v)) for v in values[row]]}
            )

    out = {
        "gguf_sha256": sha,
        "new_tokens": NEW_TOKENS,
        "tokenizer": "Hugging Face tokenizers, byte-level BPE built from the GGUF vocabulary and merges",
        "prompts": prompts,
        "tokenize": tokenize,
        "dequantized_rows": dequant,
    }
    with open(HERE / out_name, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("wrote", HERE / out_name)


if __name__ == "__main__":
    main()
