#!/usr/bin/env python3
"""PyTorch baseline for hrx's tensor operator benchmark.

Times the cases of bench/src/bin/bench_tensor (same keys, same
shapes) and writes JSON that the Rust benchmark reads with --torch:

    {"device": "...", "torch": "2.11.0", "results": {"add_f32_268435456": 4310.2, ...}}

Values are GB/s (bytes read plus written once) or TFLOP/s (2 m n k), from
the median time of several samples. On CUDA each sample times `reps`
back-to-back calls between two CUDA events after a warm-up; on CPU (for a
check here, with --small) the host clock is used.

Usage: tensor_ops.py [--small] [--out PATH] [--samples N] [--only SUBSTRING]
(--out defaults to $HRX_BENCH_OUT, else target/bench/tensor_ops.json)
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

def cases(small):
    """(key, goal unit, work, make) for each case, matching cases.rs."""
    if small:
        n, rows, cols, big, decode_kn = 1 << 22, 1024, 1024, 256, 512
    else:
        n, rows, cols, big, decode_kn = 1 << 28, 8192, 8192, 8192, 4096
    out = [
        (f"add_f32_{n}", "GB/s", 3 * n * 4 / 1e9, ("add", n)),
        (f"gelu_f32_{n}", "GB/s", 2 * n * 4 / 1e9, ("gelu", n)),
        (f"softmax_f32_{rows}x{cols}", "GB/s", 2 * rows * cols * 4 / 1e9, ("softmax", rows, cols)),
        (
            f"layer_norm_f32_{rows}x{cols}",
            "GB/s",
            2 * (rows * cols + cols) * 4 / 1e9,
            ("layer_norm", rows, cols),
        ),
        (f"matmul_f32_{big}x{big}x{big}", "TFLOP/s", 2 * big**3 / 1e12, ("matmul", torch.float32, big, big, big)),
        (f"matmul_f16_{big}x{big}x{big}", "TFLOP/s", 2 * big**3 / 1e12, ("matmul", torch.float16, big, big, big)),
    ]
    for m in (1, 2, 4, 8, 16, 32, 64):
        k = nn = decode_kn
        out.append(
            (f"matmul_f16_{m}x{k}x{nn}", "TFLOP/s", 2 * m * k * nn / 1e12, ("matmul", torch.float16, m, k, nn))
        )
    return out

def build(spec, device):
    """The inputs and a function running the operation once (outputs
    preallocated where PyTorch allows, as hrx writes a fixed output)."""
    kind = spec[0]
    full = lambda shape, dtype=torch.float32: torch.full(shape, 1.0625, dtype=dtype, device=device)
    if kind == "add":
        a, b, out = full((spec[1],)), full((spec[1],)), full((spec[1],))
        return lambda: torch.add(a, b, out=out)
    if kind == "gelu":
        a = full((spec[1],))
        # F.gelu has no out=; the allocator reuses the freed block.
        return lambda: F.gelu(a)
    if kind == "softmax":
        a = full((spec[1], spec[2]))
        return lambda: torch.softmax(a, dim=-1)
    if kind == "layer_norm":
        a, w, b = full((spec[1], spec[2])), full((spec[2],)), full((spec[2],))
        return lambda: F.layer_norm(a, (spec[2],), w, b, 1e-5)
    if kind == "matmul":
        _, dtype, m, k, n = spec
        a = torch.rand((m, k), dtype=dtype, device=device)
        b = torch.rand((k, n), dtype=dtype, device=device)
        out = torch.empty((m, n), dtype=dtype, device=device)
        return lambda: torch.matmul(a, b, out=out)
    raise ValueError(kind)

def time_cuda(fn, samples, target_s):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    probe = max(start.elapsed_time(stop) / 1e3, 1e-7)
    reps = max(1, min(200, round(target_s / probe)))
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3 / reps)
    return statistics.median(times), reps

def time_cpu(fn, samples, target_s):
    fn()
    t = time.perf_counter()
    fn()
    probe = max(time.perf_counter() - t, 1e-7)
    reps = max(1, min(200, round(target_s / probe)))
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t) / reps)
    return statistics.median(times), reps

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small shapes (CPU check, lavapipe comparison)")
    # HRX_BENCH_OUT, as `cargo xtask gpu-bench`'s run.sh sets it for each script.
    default_out = os.environ.get("HRX_BENCH_OUT") or "target/bench/tensor_ops.json"
    parser.add_argument("--out", default=default_out)
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--target-ms", type=float, default=50.0, help="time per sample")
    parser.add_argument("--only", default=None, help="run the cases whose key contains this")
    parser.add_argument("--cpu", action="store_true", help="use the CPU even when CUDA is present")
    args = parser.parse_args()

    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    small = args.small or not cuda
    samples = args.samples or (3 if small else 7)
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    if cuda:
        # Plain f32 matmul, as hrx's f32 kernel computes (no TF32).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    timer = time_cuda if cuda else time_cpu
    results = {}
    for key, unit, work, spec in cases(small):
        if args.only and args.only not in key:
            continue
        if not cuda and spec[0] == "matmul" and spec[1] == torch.float16:
            print(f"tensor_ops.py: {key}: skipped (f16 matmul on CPU)", file=sys.stderr)
            continue
        fn = build(spec, device)
        seconds, reps = timer(fn, samples, args.target_ms / 1e3)
        results[key] = work / seconds
        print(f"| {key} | {unit} | {work / seconds:.1f} | {reps} per sample |", flush=True)
        del fn
        if cuda:
            torch.cuda.empty_cache()
    report = {"device": name, "torch": torch.__version__, "small": small, "results": results}

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"tensor_ops.py: wrote {args.out}", file=sys.stderr)

if __name__ == "__main__":
    main()
