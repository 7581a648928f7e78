#!/usr/bin/env python3
"""Writes tokenizer goldens for random text, the same fields as
make_tokenizer_goldens.py writes for the hand-picked corpus, so that the
tokenizers are compared token for token with HF `tokenizers` on text nobody
chose: every script, runs of spaces and digits, combining marks (NFC or
not), emoji sequences, special-token text, control characters and rare
planes. Read by common/tokenizer/tokenizer_golden_test.cc.

  /root/oracle-venv/bin/python tests/golden/make_random_tokenizer_goldens.py \
      --llama2 /work/shared/testdata/tokenizers/llama2/tokenizer.json \
      --qwen3 /work/shared/testdata/tokenizers/qwen3/tokenizer.json \
      --smollm2-gguf /root/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf

The texts come from a seeded generator (--seed, --count), so the files are
reproducible; common/tokenizer/tokenizer_fuzz_test.cc checks properties on
fresh random text each run, this checks exact ids on a fixed sample.
"""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_goldens import smollm2_oracle, write  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

WORDS = ["hello", "The", " world", "don't", "I'M", "we'll", "they'VE", "'s", "'t", "'re",
         "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<|endoftext|>", "<think>",
         "```", "\r\n", "\t", "http://x.y/z?a=1&b=2", "3.14159", "1,000,000", "==>",
         "naïve", "café", "straße", "ﬁ", "Å", "Ω", "ﾊﾝｶｸ"]
SPACES = [" ", " ", " ", "\n", "\t", "\r", "\u3000", "\u00a0", "\u2009"]
PUNCT = list("!\"#'().,:?`~") + ["\u2014", "\u2026", "\u201c", "\u201d", "\u3002", "\uff01",
                                  "\u00bf", "\u20ac", "\u2192", "\u221e"]
SCRIPTS = [(0x400, 0x4FF), (0x370, 0x3FF), (0x600, 0x6FF), (0x5D0, 0x5EA), (0x900, 0x97F),
           (0xE01, 0xE5B)]


# Letters and numbers assigned in Unicode 15.0-16.0 (CJK Extensions H and I,
# Egyptian Hieroglyphs Extended-A, Kaktovik numerals), which the regex engine
# must class as HF's Oniguruma does (common/tokenizer/gen_unicode_since_14.py).
RECENT = [(0x31350, 0x323AF), (0x2EBF0, 0x2EE5D), (0x13460, 0x143FA), (0x1D2C0, 0x1D2D3)]


def piece(r):
    k = r.randint(0, 16)
    ch = lambda lo, hi: chr(r.randint(lo, hi))  # noqa: E731
    if k == 0:
        return r.choice(WORDS)
    if k == 1:
        return "".join(ch(0x20, 0x7E) for _ in range(r.randint(1, 12)))
    if k == 2:
        return "".join(r.choice(SPACES) * r.randint(1, 40) for _ in range(r.randint(1, 6)))
    if k == 3:
        return "".join(ch(0x30, 0x39) for _ in range(r.randint(1, 30)))
    if k == 4:
        return "".join(ch(0x61, 0x7A) + "".join(ch(0x300, 0x36F) for _ in range(r.randint(0, 3)))
                       for _ in range(r.randint(1, 6)))
    if k == 5:
        return "".join(ch(0xC0, 0x24F) for _ in range(r.randint(1, 8)))
    if k == 6:
        return "".join(ch(0x4E00, 0x9FFF) for _ in range(r.randint(1, 10)))
    if k == 7:
        return "".join(r.choice([ch(0x3041, 0x30FF), ch(0xAC00, 0xD7A3), ch(0x1100, 0x11FF)])
                       for _ in range(r.randint(1, 8)))
    if k == 8:
        return "".join(ch(*r.choice(SCRIPTS)) for _ in range(r.randint(1, 10)))
    if k == 9:
        out = ""
        for _ in range(r.randint(1, 4)):
            out += ch(0x1F300, 0x1FAFF)
            out += ch(0x1F3FB, 0x1F3FF) if r.randint(0, 2) == 0 else ""
            out += "\ufe0f" if r.randint(0, 2) == 0 else ""
            out += "\u200d" if r.randint(0, 2) == 0 else ""
        return out
    if k == 10:
        return "".join(r.choice(PUNCT) for _ in range(r.randint(1, 8)))
    if k == 11:  # control characters, NUL included
        return "".join(r.choice([ch(0, 0x1F), "\x7f", ch(0x80, 0x9F)]) for _ in range(r.randint(1, 3)))
    if k == 12:
        out = ""
        for _ in range(r.randint(1, 4)):
            c = r.randint(0x80, 0x10FFFF)
            while 0xD800 <= c <= 0xDFFF:
                c = r.randint(0x80, 0x10FFFF)
            out += chr(c)
        return out
    if k == 13:
        return "".join(ch(0x61, 0x65) for _ in range(r.randint(20, 200)))
    if k == 14:
        return r.choice(["'", "\u2019"]) + "".join(
            r.choice([ch(0x61, 0x7A), ch(0x41, 0x5A)]) for _ in range(r.randint(1, 3)))
    if k == 15:
        return "\u2581"
    return "".join(chr(r.randint(*r.choice(RECENT))) for _ in range(r.randint(1, 3))) + r.choice(
        ["'t", "'S", ".c", "=p", "!", " x", "7", ""])


def corpus(seed, count):
    r = random.Random(seed)
    return ["".join(piece(r) for _ in range(r.randint(1, 24))) for _ in range(count)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama2", required=True, help="llama2 tokenizer.json")
    ap.add_argument("--qwen3", required=True, help="qwen3 tokenizer.json")
    ap.add_argument("--smollm2-gguf", help="SmolLM2 GGUF (optional)")
    ap.add_argument("--seed", type=int, default=20261125)
    ap.add_argument("--count", type=int, default=200)
    args = ap.parse_args()
    texts = corpus(args.seed, args.count)
    src = " (random text, seed %d, %d texts)" % (args.seed, args.count)
    me = "tests/golden/make_random_tokenizer_goldens.py"
    write("llama2_random_goldens.json", "llama2 tokenizer.json" + src,
          Tokenizer.from_file(args.llama2), texts, generator=me, indent=None)
    write("qwen3_random_goldens.json", "qwen3 tokenizer.json" + src,
          Tokenizer.from_file(args.qwen3), texts, generator=me, indent=None)
    if args.smollm2_gguf:
        write("smollm2_random_goldens.json",
              "SmolLM2-135M-Instruct GGUF, as in smollm2_goldens.json" + src,
              smollm2_oracle(args.smollm2_gguf), texts, generator=me, indent=None)


if __name__ == "__main__":
    main()
