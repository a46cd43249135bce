#!/usr/bin/env python3
"""PyTorch baseline for hrx's sentence-embedding benchmark
(bench/src/bin/bench_models): a BERT encoder of
all-MiniLM-L6-v2's shapes from transformers, with mean pooling and L2
normalisation as sentence-transformers adds them, at the benchmark's
shapes. Speed does not depend on the weights' values, so the model is
built from its config with random weights.

Writes JSON that the Rust benchmark reads with --torch:

    {"device": "...", "torch": "2.11.0",
     "results": {"latency_f32_1x128_ms": 3.3, "throughput_f32_1024x128": 13800.0,
                 "throughput_f16_1024x128": 85800.0, ...}}

Latencies are the median of single forward passes (host clock, after a
synchronize); throughputs are sentences/s from the median of timed
repetitions.

Usage: minilm.py [--config DIR] [--small] [--out PATH]
(--config: a folder with config.json, else the MiniLM sizes below;
--out defaults to $HRX_BENCH_OUT, else target/bench/minilm_torch.json)
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

MINILM = dict(
    vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
    intermediate_size=1536, max_position_embeddings=512, layer_norm_eps=1e-12, hidden_act="gelu",
)


def model(config_dir, dtype, device):
    from transformers import BertConfig, BertModel

    if config_dir:
        config = BertConfig.from_pretrained(config_dir)
    else:
        config = BertConfig(**MINILM)
    torch.manual_seed(0)
    m = BertModel(config, add_pooling_layer=False).eval().to(device=device, dtype=dtype)
    return m, config


def embed(m, ids, mask):
    states = m(input_ids=ids, attention_mask=mask).last_hidden_state
    weights = mask.unsqueeze(-1).to(states.dtype)
    pooled = (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=1)


def timed(fn, device, reps, samples):
    """Median seconds of one call over `samples` samples of `reps` calls."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        times.append((time.perf_counter() - start) / reps)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    big = 16 if args.small or device == "cpu" else 1024
    results = {}
    with torch.inference_mode():
        dtypes = [("f32", torch.float32)] + ([("f16", torch.float16)] if device == "cuda" else [])
        for name, dtype in dtypes:
            m, config = model(args.config, dtype, device)
            gen = torch.Generator().manual_seed(1)
            for batch, reps in ((1, 20), (big, 2)):
                ids = torch.randint(1000, config.vocab_size, (batch, 128), generator=gen).to(device)
                mask = torch.ones_like(ids)
                seconds = timed(lambda: embed(m, ids, mask), device, reps, 15 if batch == 1 else 7)
                if batch == 1:
                    results[f"latency_{name}_1x128_ms"] = seconds * 1e3
                results[f"throughput_{name}_{batch}x128"] = batch / seconds
            del m
    out = args.out or os.environ.get("HRX_BENCH_OUT") or "target/bench/minilm_torch.json"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    with open(out, "w") as f:
        json.dump({"device": name, "torch": torch.__version__, "results": results}, f, indent=1)
    for key, value in results.items():
        print(f"{key}: {value:.2f}")


if __name__ == "__main__":
    main()
