"""Writes a small Mixtral-architecture checkpoint with random weights and a
real tokenizer (the Llama-2 vocabulary from tests/data) and chat template,
so that `tandem serve` can run text and chat requests on an MoE model whose
experts are split between the gpu_worker and the cpu_worker.

usage: make_random_moe.py TESTDATA_DIR OUT_DIR [SEED]
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

HIDDEN, INTER, LAYERS, EXPERTS, TOP_K = 128, 256, 2, 8, 2
HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4, 2, 32, 32000


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def main():
    testdata, out = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1234
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)

    def w(*shape, scale=None):
        scale = scale or 1.0 / np.sqrt(shape[-1])
        return rng.standard_normal(shape).astype(np.float32) * scale

    t = {"model.embed_tokens.weight": w(VOCAB, HIDDEN, scale=1.0),
         "lm_head.weight": w(VOCAB, HIDDEN, scale=0.5),
         "model.norm.weight": np.ones(HIDDEN, np.float32)}
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "self_attn.q_proj.weight"] = w(HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = w(KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = w(KV_HEADS * HEAD_DIM, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = w(HIDDEN, HEADS * HEAD_DIM)
        t[p + "block_sparse_moe.gate.weight"] = w(EXPERTS, HIDDEN)
        for e in range(EXPERTS):
            q = f"{p}block_sparse_moe.experts.{e}."
            t[q + "w1.weight"] = w(INTER, HIDDEN)
            t[q + "w3.weight"] = w(INTER, HIDDEN)
            t[q + "w2.weight"] = w(HIDDEN, INTER)
    write_safetensors(os.path.join(out, "model.safetensors"), t)

    config = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "num_local_experts": EXPERTS, "num_experts_per_tok": TOP_K, "vocab_size": VOCAB,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 1,
        "eos_token_id": 2, "sliding_window": None, "torch_dtype": "float32",
    }
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=1)
    tok = os.path.join(testdata, "tokenizers", "llama2")
    shutil.copy(os.path.join(tok, "tokenizer.json"), out)
    tc = json.load(open(os.path.join(tok, "tokenizer_config.json")))
    tc["chat_template"] = open(os.path.join(testdata, "chat_templates", "templates",
                                            "mixtral.jinja")).read()
    json.dump(tc, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
