"""K-quant reference for hrx's Q4_K and Q6_K kernels.

Writes kquant.json beside this script: for Q4_K and Q6_K, a 6 x 512
matrix of seeded random GGML super-blocks (every byte random but the f16
scales, which are drawn as sane magnitudes of either sign) as base64, and
its values as the `gguf` package dequantises them (little-endian f32,
base64). Nothing here imports or calls hrx. Tested with gguf 0.19.0 and
numpy 2.4.6. The kernels' tests (tests/e2e/decoder_kernels/kquant.rs)
and the GGUF reader's (tests/models/gguf.rs) read it.

    python3 -m venv target/ref-venv
    target/ref-venv/bin/pip install gguf numpy
    target/ref-venv/bin/python crates/hrx-models/tests/reference/kquant/make_kquant.py
"""

import base64
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType, quants

ROWS, COLS = 6, 512


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).tobytes()


def q4_k_block(rng):
    d = rng.uniform(-0.01, 0.01)
    dmin = rng.uniform(-0.02, 0.02)
    rest = rng.integers(0, 256, size=12 + 128, dtype=np.uint8).tobytes()
    return f16_bytes([d, dmin]) + rest


def q6_k_block(rng):
    body = rng.integers(0, 256, size=128 + 64 + 16, dtype=np.uint8).tobytes()
    return body + f16_bytes([rng.uniform(-0.002, 0.002)])


def matrix(kind, block, rng):
    blocks = ROWS * COLS // 256
    data = b"".join(block(rng) for _ in range(blocks))
    raw = np.frombuffer(data, dtype=np.uint8).reshape(ROWS, -1)
    values = quants.dequantize(raw, kind).astype(np.float32)
    assert values.shape == (ROWS, COLS)
    return {
        "rows": ROWS,
        "cols": COLS,
        "bytes": base64.b64encode(data).decode(),
        "values": base64.b64encode(values.astype("<f4").tobytes()).decode(),
    }


def main():
    rng = np.random.default_rng(20261205)
    out = {
        "Q4_K": matrix(GGMLQuantizationType.Q4_K, q4_k_block, rng),
        "Q6_K": matrix(GGMLQuantizationType.Q6_K, q6_k_block, rng),
    }
    path = pathlib.Path(__file__).with_name("kquant.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
