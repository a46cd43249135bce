"""The PyTorch baseline of `bench_llm`: a llama of SmolLM2-135M's shapes
(30 layers, width 576, FFN 1536, 9 query heads over 3 key/value heads of
64, vocabulary 49,152, tied embedding) with seeded f16 weights, a static
key/value cache and the decode step captured as a CUDA graph, the fastest
plain-PyTorch form of autoregressive decoding.

Usage: python3 llm.py --out OUT.json
Writes {"device", "torch", "library", "results": {"decode_1": tokens/s,
"decode_64": tokens/s, "prefill_512": ms}}.
"""

import json
import sys
import time

import torch
import torch.nn.functional as F

LAYERS, WIDTH, FFN, HEADS, KV, HEAD, VOCAB = 30, 576, 1536, 9, 3, 64, 49152
CONTEXT, BASE, EPS = 1024, 100000.0, 1e-5
DEV, DT = "cuda", torch.float16

torch.manual_seed(0)


def weight(*shape):
    return (torch.randn(*shape, device=DEV) * 0.02).to(DT)


emb = weight(VOCAB, WIDTH)
layers = [
    dict(
        an=torch.ones(WIDTH, device=DEV, dtype=DT),
        qkv=weight((HEADS + 2 * KV) * HEAD, WIDTH),
        o=weight(WIDTH, WIDTH),
        fn=torch.ones(WIDTH, device=DEV, dtype=DT),
        gu=weight(2 * FFN, WIDTH),
        down=weight(WIDTH, FFN),
    )
    for _ in range(LAYERS)
]
out_norm = torch.ones(WIDTH, device=DEV, dtype=DT)
inv = 1.0 / (BASE ** (torch.arange(0, HEAD, 2, device=DEV).float() / HEAD))


def rms(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(DT) * w


def rope(x, pos):
    # x: [B, H, T, D]; pos: [B, T]; rotate-half form (the weights are random).
    ang = pos[:, None, :, None].float() * inv
    cos, sin = ang.cos().to(DT), ang.sin().to(DT)
    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    a, b = x[..., : HEAD // 2], x[..., HEAD // 2 :]
    return x * cos + torch.cat([-b, a], -1) * sin


def forward(ids, pos, kcache, vcache, mask):
    # ids, pos: [B, T]; caches: per layer [B, KV, CONTEXT, HEAD]; mask: [B, 1, T, CONTEXT]
    B, T = ids.shape
    x = emb[ids]
    for l, w in enumerate(layers):
        h = rms(x, w["an"])
        qkv = h @ w["qkv"].T
        q, k, v = qkv.split([HEADS * HEAD, KV * HEAD, KV * HEAD], -1)
        q = rope(q.view(B, T, HEADS, HEAD).transpose(1, 2), pos)
        k = rope(k.view(B, T, KV, HEAD).transpose(1, 2), pos)
        v = v.view(B, T, KV, HEAD).transpose(1, 2)
        index = pos[0]
        kcache[l].index_copy_(2, index, k)
        vcache[l].index_copy_(2, index, v)
        kk = kcache[l].repeat_interleave(HEADS // KV, 1)
        vv = vcache[l].repeat_interleave(HEADS // KV, 1)
        a = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
        x = x + a.transpose(1, 2).reshape(B, T, WIDTH) @ w["o"].T
        h = rms(x, w["fn"])
        g, u = (h @ w["gu"].T).split([FFN, FFN], -1)
        x = x + (F.silu(g) * u) @ w["down"].T
    logits = rms(x[:, -1], out_norm) @ emb.T
    return logits.argmax(-1)


def caches(batch):
    return (
        [torch.zeros(batch, KV, CONTEXT, HEAD, device=DEV, dtype=DT) for _ in range(LAYERS)],
        [torch.zeros(batch, KV, CONTEXT, HEAD, device=DEV, dtype=DT) for _ in range(LAYERS)],
    )


def decode_rate(batch, steps=256):
    kc, vc = caches(batch)
    ids = torch.zeros(batch, 1, dtype=torch.long, device=DEV)
    pos = torch.zeros(batch, 1, dtype=torch.long, device=DEV)
    mask = torch.zeros(batch, 1, 1, CONTEXT, device=DEV, dtype=DT)
    positions = torch.arange(CONTEXT, device=DEV)

    def step():
        mask.copy_(torch.where(positions <= pos[0, 0], 0.0, float("-inf")).to(DT).expand_as(mask))
        ids.copy_(forward(ids, pos, kc, vc, mask)[:, None])
        pos.add_(1)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    pos.zero_()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        graph.replay()
        # A serving loop reads each step's tokens back.
        ids.cpu()
    elapsed = time.perf_counter() - start
    return batch * steps / elapsed


def prefill_ms(tokens=512, runs=10):
    kc, vc = caches(1)
    ids = torch.randint(0, VOCAB, (1, tokens), device=DEV)
    pos = torch.arange(tokens, device=DEV)[None]
    causal = torch.full((tokens, CONTEXT), float("-inf"), device=DEV)
    causal[:, :tokens] = torch.triu(torch.full((tokens, tokens), float("-inf"), device=DEV), 1)
    mask = causal.to(DT)[None, None]
    samples = []
    for run in range(runs + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        forward(ids, pos, kc, vc, mask).cpu()
        if run >= 2:
            samples.append((time.perf_counter() - start) * 1e3)
    return sorted(samples)[len(samples) // 2]


with torch.inference_mode():
    results = {
        "decode_1": decode_rate(1),
        "decode_64": decode_rate(64),
        "prefill_512": prefill_ms(),
    }
out = {
    "device": torch.cuda.get_device_name(),
    "torch": torch.__version__,
    "library": "plain PyTorch llama, static cache, CUDA graphs",
    "results": results,
}
print(json.dumps(out, indent=1))
with open(sys.argv[sys.argv.index("--out") + 1], "w") as f:
    json.dump(out, f)
