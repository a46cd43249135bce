#!/usr/bin/env python3
"""PyTorch baseline for hrx's serving benchmark (bench/src/bin/bench_serve):
the same requests (one sentence each, the sentences of sentences.txt beside
this script, in turn) served in-process on the same GPU by
sentence-transformers behind a request queue with one batching worker, as
a Python embedding service would be: the worker takes what is queued (up
to --max-batch sentences, no waiting for more) and encodes it as one batch.

Measures, like the Rust suite: for each client count a closed loop
(clients send their next request when the last is answered) with
throughput and p50/p99/p999 latency; the best throughput is the
saturation; then an open loop at half of it (a fixed arrival rate, latency
from the scheduled arrival). Writes JSON that the suite reads with --torch:

    {"device": "...", "torch": "2.11.0", "library": "sentence-transformers 5.1.0",
     "results": {"closed_1_rps": 350.0, "closed_1_p50_ms": 2.8, ...,
                 "saturation_rps": 9000.0, "open50_rate_rps": 4500.0,
                 "open50_p50_ms": 3.1, "open50_p99_ms": 7.0, "open50_p999_ms": 9.0}}

The model folder (--model) needs config.json and the tokenizer files; its
weights are used when it has model.safetensors, else the encoder is built
from config.json with random weights (speed does not depend on their
values). Without sentence-transformers installed, transformers' BertModel
with mean pooling and L2 normalisation does the same work.

Usage: serve.py --model DIR [--max-batch 64] [--clients 1,4,16,64,256]
                [--small] [--out PATH]
(--small, the default without CUDA: clients 1, 4, 16 and 1 s warm-up and
5 s windows instead of 1..256 clients, 0.5 s and 2 s; --out defaults to $HRX_BENCH_OUT, else
target/bench/serve_torch.json)
"""

import argparse
import json
import math
import os
import queue
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future


