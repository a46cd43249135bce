"""What the f16 matmul baselines run on, and what warp-level MMA reaches
under Vulkan's limits (run on the H200, next to bench_tensor).

1. `kernels`: the CUDA kernels PyTorch (cuBLAS) launches for the benchmark's
   f16 shapes (8192^3 and decode m = 16..64, k = n = 4096), from the
   profiler: their names say whether they use Hopper's warpgroup MMA
   (`sm90` ... `warpgroup` / `gmma`) or warp-level MMA (`s16816`, `sm80`).
2. `triton`: one 8192^3 f16 -> f32 matmul kernel written in Triton, timed
   with warp-level MMA forced (`DISABLE_MMA_V3=1`, the instruction KHR
   cooperative matrices run as) and without, over tilings and pipeline
   depths; each line gives the workgroup memory the kernel took, so the
   rows within NVIDIA Vulkan's 48 KiB and without copies in flight across
   steps (num_stages 1) are the ones comparable with hrx's kernel.

3. `decode`: the same for decode (m = 32 and 64, k = n = 4096): a split-k
   Triton kernel writing f32 partial sums, summed by `torch.sum` (as
   cuBLAS's split-k kernels are followed by a reduction kernel).

`python3 warp_mma_baseline.py kernels`, `... triton` or `... decode` (the last two in a
process of its own per MMA setting, as Triton reads the variable when it
compiles). Prints one line per case; `--out FILE` also writes JSON lines.
"""

import json
import os
import sys

import torch


def flops(m, k, n):
    return 2.0 * m * k * n


def cuda_kernels():
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for m, k, n in [(8192, 8192, 8192), (64, 4096, 4096), (32, 4096, 4096), (16, 4096, 4096)]:
        a = torch.rand((m, k), dtype=torch.float16, device="cuda")
        b = torch.rand((k, n), dtype=torch.float16, device="cuda")
        out = torch.empty((m, n), dtype=torch.float16, device="cuda")
        for _ in range(3):
            torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                torch.matmul(a, b, out=out)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        rows.append({"case": f"cublas {m}x{k}x{n}", "kernels": names})
        print(f"cublas m={m} k={k} n={n}: {' | '.join(names)}")
    return rows


def triton_rows():
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        # Workgroups walk groups of GROUP tile rows column by column.
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        first = (pid // per_group) * GROUP
        rows_here = tl.minimum(tiles_m - first, GROUP)
        tm = first + (pid % per_group) % rows_here
        tn = (pid % per_group) // rows_here
        rm = tm * BM + tl.arange(0, BM)
        rn = tn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * K + rk[None, :]
        pb = b + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K, BK):
            acc += tl.dot(tl.load(pa), tl.load(pb))
            pa += BK
            pb += BK * N
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    size = 8192
    a = torch.rand((size, size), dtype=torch.float16, device="cuda")
    b = torch.rand((size, size), dtype=torch.float16, device="cuda")
    c = torch.empty((size, size), dtype=torch.float32, device="cuda")
    want = None
    mode = "warp MMA" if os.environ.get("DISABLE_MMA_V3") == "1" else "default"
    rows = []
    configs = [
        # BM, BN, BK, warps, stages
        (128, 256, 32, 8, 1),
        (128, 256, 32, 16, 1),
        (128, 128, 32, 4, 1),
        (128, 128, 32, 8, 1),
        (128, 128, 64, 8, 1),
        (256, 128, 32, 8, 1),
        (128, 256, 32, 8, 2),
        (128, 128, 32, 8, 2),
        (128, 256, 32, 8, 3),
        (128, 256, 64, 8, 3),
        (128, 128, 64, 8, 4),
        (256, 128, 64, 8, 3),
    ]
    for bm, bn, bk, warps, stages in configs:
        grid = (triton.cdiv(size, bm) * triton.cdiv(size, bn),)
        try:
            kernel = matmul[grid](a, b, c, size, size, size, BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=warps, num_stages=stages)
        except Exception as e:  # out of shared memory or registers
            print(f"triton {mode} {bm}x{bn}x{bk} warps={warps} stages={stages}: failed ({type(e).__name__})")
            continue
        torch.cuda.synchronize()
        if want is None:
            want = (a[:256].float() @ b.float()[:, :256])
        err = (c[:256, :256] - want).abs().max().item()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            start.record()
            for _ in range(10):
                matmul[grid](a, b, c, size, size, size, BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=warps, num_stages=stages)
            stop.record()
            stop.synchronize()
            best = min(best, start.elapsed_time(stop) / 1e3 / 10)
        shared = getattr(kernel.metadata, "shared", None)
        regs = getattr(kernel, "n_regs", None)
        tflops = flops(size, size, size) / best / 1e12
        row = {"case": f"triton {mode}", "tile": [bm, bn, bk], "warps": warps, "stages": stages,
               "shared_bytes": shared, "registers": regs, "tflops": tflops, "max_error": err}
        rows.append(row)
        print(f"triton {mode} {bm}x{bn}x{bk} warps={warps} stages={stages}: {tflops:.1f} TFLOP/s, "
              f"shared {shared} B, {regs} registers, max error {err:.3g}")
    return rows


