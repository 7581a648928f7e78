#!/usr/bin/env python3
"""Writes the tokenizer goldens used by common/tokenizer/tokenizer_golden_test.cc.

Oracle: Hugging Face `tokenizers` (the Rust library behind transformers' fast
tokenizers), run from a virtual environment, e.g.

  /root/oracle-venv/bin/python tests/golden/make_tokenizer_goldens.py \
      --llama2 /work/shared/testdata/tokenizers/llama2/tokenizer.json \
      --qwen3 /work/shared/testdata/tokenizers/qwen3/tokenizer.json \
      --smollm2-gguf /root/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf

For every text of tests/data/tokenizers/corpus.json and every model it stores
  ids                  encode(text, add_special_tokens=True)   special tokens parsed
  ids_no_add           encode(text, add_special_tokens=False)
  ids_plain            as `ids`, but special tokens encoded as text
                       (Tokenizer.encode_special_tokens = True)
  decoded              decode(ids, skip_special_tokens=False)
  decoded_skip_special decode(ids, skip_special_tokens=True)
  roundtrip            decode(ids_no_add) == text

SmolLM2 oracle. The GGUF has no tokenizer.json, only vocab, merges, token types
and tokenizer.ggml.pre = "smollm". We rebuild the tokenizer that HF publishes
with the model (HuggingFaceTB/SmolLM2-135M-Instruct tokenizer.json):
  model BPE(vocab, merges) without byte fallback or unk,
  pre_tokenizer Sequence[Digits(individual_digits=True),
                         ByteLevel(add_prefix_space=False, use_regex=True)],
  decoder ByteLevel, added special tokens = GGUF token_type 3 (control).
This is also what llama.cpp does for pre "smollm": regexes "\\p{N}" then the
GPT-2 regex. transformers' GGUF converter (AutoTokenizer(gguf_file=...)) drops
the Digits step (its pre_tokenizer is plain ByteLevel); the script encodes the
corpus with it as well and records every text where the two disagree under
"transformers_gguf_disagreements", so the choice is visible. We follow the
published tokenizer.json / llama.cpp, since that is what the model was
trained with.
"""

import argparse
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer, AddedToken, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "data", "tokenizers"))


def versions():
    v = {"python": sys.version.split()[0], "tokenizers": tokenizers.__version__}
    try:
        import transformers
        v["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import gguf  # noqa: F401
        from importlib.metadata import version
        v["gguf"] = version("gguf")
    except Exception:  # pragma: no cover - optional
        pass
    return v


def encode_cases(tok, corpus):
    cases = []
    for text in corpus:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=True).ids
        ids_no_add = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        ids_plain = tok.encode(text, add_special_tokens=True).ids
        tok.encode_special_tokens = False
        cases.append({
            "text": text,
            "ids": ids,
            "ids_no_add": ids_no_add,
            "ids_plain": ids_plain,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            "roundtrip": tok.decode(ids_no_add, skip_special_tokens=False) == text,
        })
    return cases


def read_gguf_tokenizer(path):
    from gguf import GGUFReader
    r = GGUFReader(path)

    def arr(key):
        f = r.fields[key]
        return [f.parts[i] for i in f.data]

    def scalar(key):
        f = r.fields[key]
        return f.parts[f.data[0]]

    tokens = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
    merges = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.merges")]
    types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
    pre = bytes(scalar("tokenizer.ggml.pre")).decode("utf-8")
    return tokens, merges, types, pre


def smollm2_oracle(gguf_path):
    tokens, merges, types, pre = read_gguf_tokenizer(gguf_path)
    assert pre == "smollm", pre
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab, pairs, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types) if ty == 3
    ])
    return tok


def transformers_gguf_tokenizer(gguf_path):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    d, f = os.path.split(gguf_path)
    return AutoTokenizer.from_pretrained(d, gguf_file=f).backend_tokenizer


def write(name, source, tok, corpus, extra=None, generator="tests/golden/make_tokenizer_goldens.py",
          indent=1):
    doc = {
        "generator": generator,
        "versions": versions(),
        "source": source,
        "cases": encode_cases(tok, corpus),
    }
    if extra:
        doc.update(extra)
    out = os.path.join(DATA, name)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False, indent=indent)
        fh.write("\n")
    print(f"wrote {out}: {len(doc['cases'])} cases")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama2", required=True, help="llama2 tokenizer.json")
    ap.add_argument("--qwen3", required=True, help="qwen3 tokenizer.json")
    ap.add_argument("--smollm2-gguf", help="SmolLM2 GGUF (optional)")
    args = ap.parse_args()

    with open(os.path.join(DATA, "corpus.json"), encoding="utf-8") as fh:
        corpus = json.load(fh)

    write("llama2_goldens.json", "llama2 tokenizer.json", Tokenizer.from_file(args.llama2), corpus)
    write("qwen3_goldens.json", "qwen3 tokenizer.json", Tokenizer.from_file(args.qwen3), corpus)

    if args.smollm2_gguf:
        tok = smollm2_oracle(args.smollm2_gguf)
        extra = {}
        tf = transformers_gguf_tokenizer(args.smollm2_gguf)
        if tf is not None:
            diffs = []
            for text in corpus:
                a = tok.encode(text, add_special_tokens=False).ids
                b = tf.encode(text, add_special_tokens=False).ids
                if a != b:
                    diffs.append({"text": text, "published": a, "transformers_gguf": b})
            extra["transformers_gguf_disagreements"] = diffs
            print(f"smollm2: transformers' GGUF converter disagrees on {len(diffs)} texts")
        write("smollm2_goldens.json",
              "SmolLM2-135M-Instruct GGUF vocab+merges with the published pre-tokenizer "
              "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, "
              "use_regex=True)], decoder ByteLevel, token_type 3 as special tokens",
              tok, corpus, extra)


if __name__ == "__main__":
    main()
