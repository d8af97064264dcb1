#!/usr/bin/env python3
"""Writes assets/dequant_reference.json: random GGUF blocks of each quantized type pagoda
reads and what the `gguf` package's `gguf.quants.dequantize` makes of them, as f32 bit
patterns. tests/model_dequantize.rs checks pagoda's CPU dequantization against it bit for
bit. Needs `pip install gguf numpy`; the output is committed, so tests need neither."""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# Byte offsets of each block's f16 scale fields: random bytes there could be NaN or Inf.
TYPES = {
    "q8_0": (T.Q8_0, [0]),
    "q4_0": (T.Q4_0, [0]),
    "q4_1": (T.Q4_1, [0, 2]),
    "q5_0": (T.Q5_0, [0]),
    "q5_1": (T.Q5_1, [0, 2]),
    "iq4_nl": (T.IQ4_NL, [0]),
    "q4_k": (T.Q4_K, [0, 2]),
    "q5_k": (T.Q5_K, [0, 2]),
    "q6_k": (T.Q6_K, [208]),
    "q2_k": (T.Q2_K, [80, 82]),
    "q3_k": (T.Q3_K, [108]),
    "iq4_xs": (T.IQ4_XS, [0]),
    "mxfp4": (T.MXFP4, []),
}
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "iq4_nl": 18,
               "q4_k": 144, "q5_k": 176, "q6_k": 210, "q2_k": 84, "q3_k": 110, "iq4_xs": 136, "mxfp4": 17}
BLOCKS = 4
# MXFP4's E8M0 scale byte: its edges (ggml's subnormal halves at 0 and 1, 2^127 at 255) and
# scales that keep the weights ordinary, in blocks after the random ones.
MXFP4_SCALES = [0, 1, 2, 126, 127, 128, 200, 254, 255]


def main():
    rng = np.random.default_rng(20261201)
    out = {}
    for name, (qtype, scale_offsets) in TYPES.items():
        size = BLOCK_BYTES[name]
        blocks = rng.integers(0, 256, size=(BLOCKS, size), dtype=np.uint8)
        for offset in scale_offsets:
            scales = (rng.uniform(0.001, 0.2, size=BLOCKS) * rng.choice([-1, 1], size=BLOCKS)).astype(np.float16)
            blocks[:, offset:offset + 2] = scales.view(np.uint8).reshape(BLOCKS, 2)
        if name == "mxfp4":
            edges = rng.integers(0, 256, size=(len(MXFP4_SCALES), size), dtype=np.uint8)
            edges[:, 0] = MXFP4_SCALES
            blocks = np.concatenate([blocks, edges])
        values = dequantize(blocks.reshape(-1), qtype).astype(np.float32).reshape(-1)
        out[name] = {"bytes": blocks.reshape(-1).tobytes().hex(), "f32_bits": values.view(np.uint32).tolist()}
    path = pathlib.Path(__file__).resolve().parent.parent / "assets" / "dequant_reference.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
