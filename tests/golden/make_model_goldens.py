#!/usr/bin/env python3
"""Build tiny random checkpoints with Hugging Face transformers' own model classes
and record golden logits / greedy continuations for the Tandem C++ engine tests.

For every architecture in ARCHS and every dtype in (f32, bf16) this writes
    <out>/<arch>_<dtype>/config.json, generation_config.json,
                         model.safetensors  (or model-0000X-of-0000N.safetensors + model.safetensors.index.json)
                         golden.json, logits.bin  (+ logits_hf_bf16.bin for bf16 checkpoints)
See tests/golden/README.md for the file formats and the tolerances the C++ tests apply.

Everything is deterministic (fixed seeds, single CPU thread).  Run with the oracle venv:
    HF_HUB_OFFLINE=1 /root/oracle-venv/bin/python tests/golden/make_model_goldens.py
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "models")

VOCAB = 256
N_NEW = 16  # greedy tokens per prompt
# Acceptance thresholds for a seed (see README): the greedy path and the MoE routing must not be
# near-ties, so that the C++ bf16 path (bf16 GEMMs, f32 accumulation) reproduces them exactly.
MIN_GREEDY_MARGIN = 0.25  # smallest top1 - top2 logit gap along every greedy path
MIN_ROUTER_GAP = 0.10  # smallest gap between the k-th and (k+1)-th router logit, every token/layer
MAX_ATTEMPTS = 200

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
)

# rope: transformers 5.x spells it `rope_parameters` (rope_theta + rope_type [+ scaling keys]);
# the legacy `rope_theta` / `rope_scaling` kwargs are converted into it.  save_pretrained writes
# `rope_parameters` into config.json.
ARCHS = {
    "llama": dict(
        config_cls=LlamaConfig,
        model_cls=LlamaForCausalLM,
        config=dict(
            COMMON,
            head_dim=16,
            intermediate_size=96,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
        ),
        # third prompt (+16 generated) goes well past original_max_position_embeddings=64
        prompt_lens=[5, 11, 90],
        seed=1000,
    ),
    "qwen2": dict(
        config_cls=Qwen2Config,
        model_cls=Qwen2ForCausalLM,
        config=dict(
            COMMON,
            intermediate_size=96,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            eos_token_id=3,
        ),  # q/k/v bias=True is hard-wired in Qwen2
        prompt_lens=[5, 11, 40],
        seed=2000,
    ),
    "mixtral": dict(
        config_cls=MixtralConfig,
        model_cls=MixtralForCausalLM,
        config=dict(
            COMMON,
            head_dim=16,
            intermediate_size=32,  # per-expert FFN size in Mixtral
            num_local_experts=4,
            num_experts_per_tok=2,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
        prompt_lens=[5, 11, 40],
        max_shard_size="200KB",  # -> several shards + model.safetensors.index.json
        seed=3000,
    ),
    "qwen2_moe": dict(
        config_cls=Qwen2MoeConfig,
        model_cls=Qwen2MoeForCausalLM,
        config=dict(
            COMMON,
            num_hidden_layers=3,
            mlp_only_layers=[1],  # layer 1 is a dense MLP (intermediate_size)
            intermediate_size=96,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            qkv_bias=True,
        ),
        prompt_lens=[5, 11, 40],
        seed=4000,
    ),
    "qwen3_moe": dict(
        config_cls=Qwen3MoeConfig,
        model_cls=Qwen3MoeForCausalLM,
        config=dict(
            COMMON,
            # like Qwen3-30B-A3B, head_dim * n_heads != hidden_size (4*32 = 128 vs 64)
            head_dim=32,
            intermediate_size=96,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
        prompt_lens=[5, 11, 40],
        seed=5000,
    ),
    "olmoe": dict(
        config_cls=OlmoeConfig,
        model_cls=OlmoeForCausalLM,
        config=dict(
            COMMON,
            intermediate_size=32,  # per-expert FFN size in OLMoE
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            pad_token_id=1,
        ),
        prompt_lens=[5, 11, 40],
        seed=6000,
    ),
}

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


# ----------------------------------------------------------------------------------------------
# weights
# ----------------------------------------------------------------------------------------------
DEFAULT_GAINS = dict(
    embed=1.0,  # std of embedding rows (tied: also the lm_head)
    lm_head=8.0,  # lm_head std * sqrt(hidden): ~ logit std for a unit-rms final hidden state
    final_norm=1.0,  # mean of model.norm.weight
    qk=1.6,  # q_proj / k_proj: makes attention clearly non-uniform
    out=1.0,  # o_proj and (all) down_proj: size of each block's contribution to the residual
    router=3.0,  # router logits std for a unit-rms input
)


def init_weights(model, seed, gains):
    """Overwrite every parameter with scaled random values so that logits have a spread of
    several units, attention is not uniform and routing is decisive."""
    g = torch.Generator().manual_seed(seed)
    gains = dict(DEFAULT_GAINS, **gains)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied lm_head is not listed separately
            shape = tuple(p.shape)
            fan_in = shape[-1]
            if name.endswith("embed_tokens.weight"):
                v = normal(shape, gains["embed"])
            elif name == "lm_head.weight":
                v = normal(shape, gains["lm_head"] / np.sqrt(fan_in))
            elif name == "model.norm.weight":
                v = normal(shape, 0.1 * gains["final_norm"], mean=gains["final_norm"])
            elif "norm" in name:  # input/post-attention RMSNorm, q_norm/k_norm
                v = normal(shape, 0.1, mean=1.0)
            elif name.endswith(".bias"):
                v = normal(shape, 0.3)
            elif name.endswith("mlp.gate.weight"):  # router [n_experts, hidden]
                v = normal(shape, gains["router"] / np.sqrt(fan_in))
            elif name.endswith("shared_expert_gate.weight"):  # [1, hidden]
                v = normal(shape, 1.0 / np.sqrt(fan_in))
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                v = normal(shape, gains["qk"] / np.sqrt(fan_in))
            elif name.endswith(("o_proj.weight", "down_proj.weight", "down_proj")):
                # down_proj: dense MLP [H,I], shared expert [H,I], fused experts [E,H,I]
                v = normal(shape, gains["out"] / np.sqrt(fan_in))
            elif p.dim() >= 2:  # v_proj, gate/up proj, fused experts.gate_up_proj [E,2I,H]
                v = normal(shape, 1.0 / np.sqrt(fan_in))
            else:
                raise RuntimeError(f"unhandled parameter {name} {shape}")
            p.copy_(v)


def build_and_save(arch, spec, dtype_name, seed, path):
    cfg = spec["config_cls"](**spec["config"])
    torch.manual_seed(seed)
    model = spec["model_cls"](cfg).float().eval()
    init_weights(model, seed, spec.get("gains", {}))
    if dtype_name == "bf16":
        # weights are created in f32 and rounded to bf16; the checkpoint is stored in bf16
        model = model.to(torch.bfloat16)
    model.config.dtype = DTYPES[dtype_name]
    kw = {}
    if "max_shard_size" in spec:
        kw["max_shard_size"] = spec["max_shard_size"]
    model.save_pretrained(path, **kw)
    return model


def load(path, dtype):
    m = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    m.generation_config.eos_token_id = None  # never stop early: exactly N_NEW tokens
    m.generation_config.pad_token_id = 0
    return m


# ----------------------------------------------------------------------------------------------
# goldens
# ----------------------------------------------------------------------------------------------
def make_prompts(lens, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lens]


def router_hooks(model, gaps):
    k = getattr(model.config, "num_experts_per_tok", None)
    hs = []
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("TopKRouter"):

            def hook(mod, inp, out, name=name):
                logits = out[0].float()
                s = logits.sort(dim=-1, descending=True).values
                gaps.append((s[:, k - 1] - s[:, k]).min().item())

            hs.append(mod.register_forward_hook(hook))
    return hs


@torch.no_grad()
def forward_logits(model, prompts):
    return [model(torch.tensor([p])).logits[0].float() for p in prompts]


@torch.no_grad()
def greedy(model, prompt):
    out = model.generate(
        torch.tensor([prompt]),
        do_sample=False,
        max_new_tokens=N_NEW,
        min_new_tokens=0,
        eos_token_id=None,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
    )
    cont = out.sequences[0, len(prompt):].tolist()
    assert len(cont) == N_NEW, cont
    margin = float("inf")
    for step, lg in enumerate(out.logits):
        lg = lg[0].float()
        top2 = lg.topk(2)
        assert top2.indices[0].item() == cont[step]
        margin = min(margin, (top2.values[0] - top2.values[1]).item())
    return cont, margin


@torch.no_grad()
def evaluate(path, dtype_name, prompts):
    """Reference = float32 forward (eager attention / eager experts) of the saved checkpoint.
    For bf16 checkpoints the bf16 weights are upcast to f32 on load."""
    ref = load(path, torch.float32)
    logits = forward_logits(ref, prompts)
    greedy_out = []
    for p in prompts:
        cont, margin = greedy(ref, p)
        greedy_out.append(dict(prompt=p, continuation=cont, min_margin=margin))
    # consistency: full (no-cache) forward over prompt+continuation gives the same argmax path;
    # this forward also covers every position the greedy path visits for the router-gap check.
    gaps = []
    hs = router_hooks(ref, gaps)
    full_margin = float("inf")
    for gobj in greedy_out:
        seq = gobj["prompt"] + gobj["continuation"]
        lg = ref(torch.tensor([seq])).logits[0].float()
        n = len(gobj["prompt"])
        pred = lg[n - 1 : -1].argmax(-1).tolist()
        assert pred == gobj["continuation"], (pred, gobj["continuation"])
        t2 = lg[n - 1 : -1].topk(2, dim=-1).values
        full_margin = min(full_margin, (t2[:, 0] - t2[:, 1]).min().item())
    for h in hs:
        h.remove()
    res = dict(
        logits=logits,
        greedy=greedy_out,
        min_margin=min(min(g["min_margin"] for g in greedy_out), full_margin),
        router_min_gap=min(gaps) if gaps else None,
    )
    if dtype_name == "bf16":
        hf = load(path, torch.bfloat16)
        res["hf_bf16_logits"] = forward_logits(hf, prompts)
        res["hf_bf16_greedy"] = [greedy(hf, p)[0] for p in prompts]
        res["hf_bf16_max_rel_err"] = max(
            ((a - b).abs().max() / b.abs().max()).item() for a, b in zip(res["hf_bf16_logits"], logits)
        )
    return res


def acceptable(res, dtype_name):
    ok = res["min_margin"] >= MIN_GREEDY_MARGIN
    if res["router_min_gap"] is not None:
        ok = ok and res["router_min_gap"] >= MIN_ROUTER_GAP
    if dtype_name == "bf16":
        ok = ok and res["hf_bf16_greedy"] == [g["continuation"] for g in res["greedy"]]
    return ok


def write_logits(path, logits):
    arr = np.concatenate([l.numpy().astype("<f4") for l in logits], axis=0)
    arr.tofile(path)


def tensor_listing(path):
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        with safe_open(os.path.join(path, f), "pt") as s:
            for k in s.keys():
                t = s.get_slice(k)
                out[k] = dict(file=f, dtype=str(t.get_dtype()), shape=list(t.get_shape()))
    return out


@torch.no_grad()
def llama3_rope_effect(path, prompts):
    """Max |logit difference| if the llama3 rope scaling were ignored (sanity: it must matter)."""
    ref = load(path, torch.float32)
    cfg = json.load(open(os.path.join(path, "config.json")))
    cfg["rope_parameters"] = dict(rope_type="default", rope_theta=cfg["rope_parameters"]["rope_theta"])
    plain_cfg = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "transformers_version")})
    plain = LlamaForCausalLM._from_config(plain_cfg, attn_implementation="eager").eval()
    plain.load_state_dict(ref.state_dict())
    out = []
    for p in prompts:
        a = ref(torch.tensor([p])).logits[0]
        b = plain(torch.tensor([p])).logits[0]
        out.append(round((a - b).abs().max().item(), 4))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output dir (default: tests/data/models)")
    ap.add_argument("--only", nargs="*", help="subset of <arch>_<dtype> names to (re)build")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    versions = dict(torch=torch.__version__, transformers=transformers.__version__)
    print(f"torch {versions['torch']}  transformers {versions['transformers']}  python {sys.version.split()[0]}")
    os.makedirs(args.out, exist_ok=True)

    summary = {}
    for arch, spec in ARCHS.items():
        prompts = make_prompts(spec["prompt_lens"], seed=spec["seed"] + 7)
        for di, dtype_name in enumerate(DTYPES):
            name = f"{arch}_{dtype_name}"
            if args.only and name not in args.only:
                continue
            final = os.path.join(args.out, name)
            best = None
            for attempt in range(MAX_ATTEMPTS):
                seed = spec["seed"] + 100 * di + attempt
                tmp = tempfile.mkdtemp(prefix=name + ".", dir=args.out)
                build_and_save(arch, spec, dtype_name, seed, tmp)
                res = evaluate(tmp, dtype_name, prompts)
                ok = acceptable(res, dtype_name)
                print(
                    f"  {name} seed {seed}: min_margin {res['min_margin']:.4f} router_gap {res['router_min_gap']}"
                    + (f" hf_bf16_same_greedy {res['hf_bf16_greedy'] == [g['continuation'] for g in res['greedy']]}" if dtype_name == "bf16" else "")
                    + (" ACCEPT" if ok else ""),
                    flush=True,
                )
                if ok:
                    best = (seed, tmp, res)
                    break
                shutil.rmtree(tmp)
            if best is None:
                raise SystemExit(f"{name}: no acceptable seed in {MAX_ATTEMPTS} attempts")
            seed, tmp, res = best
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
            os.chmod(final, 0o755)

            write_logits(os.path.join(final, "logits.bin"), res["logits"])
            golden = dict(
                arch=arch,
                dtype=dtype_name,
                torch=versions["torch"],
                transformers=versions["transformers"],
                seed=seed,
                reference=(
                    "float32 forward of this checkpoint"
                    + (" (bf16 weights upcast to f32)" if dtype_name == "bf16" else "")
                    + ", attn_implementation=eager, experts_implementation=eager, CPU"
                ),
                prompts=prompts,
                logits_file="logits.bin",
                logits_dtype="float32-le",
                logits_shape=[[len(p), VOCAB] for p in prompts],
                greedy=res["greedy"],
                min_margin=res["min_margin"],
                router_min_gap=res["router_min_gap"],
            )
            if dtype_name == "bf16":
                write_logits(os.path.join(final, "logits_hf_bf16.bin"), res["hf_bf16_logits"])
                golden["hf_bf16_logits_file"] = "logits_hf_bf16.bin"
                golden["hf_bf16_note"] = (
                    "informational: HF forward entirely in bfloat16 (dtype=torch.bfloat16); "
                    "same shapes as logits_file"
                )
                golden["hf_bf16_max_rel_err"] = res["hf_bf16_max_rel_err"]
                golden["hf_bf16_greedy"] = res["hf_bf16_greedy"]
            if arch == "llama":
                golden["llama3_rope_effect_max_abs_logit_diff"] = llama3_rope_effect(final, prompts)
            with open(os.path.join(final, "golden.json"), "w") as f:
                json.dump(golden, f, indent=1)
                f.write("\n")
            listing = tensor_listing(final)
            size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final))
            summary[name] = dict(
                seed=seed,
                min_margin=round(res["min_margin"], 4),
                router_min_gap=None if res["router_min_gap"] is None else round(res["router_min_gap"], 4),
                hf_bf16_max_rel_err=res.get("hf_bf16_max_rel_err"),
                bytes=size,
                files=sorted(os.listdir(final)),
                n_tensors=len(listing),
            )
            print(f"{name}: {json.dumps(summary[name])}", flush=True)

    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"total size of {args.out}: {total} bytes")


if __name__ == "__main__":
    main()