def triton_decode_rows():
    import triton
    import triton.language as tl

    @triton.jit
    def partial(a, b, w, M, N, K, KS, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # Program (x, s): columns [x BN, (x + 1) BN) over k in [s KS, (s + 1) KS),
        # its f32 sums into plane s of w.
        tn = tl.program_id(0)
        split = tl.program_id(1)
        rm = tl.arange(0, BM)
        rn = tn * BN + tl.arange(0, BN)
        rk = split * KS + tl.arange(0, BK)
        pa = a + rm[:, None] * K + rk[None, :]
        pb = b + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, KS, BK):
            acc += tl.dot(tl.load(pa), tl.load(pb))
            pa += BK
            pb += BK * N
        tl.store(w + split * M * N + rm[:, None] * N + rn[None, :], acc)

    k = n = 4096
    mode = "warp MMA" if os.environ.get("DISABLE_MMA_V3") == "1" else "default"
    rows = []
    for m in (32, 64):
        a = torch.rand((m, k), dtype=torch.float16, device="cuda")
        b = torch.rand((k, n), dtype=torch.float16, device="cuda")
        want = a.float() @ b.float()
        for bn, bk, splits, warps, stages in [
            (32, 64, 4, 4, 1), (64, 64, 4, 4, 1), (64, 128, 4, 4, 1), (64, 64, 8, 4, 1),
            (128, 64, 8, 4, 1), (32, 64, 8, 4, 1), (64, 64, 4, 4, 3), (64, 64, 8, 4, 4),
            (32, 64, 4, 4, 4), (64, 128, 2, 4, 3),
        ]:
            w = torch.empty((splits, m, n), dtype=torch.float32, device="cuda")
            c = torch.empty((m, n), dtype=torch.float32, device="cuda")
            grid = (n // bn, splits)

            def run():
                partial[grid](a, b, w, m, n, k, k // splits, BM=m, BN=bn, BK=bk, num_warps=warps, num_stages=stages)
                torch.sum(w, dim=0, out=c)

            try:
                run()
            except Exception as e:
                print(f"triton decode {mode} m={m} {bn}x{bk} splits={splits}: failed ({type(e).__name__})")
                continue
            torch.cuda.synchronize()
            err = (c - want).abs().max().item()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            best = float("inf")
            for _ in range(3):
                start.record()
                for _ in range(100):
                    run()
                stop.record()
                stop.synchronize()
                best = min(best, start.elapsed_time(stop) / 1e3 / 100)
            tflops = flops(m, k, n) / best / 1e12
            rows.append({"case": f"triton decode {mode}", "m": m, "bn": bn, "bk": bk, "splits": splits,
                         "warps": warps, "stages": stages, "tflops": tflops, "max_error": err})
            print(f"triton decode {mode} m={m} bn={bn} bk={bk} splits={splits} warps={warps} stages={stages}: "
                  f"{tflops:.1f} TFLOP/s ({best * 1e6:.1f} us), max error {err:.3g}")
    return rows


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "kernels"
    rows = {"kernels": cuda_kernels, "triton": triton_rows, "decode": triton_decode_rows}[what]()
    if "--out" in sys.argv:
        with open(sys.argv[sys.argv.index("--out") + 1], "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
