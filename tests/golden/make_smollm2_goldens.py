#!/usr/bin/env python3
"""Golden data for the default model, SmolLM2-135M-Instruct in GGUF (Q4_1 weights, Q8_0
embeddings, tied lm_head), computed with Hugging Face transformers.

transformers loads the GGUF itself (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)):
it dequantizes every tensor to float32 and un-permutes the llama.cpp q/k row order, so the
reference below is an exact float32 forward of the dequantized weights (eager attention, CPU).
The tokenizer is also the one embedded in the GGUF.

Writes <out>/golden.json (see tests/golden/README.md); <out>/passage.txt is the input passage
(committed, tokenized verbatim: no BOS, no trailing newline).

    HF_HUB_OFFLINE=1 /root/oracle-venv/bin/python tests/golden/make_smollm2_goldens.py
"""

import argparse
import hashlib
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "smollm2")
DEFAULT_GGUF = "/root/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf"

CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
N_CHAT = 24  # greedy tokens


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def top5(logits):
    v, i = logits.topk(5)
    return dict(ids=i.tolist(), logits=[round(x, 5) for x in v.tolist()])


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output dir (default: tests/data/smollm2)")
    ap.add_argument("--gguf", default=DEFAULT_GGUF, help="path of SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--passage", default=None, help="passage text file (default: <out>/passage.txt)")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    versions = dict(torch=torch.__version__, transformers=transformers.__version__)
    print(f"torch {versions['torch']}  transformers {versions['transformers']}  python {sys.version.split()[0]}")

    gguf_dir, gguf_name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_dir, gguf_file=gguf_name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    print(f"loaded {gguf_name}: {model.config.num_hidden_layers} layers, vocab {model.config.vocab_size}")

    # ---- passage log-likelihood -------------------------------------------------------------
    passage_path = args.passage or os.path.join(args.out, "passage.txt")
    with open(passage_path, encoding="utf-8") as f:
        passage = f.read()
    ids = tok(passage, add_special_tokens=False).input_ids
    assert ids == tok(passage).input_ids, "tokenizer adds special tokens (expected add_bos_token=false)"
    assert ids[0] != tok.bos_token_id
    logits = model(torch.tensor([ids])).logits[0].float()  # [n, vocab]
    logp = torch.log_softmax(logits.double(), dim=-1)
    token_logprobs = logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    mean_logprob = token_logprobs.mean().item()
    print(f"passage: {len(ids)} tokens, mean log-prob of tokens 1..n-1 = {mean_logprob:.6f} "
          f"(ppl {torch.exp(-token_logprobs.mean()).item():.3f})")

    # ---- chat greedy -------------------------------------------------------------------------
    chat_ids = tok(CHAT_PROMPT, add_special_tokens=False).input_ids
    chat_logits = model(torch.tensor([chat_ids])).logits[0, -1].float()
    out = model.generate(
        torch.tensor([chat_ids]),
        attention_mask=torch.ones(1, len(chat_ids), dtype=torch.long),
        do_sample=False,
        max_new_tokens=N_CHAT,
        eos_token_id=None,  # exactly N_CHAT tokens, no stop at <|im_end|>
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
        return_dict_in_generate=True,
        output_logits=True,
    )
    chat_greedy = out.sequences[0, len(chat_ids):].tolist()
    assert len(chat_greedy) == N_CHAT
    margins = []
    for step, lg in enumerate(out.logits):
        t2 = lg[0].float().topk(2)
        assert t2.indices[0].item() == chat_greedy[step]
        margins.append((t2.values[0] - t2.values[1]).item())
    # the same path without KV cache
    full = model(torch.tensor([chat_ids + chat_greedy])).logits[0].float()
    assert full[len(chat_ids) - 1 : -1].argmax(-1).tolist() == chat_greedy
    eos = tok.eos_token_id
    first_eos = chat_greedy.index(eos) if eos in chat_greedy else None
    text = tok.decode(chat_greedy)
    print(f"chat greedy ({N_CHAT} tokens, min top1-top2 margin {min(margins):.4f}): {text!r}")

    golden = dict(
        torch=versions["torch"],
        transformers=versions["transformers"],
        model_file=gguf_name,
        model_sha256=sha256(args.gguf),
        reference="transformers float32 forward of the GGUF dequantized by transformers, attn_implementation=eager, CPU",
        passage_file="passage.txt",
        passage=passage,
        passage_ids=ids,
        n_tokens=len(ids),
        mean_logprob=mean_logprob,
        token_logprobs=[round(x, 6) for x in token_logprobs.tolist()],
        token_logprobs_note="token_logprobs[i] = log p(passage_ids[i+1] | passage_ids[0..i]), natural log; "
        "mean_logprob is their mean (n_tokens-1 values); no BOS is prepended",
        passage_last_logits_top5=top5(logits[-1]),
        chat_prompt=CHAT_PROMPT,
        chat_prompt_ids=chat_ids,
        chat_greedy=chat_greedy,
        chat_greedy_text=text,
        chat_greedy_first_eos_index=first_eos,
        chat_greedy_margins=[round(m, 4) for m in margins],
        chat_greedy_note=f"{N_CHAT} greedy tokens via model.generate(do_sample=False) with eos_token_id=None "
        f"(generation does not stop at <|im_end|>={eos}); chat_greedy_first_eos_index is where it would stop",
        last_logits_top5=top5(chat_logits),
        last_logits_note="top-5 (token id, logit) at the last position of chat_prompt_ids",
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.join(args.out, 'golden.json')}")


if __name__ == "__main__":
    main()