def sentences():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "sentences.txt")) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def percentile(values, p):
    """Nearest-rank percentile, as the Rust suite computes it."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100.0 * len(ordered))))
    return ordered[rank - 1]


class Batcher:
    """A request queue and one worker thread encoding batches of what is
    queued, up to max_batch sentences."""

    def __init__(self, encode, max_batch):
        self.encode = encode
        self.max_batch = max_batch
        self.queue = queue.Queue()
        self.worker = threading.Thread(target=self.run, daemon=True)
        self.worker.start()

    def submit(self, text):
        future = Future()
        self.queue.put((text, future))
        return future

    def run(self):
        while True:
            batch = [self.queue.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            try:
                vectors = self.encode([text for text, _ in batch])
                for (_, future), vector in zip(batch, vectors):
                    future.set_result(vector)
            except Exception as error:  # every waiting client gets it
                for _, future in batch:
                    future.set_exception(error)


def summarise(spans, start, end):
    latencies = [(b - a) * 1e3 for a, b in spans if start <= b <= end]
    return {
        "rps": len(latencies) / (end - start),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "p999_ms": percentile(latencies, 99.9),
    }


def closed_loop(batcher, texts, clients, warmup, measure):
    begin = time.perf_counter()
    start, end = begin + warmup, begin + warmup + measure
    counter = iter(range(1 << 62))
    lock = threading.Lock()
    spans = []

    def client():
        mine = []
        while True:
            sent = time.perf_counter()
            if sent >= end:
                break
            with lock:
                index = next(counter)
            batcher.submit(texts[index % len(texts)]).result()
            mine.append((sent, time.perf_counter()))
        with lock:
            spans.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarise(spans, start, end)


def open_loop(batcher, texts, rate, warmup, measure):
    begin = time.perf_counter()
    start, end = begin + warmup, begin + warmup + measure
    spans, futures = [], []
    lock = threading.Lock()
    index = 0
    while True:
        arrival = begin + index / rate
        if arrival >= end:
            break
        delay = arrival - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        future = batcher.submit(texts[index % len(texts)])

        def done(_, arrival=arrival):
            finished = time.perf_counter()
            with lock:
                spans.append((arrival, finished))

        future.add_done_callback(done)
        futures.append(future)
        index += 1
    for future in futures:
        future.result()
    return summarise(spans, start, end)


def encoder(model_dir, device):
    """(encode(texts) -> vectors, what serves them)."""
    import torch

    torch.manual_seed(0)
    weights = os.path.join(model_dir, "model.safetensors")
    try:
        import sentence_transformers
        from sentence_transformers import SentenceTransformer

        folder, scratch = model_dir, None
        if not os.path.exists(weights):
            # A copy of the folder with random weights of its config.
            from transformers import BertConfig, BertModel

            scratch = tempfile.mkdtemp(prefix="hrx-serve-torch-")
            folder = os.path.join(scratch, os.path.basename(os.path.abspath(model_dir)))
            shutil.copytree(model_dir, folder)
            BertModel(BertConfig.from_pretrained(model_dir), add_pooling_layer=False).save_pretrained(folder)
        model = SentenceTransformer(folder, device=device)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)

        def encode(texts):
            return model.encode(texts, batch_size=len(texts), convert_to_numpy=True,
                                normalize_embeddings=True, show_progress_bar=False)

        return encode, f"sentence-transformers {sentence_transformers.__version__}"
    except ImportError:
        import torch.nn.functional as F
        import transformers
        from transformers import AutoTokenizer, BertConfig, BertModel

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if os.path.exists(weights):
            model = BertModel.from_pretrained(model_dir, add_pooling_layer=False)
        else:
            model = BertModel(BertConfig.from_pretrained(model_dir), add_pooling_layer=False)
        model = model.eval().to(device)

        def encode(texts):
            with torch.inference_mode():
                batch = tokenizer(texts, padding=True, truncation=True, max_length=256,
                                  return_tensors="pt").to(device)
                states = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
                pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return F.normalize(pooled, p=2, dim=1).cpu().numpy()

        return encode, f"transformers {transformers.__version__}, mean pooling"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-batch", type=int, default=None)
    parser.add_argument("--clients")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    small = args.small or device == "cpu"
    max_batch = args.max_batch or (16 if device == "cpu" else 64)
    warmup, measure = (1.0, 5.0) if small else (0.5, 2.0)
    measure = float(os.environ.get("HRX_BENCH_MS", measure * 1e3)) / 1e3
    clients = [int(c) for c in (args.clients or ("1,4,16" if small else "1,4,16,64,256")).split(",")]
    texts = sentences()

    encode, library = encoder(args.model, device)
    # Every batch size once, so that no first call is timed.
    for size in sorted({1, 2, 4, 8, 16, 32, 64, max_batch}):
        if size <= max_batch:
            encode([texts[i % len(texts)] for i in range(size)])
    batcher = Batcher(encode, max_batch)

    results = {}
    for c in clients:
        print(f"serve.py: {c} clients, closed loop", flush=True)
        for key, value in closed_loop(batcher, texts, c, warmup, measure).items():
            results[f"closed_{c}_{key}"] = value
    saturation = max(results[f"closed_{c}_rps"] for c in clients)
    results["saturation_rps"] = saturation
    results["open50_rate_rps"] = saturation / 2
    print(f"serve.py: open loop at {saturation / 2:.1f} requests/s", flush=True)
    opened = open_loop(batcher, texts, saturation / 2, warmup, measure)
    for key in ("p50_ms", "p99_ms", "p999_ms"):
        results[f"open50_{key}"] = opened[key]

    out = args.out or os.environ.get("HRX_BENCH_OUT") or "target/bench/serve_torch.json"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    report = {"device": name, "torch": torch.__version__, "library": library,
              "max_batch": max_batch, "results": results}
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    for key, value in results.items():
        print(f"{key}: {value:.3f}")


if __name__ == "__main__":
    main()
