#!/usr/bin/env python3
"""Golden data for the GGUF formats Tandem converts at load (common/converted_quant.h):
the k-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS and the 32-element Q5_0, Q5_1, IQ4_NL.

Random blocks (every bit pattern of the quants and packed sub-scales is legal) with
finite, realistic f16 scales, dequantized by gguf-py's numpy port of ggml's
dequantize_row_*. common/converted_quant_test.cc checks Tandem's reference dequantizer
against these values.

Writes <out>/<TYPE>.blocks (the raw blocks), <out>/<TYPE>.f32 (little-endian float32)
and <out>/VERSIONS. Needs only gguf and numpy:

    python3 -m venv /root/quant-venv && /root/quant-venv/bin/pip install gguf==0.19.0 numpy==2.4.6
    /root/quant-venv/bin/python tests/golden/make_converted_quant_goldens.py
"""

import argparse
import importlib.metadata
import os

import gguf
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "converted_quants")
N_VALUES = 2048  # 8 superblocks, 64 blocks of 32

# Byte offsets of the f16 scales inside each block (ggml-common.h):
# (offset of d, offset of the min or super-min, or None).
SCALE_FIELDS = {
    T.Q5_0: (0, None),  # d, qh[4], qs[16]
    T.Q5_1: (0, 2),     # d, m, qh[4], qs[16]
    T.IQ4_NL: (0, None),  # d, qs[16]
    T.Q2_K: (80, 82),   # scales[16], qs[64], d, dmin
    T.Q3_K: (108, None),  # hmask[32], qs[64], scales[12], d
    T.Q4_K: (0, 2),     # d, dmin, scales[12], qs[128]
    T.Q5_K: (0, 2),     # d, dmin, scales[12], qh[32], qs[128]
    T.Q6_K: (208, None),  # ql[128], qh[64], scales[16], d
    T.IQ4_XS: (0, None),  # d, scales_h, scales_l[4], qs[128]
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(20261125)
    for qtype, (d_off, m_off) in SCALE_FIELDS.items():
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        N_BLOCKS = N_VALUES // block_elems
        raw = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
        # Scales like a quantizer's (1e-5 .. 1e-2) of either sign, and one block with
        # d = 0; one min negative.
        d = rng.uniform(1e-5, 1e-2, size=N_BLOCKS) * rng.choice([-1.0, 1.0], size=N_BLOCKS)
        d[0] = 0.0
        raw[:, d_off:d_off + 2] = d.astype(np.float16).view(np.uint8).reshape(N_BLOCKS, 2)
        if m_off is not None:
            m = rng.uniform(1e-5, 1e-2, size=N_BLOCKS)
            m[1] = -m[1]
            raw[:, m_off:m_off + 2] = m.astype(np.float16).view(np.uint8).reshape(N_BLOCKS, 2)
        values = gguf.quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.size == N_VALUES and np.all(np.isfinite(values))
        raw.tofile(os.path.join(args.out, f"{qtype.name}.blocks"))
        values.astype("<f4").tofile(os.path.join(args.out, f"{qtype.name}.f32"))
        print(f"{qtype.name}: {N_BLOCKS} blocks, max |value| {np.abs(values).max():.4g}")
    with open(os.path.join(args.out, "VERSIONS"), "w") as f:
        f.write(f"gguf {importlib.metadata.version('gguf')}\n")
        f.write(f"numpy {np.__version__}\n")


if __name__ == "__main__":
    main()
