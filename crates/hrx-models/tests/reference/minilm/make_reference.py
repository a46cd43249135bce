#!/usr/bin/env python3
"""Float64 reference embeddings for a sentence-transformers BERT model (all-MiniLM-L6-v2).

    python3 make_reference.py [MODEL_DIR]

MODEL_DIR (default: target/models/all-MiniLM-L6-v2 under the repository root) holds the
sentence-transformers export: config.json, sentence_bert_config.json, 1_Pooling/config.json,
modules.json, tokenizer.json and model.safetensors.  Needs only `numpy`, `tokenizers` and
`safetensors` (no torch, no transformers).  Nothing here uses hrx code.

Reads sentences.json next to this file and writes reference.json next to it.  Each sentence is
tokenized with Hugging Face `tokenizers` (no padding, truncation at max_seq_length) and run alone
(no padding) through a float64 BERT encoder written out below; every shape and constant comes
from the config files.  Then checks, and stops with an error if one fails:
  * ids from `tokenizers` equal those of an independent pure-Python BERT tokenizer (below);
  * every embedding has L2 norm 1;
  * the published pair ("A man is eating food." / "A man is eating a piece of bread.") has
    cosine 0.7553 +/- 5e-4;
  * running sentences in padded batches (bucket lengths, attention mask) gives the same
    embeddings as running each alone;
  * the sentence longer than max_seq_length tokens differs when truncated at 128 instead.
It also prints how far float32 math (and float16-rounded weights) drift from float64, as a
guide for tolerances.
"""

import hashlib
import json
import math
import os
import sys
import unicodedata
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[4]  # minilm -> reference -> tests -> hrx-models -> crates -> root
DEFAULT_MODEL_DIR = REPO_ROOT / "target" / "models" / "all-MiniLM-L6-v2"

MODEL_NAME = "all-MiniLM-L6-v2"
PAIR = ("A man is eating food.", "A man is eating a piece of bread.")
PAIR_COSINE, PAIR_TOL = 0.7553, 5e-4


def fail(msg):
    sys.exit("FAILED: " + msg)


# --------------------------------------------------------------------------- model files


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_model(model_dir):
    cfg = load_json(model_dir / "config.json")
    st_cfg = load_json(model_dir / "sentence_bert_config.json")
    modules = load_json(model_dir / "modules.json") if (model_dir / "modules.json").exists() else []
    pool_dir = "1_Pooling"
    for m in modules:
        if m["type"].endswith(".Pooling"):
            pool_dir = m["path"]
    pool_cfg = load_json(model_dir / pool_dir / "config.json")
    # sentence-transformers only L2-normalises when a Normalize module is listed.
    normalize = any(m["type"].endswith(".Normalize") for m in modules)

    if cfg.get("model_type", "bert") != "bert":
        fail("model_type %r is not bert" % cfg.get("model_type"))
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        fail("position_embedding_type %r is not absolute" % cfg["position_embedding_type"])
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        fail("hidden_size is not a multiple of num_attention_heads")
    max_seq = st_cfg["max_seq_length"]
    if max_seq > cfg["max_position_embeddings"]:
        fail("max_seq_length %d > max_position_embeddings" % max_seq)
    if pool_cfg["word_embedding_dimension"] != cfg["hidden_size"]:
        fail("pooling dimension differs from hidden_size")

    raw = load_file(str(model_dir / "model.safetensors"))
    # Checkpoints differ on a leading "bert." prefix; drop it.
    w = {}
    for k, v in raw.items():
        k = k[len("bert."):] if k.startswith("bert.") else k
        if v.dtype.kind == "f":
            w[k] = v.astype(np.float64)
    H, I = cfg["hidden_size"], cfg["intermediate_size"]
    expect = {
        "embeddings.word_embeddings.weight": (cfg["vocab_size"], H),
        "embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], H),
        "embeddings.token_type_embeddings.weight": (cfg["type_vocab_size"], H),
    }
    for l in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % l
        for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            expect[p + n + ".weight"] = (H, H)
        expect[p + "intermediate.dense.weight"] = (I, H)
        expect[p + "output.dense.weight"] = (H, I)
    for k, shape in expect.items():
        if k not in w or w[k].shape != shape:
            fail("tensor %s: expected %s, got %s" % (k, shape, w[k].shape if k in w else None))
    return cfg, st_cfg, pool_cfg, normalize, w


