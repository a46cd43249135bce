"""Reference values for hrx's GGML block formats beyond Q8_0 and Q4_1.

Writes quants.json beside this script: for each of Q4_0, Q5_0, Q5_1,
Q4_K, Q5_K and Q6_K, a 6 x 512 matrix of seeded random GGML blocks
(every byte random but the f16 scales, which are drawn as sane
magnitudes of either sign) as base64, and its values as the `gguf`
package dequantises them (little-endian f32, base64). Nothing here
imports or calls hrx. Tested with gguf 0.19.0 and numpy 2.4.6. The
kernels' tests (tests/e2e/decoder_kernels/ggml_formats.rs) and the GGUF
reader's (tests/models/gguf.rs) read it.

    python3 -m venv target/ref-venv
    target/ref-venv/bin/pip install gguf numpy
    target/ref-venv/bin/python crates/hrx-models/tests/reference/quants/make_quants.py
"""

import base64
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 6, 512


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).tobytes()


def random_bytes(rng, n):
    return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()


# Each block: its f16 scale fields where GGML puts them, the rest random.
BLOCKS = {
    "Q4_0": (32, lambda rng: f16_bytes([rng.uniform(-0.1, 0.1)]) + random_bytes(rng, 16)),
    "Q5_0": (32, lambda rng: f16_bytes([rng.uniform(-0.05, 0.05)]) + random_bytes(rng, 20)),
    "Q5_1": (
        32,
        lambda rng: f16_bytes([rng.uniform(-0.05, 0.05), rng.uniform(-0.8, 0.8)]) + random_bytes(rng, 20),
    ),
    "Q4_K": (
        256,
        lambda rng: f16_bytes([rng.uniform(-0.01, 0.01), rng.uniform(-0.02, 0.02)]) + random_bytes(rng, 140),
    ),
    "Q5_K": (
        256,
        lambda rng: f16_bytes([rng.uniform(-0.005, 0.005), rng.uniform(-0.02, 0.02)]) + random_bytes(rng, 172),
    ),
    "Q6_K": (256, lambda rng: random_bytes(rng, 208) + f16_bytes([rng.uniform(-0.002, 0.002)])),
}


def matrix(name, rng):
    block_len, block = BLOCKS[name]
    data = b"".join(block(rng) for _ in range(ROWS * COLS // block_len))
    raw = np.frombuffer(data, dtype=np.uint8).reshape(ROWS, -1)
    values = quants.dequantize(raw, T[name]).astype(np.float32)
    assert values.shape == (ROWS, COLS)
    return {
        "rows": ROWS,
        "cols": COLS,
        "bytes": base64.b64encode(data).decode(),
        "values": base64.b64encode(values.astype("<f4").tobytes()).decode(),
    }


def main():
    rng = np.random.default_rng(20261205)
    out = {name: matrix(name, rng) for name in BLOCKS}
    path = pathlib.Path(__file__).with_name("quants.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