# --------------------------------------------------------------------------- forward pass

_erf = np.vectorize(math.erf, otypes=[np.float64])


def activation(name, x):
    if name == "gelu":  # exact erf GELU, as torch.nn.functional.gelu
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(x.dtype))
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return np.maximum(x, 0)
    fail("hidden_act %r not supported" % name)


def layer_norm(x, g, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def encode(ids, mask, cfg, w):
    """ids, mask: [B, L] int arrays (mask 1 = real token).  Returns hidden states [B, L, H]."""
    B, L = ids.shape
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = H // nh
    eps = cfg["layer_norm_eps"]
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:L][None]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    # Keys that are padding get -inf, so they get exactly zero weight.
    key_bias = np.where(mask[:, None, None, :] > 0, 0.0, -np.inf).astype(x.dtype)
    scale = 1.0 / math.sqrt(hd)
    for l in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % l

        def heads(t):
            return t.reshape(B, L, nh, hd).transpose(0, 2, 1, 3)  # [B, nh, L, hd]

        q = heads(linear(x, w, p + "attention.self.query"))
        k = heads(linear(x, w, p + "attention.self.key"))
        v = heads(linear(x, w, p + "attention.self.value"))
        s = (q @ k.transpose(0, 1, 3, 2)) * scale + key_bias  # [B, nh, L, L]
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, L, H)
        a = linear(ctx, w, p + "attention.output.dense")
        x = layer_norm(a + x, w[p + "attention.output.LayerNorm.weight"],
                       w[p + "attention.output.LayerNorm.bias"], eps)
        h = activation(cfg["hidden_act"], linear(x, w, p + "intermediate.dense"))
        o = linear(h, w, p + "output.dense")
        x = layer_norm(o + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


def pool(x, mask, pool_cfg, normalize):
    """x: [B, L, H], mask: [B, L].  sentence-transformers Pooling (concatenated in its order)."""
    m = mask[..., None].astype(x.dtype)
    n = m.sum(1)
    parts = []
    if pool_cfg.get("pooling_mode_cls_token"):
        parts.append(x[:, 0])
    if pool_cfg.get("pooling_mode_max_tokens"):
        parts.append(np.where(m > 0, x, -np.inf).max(1))
    if pool_cfg.get("pooling_mode_mean_tokens"):
        parts.append((x * m).sum(1) / n)
    if pool_cfg.get("pooling_mode_mean_sqrt_len_tokens"):
        parts.append((x * m).sum(1) / np.sqrt(n))
    for other in ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"):
        if pool_cfg.get(other):
            fail(other + " not supported")
    if not parts:
        fail("no pooling mode set")
    e = np.concatenate(parts, -1)
    if normalize:
        e = e / np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    return e


def embed_one(ids, model):
    cfg, pool_cfg, normalize, w = model
    ids = np.asarray(ids, dtype=np.int64)[None]
    mask = np.ones_like(ids)
    return pool(encode(ids, mask, cfg, w), mask, pool_cfg, normalize)[0]


# --------------------------------------------------------------------------- independent tokenizer
# A plain reimplementation of BertNormalizer + BertPreTokenizer + WordPiece + [CLS]/[SEP], using
# only the vocabulary and flags stored in tokenizer.json, to cross-check the `tokenizers` ids.

_WHITE_SPACE = set("\t\n\r\x0b\x0c \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B)}  # Rust char::is_whitespace (Unicode White_Space)


def _is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B920 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def _is_punct(c):
    return (c.isascii() and not c.isalnum() and 33 <= ord(c) <= 126) or \
        unicodedata.category(c).startswith("P")


class PlainBertTokenizer:
    def __init__(self, tokenizer_json):
        t = load_json(tokenizer_json)
        n, pre, model = t["normalizer"], t["pre_tokenizer"], t["model"]
        if n["type"] != "BertNormalizer" or pre["type"] != "BertPreTokenizer" \
                or model["type"] != "WordPiece":
            fail("tokenizer.json is not a plain BERT WordPiece tokenizer")
        self.clean_text = n["clean_text"]
        self.chinese = n["handle_chinese_chars"]
        self.lowercase = n["lowercase"]
        self.strip_accents = n["strip_accents"] if n["strip_accents"] is not None else n["lowercase"]
        self.vocab = model["vocab"]
        self.unk = model["unk_token"]
        self.prefix = model["continuing_subword_prefix"]
        self.max_chars = model["max_input_chars_per_word"]
        post = t["post_processor"]
        if post["type"] != "TemplateProcessing":
            fail("post_processor %r is not TemplateProcessing" % post["type"])
        single, special = post["single"], post["special_tokens"]
        seq = [i for i, e in enumerate(single) if "Sequence" in e]
        if len(seq) != 1:
            fail("single template without exactly one sequence")
        self.before = [i for e in single[: seq[0]] for i in special[e["SpecialToken"]["id"]]["ids"]]
        self.after = [i for e in single[seq[0] + 1:] for i in special[e["SpecialToken"]["id"]]["ids"]]

    def normalize(self, s):
        if self.clean_text:
            s = "".join(" " if c in _WHITE_SPACE else c for c in s
                        if not (c == "\0" or c == "\ufffd" or _is_control(c)))
        if self.chinese:
            s = "".join(" %s " % c if _is_cjk(ord(c)) else c for c in s)
        if self.strip_accents:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            s = s.lower()
        return s

    def pre_tokenize(self, s):
        words, cur = [], []
        for c in s:
            if c in _WHITE_SPACE:
                if cur:
                    words.append("".join(cur))
                cur = []
            elif _is_punct(c):
                if cur:
                    words.append("".join(cur))
                words.append(c)
                cur = []
            else:
                cur.append(c)
        if cur:
            words.append("".join(cur))
        return words

    def wordpiece(self, word):
        if len(word) > self.max_chars:
            return [self.vocab[self.unk]]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    out.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:
                return [self.vocab[self.unk]]
            start = end
        return out

    def encode(self, s, max_length):
        ids = [i for word in self.pre_tokenize(self.normalize(s)) for i in self.wordpiece(word)]
        ids = ids[: max_length - len(self.before) - len(self.after)]
        return self.before + ids + self.after


# --------------------------------------------------------------------------- main


def cosine(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main():
    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL_DIR
    if not (model_dir / "config.json").exists():
        fail("no config.json in %s" % model_dir)
    cfg, st_cfg, pool_cfg, normalize, w = load_model(model_dir)
    model = (cfg, pool_cfg, normalize, w)
    max_seq = st_cfg["max_seq_length"]
    sentences = load_json(HERE / "sentences.json")
    for s in sentences:
        if "\n" in s or "\r" in s:
            fail("sentence with a line break: %r" % s)

    def hf_tokenizer(max_length):
        t = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        t.no_padding()
        t.enable_truncation(max_length=max_length)
        return t

    tok = hf_tokenizer(max_seq)
    tok_full = hf_tokenizer(1 << 30)
    plain = PlainBertTokenizer(model_dir / "tokenizer.json")

    print("model %s: %d layers, hidden %d, %d heads, ffn %d, act %s, eps %g, max_seq_length %d, "
          "pooling %s, normalize %s" % (model_dir, cfg["num_hidden_layers"], cfg["hidden_size"],
                                        cfg["num_attention_heads"], cfg["intermediate_size"],
                                        cfg["hidden_act"], cfg["layer_norm_eps"], max_seq,
                                        [k for k, v in pool_cfg.items() if v is True], normalize))

    records, embs, id_lists = [], [], []
    bad_ids = 0
    for i, s in enumerate(sentences):
        ids = tok.encode(s).ids
        full = len(tok_full.encode(s).ids)
        mine = plain.encode(s, max_seq)
        if mine != ids:
            bad_ids += 1
            print("  ids differ for sentence %d: tokenizers %s, plain %s" % (i, ids, mine))
        e = embed_one(ids, model)
        embs.append(e)
        id_lists.append(ids)
        records.append({"text": s, "ids": ids, "embedding": e})
        print("%3d: %3d tokens%s  norm %.15f  %r" % (
            i, len(ids), " (truncated from %d)" % full if full > len(ids) else "",
            np.linalg.norm(e), s[:60]))
    embs = np.array(embs)

    # ids: tokenizers vs the plain tokenizer
    if bad_ids:
        fail("%d sentences tokenize differently in the plain tokenizer" % bad_ids)
    print("ids: tokenizers == plain-Python BERT tokenizer for all %d sentences" % len(sentences))

    # norms
    if normalize:
        worst = float(np.abs(np.linalg.norm(embs, axis=1) - 1).max())
        print("norms: max |norm - 1| = %.3g" % worst)
        if worst > 1e-12:
            fail("embedding norms are not 1")

    # published pair
    a, b = sentences.index(PAIR[0]), sentences.index(PAIR[1])
    pair_cos = cosine(embs[a], embs[b])
    print("published pair cosine(%r, %r) = %.6f (expected %.4f +/- %g)" % (
        PAIR[0], PAIR[1], pair_cos, PAIR_COSINE, PAIR_TOL))
    if abs(pair_cos - PAIR_COSINE) > PAIR_TOL:
        fail("published pair cosine off")

    # padded batches by bucket == one sentence at a time
    buckets = [b for b in (16, 32, 64, 128, 256, 512) if b <= max_seq] or [max_seq]
    if buckets[-1] < max_seq:
        buckets.append(max_seq)
    groups = {}
    for i, ids in enumerate(id_lists):
        groups.setdefault(next(b for b in buckets if b >= len(ids)), []).append(i)
    worst = 0.0
    for L, members in sorted(groups.items()):
        ids = np.zeros((len(members), L), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(members):
            ids[r, : len(id_lists[i])] = id_lists[i]
            mask[r, : len(id_lists[i])] = 1
        e = pool(encode(ids, mask, cfg, w), mask, pool_cfg, normalize)
        worst = max(worst, float(np.abs(e - embs[members]).max()))
        print("bucket %3d: %2d sentences %s" % (L, len(members), members))
    print("padded batches vs one at a time: max |diff| = %.3g" % worst)
    if worst > 1e-12:
        fail("padded batches differ from unpadded")

    # truncation: the long sentence(s) at max_seq vs 128
    long_ones = [i for i, s in enumerate(sentences) if len(tok_full.encode(s).ids) > max_seq]
    if not long_ones:
        fail("no sentence longer than max_seq_length")
    for i in long_ones:
        ids128 = hf_tokenizer(128).encode(sentences[i]).ids
        if ids128 != plain.encode(sentences[i], 128):
            fail("ids at 128 differ for sentence %d" % i)
        c = cosine(embs[i], embed_one(ids128, model))
        print("sentence %d: cosine(truncated at %d, truncated at 128) = %.6f" % (i, max_seq, c))
        if c > 1 - 1e-6:
            fail("truncation at 128 does not change the embedding")

    # precision guide: float32 math, and float16-rounded weights with float32 math
    for label, conv in (("float32", lambda t: t.astype(np.float32)),
                        ("float16 weights, float32 math",
                         lambda t: t.astype(np.float16).astype(np.float32))):
        w32 = {k: conv(v) for k, v in w.items()}
        e32 = np.array([embed_one(ids, (cfg, pool_cfg, normalize, w32)) for ids in id_lists])
        cos = [cosine(e32[i].astype(np.float64), embs[i]) for i in range(len(embs))]
        print("%s vs float64: max |diff| %.3g, min cosine %.9f" % (
            label, float(np.abs(e32 - embs).max()), min(cos)))

    # write reference.json
    def floats(v):
        return "[" + ", ".join("%.9g" % x for x in v) + "]"

    lines = [
        "{",
        '  "model": %s,' % json.dumps(MODEL_NAME),
        '  "safetensors_sha256": "%s",' % sha256_of(model_dir / "model.safetensors"),
        '  "max_seq_length": %d,' % max_seq,
        '  "generator": "float64 numpy forward pass (make_reference.py) with Hugging Face tokenizers ids",',
        '  "sentences": [',
    ]
    for n, r in enumerate(records):
        lines.append('    {"text": %s, "ids": %s, "embedding": %s}%s' % (
            json.dumps(r["text"]), json.dumps(r["ids"]), floats(r["embedding"]),
            "," if n + 1 < len(records) else ""))
    lines += ["  ],", '  "pair": {"a": %d, "b": %d, "cosine": %.9g}' % (a, b, pair_cos), "}", ""]
    text = "\n".join(lines)
    back = json.loads(text)  # well-formed, and round-trips
    assert back["sentences"][a]["text"] == PAIR[0] and len(back["sentences"]) == len(sentences)
    out = HERE / "reference.json"
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s (%d bytes)" % (out, os.path.getsize(out)))


if __name__ == "__main__":
    main()
