"""Time real single-GPU training steps of Hugging Face `transformers` causal LMs, Trainer-style.

Usage:
    python hf_steps.py OUTDIR [--budget SECONDS] [--device cuda|cpu] [--smoke]

Needs torch and transformers (no paraplan).  Each configuration builds a model from a config
(`AutoModelForCausalLM.from_config`, random weights, `attn_implementation="sdpa"`) with the
published shape of a Hub model, and runs the step `transformers.Trainer` runs by default
(transformers 4.x/5.x `Trainer.training_step` + `_inner_training_loop`): forward under
`torch.autocast(bfloat16)` with fp32 parameters (``bf16=True``) or in fp32 (no mixed
precision), the model's own loss (`labels=input_ids`: logits upcast to fp32, shifted
cross-entropy), backward, `clip_grad_norm_(max_norm=1.0)` (the default ``max_grad_norm``),
`AdamW(fused=True)` (``optim="adamw_torch_fused"``), a linear LR-scheduler step and
`zero_grad(set_to_none=True)`.  One GPU; gradient accumulation 1 except where a run says (``--suite extra``).  Timing, warm-up, memory and
output files follow `train_steps.py` (OUTDIR/train_steps.json, OUTDIR/train_log.txt); each
record also holds `hf_config` (the config that ran, as `config.to_dict()` writes it), which
paraplan reads as a Hub config.

These timings are held-out validation data for the `hf-transformers` framework profile: never
fit targets.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import NamedTuple

import torch
import transformers

import train_steps as ts

# Published shapes (the models' config.json on the Hub), built with random weights.
HF_SHAPES = {
    "gpt2": (
        "GPT2Config",
        dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    ),
    "llama3.2-1b": (
        "LlamaConfig",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            vocab_size=128256,
            tie_word_embeddings=True,
            max_position_embeddings=8192,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
        ),
    ),
    "qwen3-0.6b": (
        "Qwen3Config",
        dict(
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
            max_position_embeddings=8192,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
        ),
    ),
    "llama3-8b-4l": (
        "LlamaConfig",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=4,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=128256,
            tie_word_embeddings=False,
            max_position_embeddings=8192,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
        ),
    ),
}
HF_SHAPES["qwen3-1.7b"] = (
    "Qwen3Config",
    {**HF_SHAPES["qwen3-0.6b"][1], "hidden_size": 2048, "intermediate_size": 6144},
)
HF_SHAPES["smollm2-360m"] = (
    "LlamaConfig",
    dict(
        hidden_size=960,
        intermediate_size=2560,
        num_hidden_layers=32,
        num_attention_heads=15,
        num_key_value_heads=5,
        head_dim=64,
        vocab_size=49152,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
    ),
)
SMOKE = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 128}


class HfRun(NamedTuple):
    model: str
    seq: int
    mb: int
    amp: bool = True  # Trainer bf16=True: autocast bf16, fp32 parameters
    checkpointing: bool = False  # model.gradient_checkpointing_enable()
    accum: int = 1  # Trainer gradient_accumulation_steps (loss / accum, one optimizer step)
    repeat: bool = False  # a repeat of a base run (run-to-run spread)
    overrides: tuple = ()  # (config key, value) pairs changed from the published shape
    tag: str = ""  # name suffix of an ablation


RUNS = (
    HfRun("gpt2", 1024, 16),
    HfRun("llama3.2-1b", 2048, 4),
    HfRun("qwen3-0.6b", 2048, 4),
    HfRun("llama3-8b-4l", 4096, 1),
    HfRun("llama3.2-1b", 2048, 8, checkpointing=True),
    HfRun("gpt2", 1024, 8, amp=False),
)
# --suite extra: other shapes and Trainer settings, then repeats of two base runs (run-to-run spread).
EXTRA = (
    HfRun("smollm2-360m", 2048, 8),
    HfRun("qwen3-1.7b", 2048, 2),
    HfRun("gpt2", 1024, 8, accum=4),
    HfRun("llama3.2-1b", 4096, 2),
    HfRun("qwen3-0.6b", 2048, 8, checkpointing=True),
    HfRun("gpt2", 1024, 16, repeat=True),
    HfRun("llama3.2-1b", 2048, 4, repeat=True),
)


# --suite ablation: GPT-2 124M (the base run) with one stack detail changed at a time, to attribute
# its step time: vocabulary padded to a multiple of 64, no dropout, the fused tanh-GELU kernel
# instead of transformers' composite `gelu_new`, and all three.
NO_DROPOUT = (("resid_pdrop", 0.0), ("embd_pdrop", 0.0), ("attn_pdrop", 0.0))
FUSED_GELU = (("activation_function", "gelu_pytorch_tanh"),)
PADDED = (("vocab_size", 50304),)
ABLATION = (
    HfRun("gpt2", 1024, 16, tag="base"),
    HfRun("gpt2", 1024, 16, overrides=PADDED, tag="vocab50304"),
    HfRun("gpt2", 1024, 16, overrides=NO_DROPOUT, tag="nodropout"),
    HfRun("gpt2", 1024, 16, overrides=FUSED_GELU, tag="fusedgelu"),
    HfRun("gpt2", 1024, 16, overrides=PADDED + NO_DROPOUT + FUSED_GELU, tag="all3"),
)


def hf_config(run, smoke):
    kind, fields = HF_SHAPES[run.model]
    fields = {**fields, **dict(run.overrides)}
    if smoke:
        kind, fields = "GPT2Config", {**SMOKE, **dict(run.overrides)}
    cfg = getattr(transformers, kind)(**fields)
    cfg.use_cache = False
    return cfg


def build(run, device, smoke):
    cfg = hf_config(run, smoke)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.train()
    if run.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0, fused=cuda)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: max(0.0, 1.0 - i / 10_000))
    return cfg, model, opt, sched


def step_fns(run, cfg, model, opt, sched, device):
    seq = min(run.seq, getattr(cfg, "n_positions", run.seq))
    tok = torch.randint(0, cfg.vocab_size, (run.accum, run.mb, seq), device=device)
    last = {}

    def forward(i=0):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.amp):
            return model(input_ids=tok[i], labels=tok[i]).loss

    def fwd_bwd():
        for i in range(run.accum):
            loss = forward(i)
            (loss / run.accum if run.accum > 1 else loss).backward()
        last["loss"] = loss.detach()

    def step():
        fwd_bwd()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        model.zero_grad(set_to_none=True)

    def fwd_only():
        with torch.no_grad():
            for i in range(run.accum):
                forward(i)

    def fwd_bwd_clean():
        fwd_bwd()
        model.zero_grad(set_to_none=True)

    return step, fwd_bwd_clean, fwd_only, last, seq


def record(run, device, deadline, smoke):
    cfg, model, opt, sched = build(run, device, smoke)
    step, fwd_bwd, fwd_only, last, seq = step_fns(run, cfg, model, opt, sched, device)
    cuda = device.type == "cuda"
    measured, n, warm = ts.measure(step, fwd_bwd, fwd_only, cuda, deadline)
    sdpa = {
        k: getattr(torch.backends.cuda, f"{k}_sdp_enabled")()
        for k in ("flash", "mem_efficient", "math", "cudnn")
    }
    plan = {"gpus": 1, "tp": 1, "pp": 1, "dp": 1, "micro_batch": run.mb}
    plan["global_batch"] = run.mb * run.accum
    plan |= {"seq_length": seq, "recompute": "full" if run.checkpointing else "none", "zero": 0}
    plan |= {"dtype": "bf16" if run.amp else "fp32", "attention": "flash"}
    stack = {
        "name": "hf-trainer-amp" if run.amp else "hf-trainer-fp32",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "autocast": "bfloat16" if run.amp else None,
        "param_dtype": "float32",
        "tf32_matmul": False,
        "attn_implementation": "sdpa",
        "sdpa_enabled": sdpa,
        "loss": "model(labels=input_ids): transformers ForCausalLMLoss (fp32 logits)",
        "clip_grad_norm": 1.0,
        "optimizer": "torch.optim.AdamW(fused=True, lr=5e-5, weight_decay=0.0) + LambdaLR",
        "gradient_checkpointing": run.checkpointing,
        "grad_accum": run.accum,
        "compile": False,
    }
    return {
        "hf_config": cfg.to_dict(),
        "catalog_model": run.model,
        "plan": plan,
        "stack": stack,
        "measured": measured,
        "params": sum(p.numel() for p in model.parameters()),
        "steps_timed": n,
        "sanity": {"loss_last": last["loss"].item(), "warmup_s": warm},
    }


def run_all(runs, device, deadline, out, smoke):
    tag = out.result["provenance"]["device_short"]
    last_dur = 0.0
    for run in runs:
        name = f"{tag}-hf-{run.model}-{'amp' if run.amp else 'fp32'}-s{run.seq}-mb{run.mb}"
        name += f"-gb{run.mb * run.accum}" if run.accum > 1 else ""
        name += "-ckpt" if run.checkpointing else ""
        name += "-repeat" if run.repeat else ""
        name += f"-ablation-{run.tag}" if run.tag else ""
        if time.perf_counter() + last_dur > deadline:
            out.log(f"skip {name}: budget")
            out.add({"name": name, "catalog_model": run.model, "skipped": "budget"})
            continue
        out.log(f"run  {name}")
        t0 = time.perf_counter()
        err = None
        try:
            rec = record(run, device, deadline, smoke)
        except torch.OutOfMemoryError as e:
            err = {"oom": True, "error": str(e)[:400]}
        except Exception as e:  # noqa: BLE001 -- one bad config must not lose the rest
            err = {"error": f"{type(e).__name__}: {e}"[:400]}
        if err is not None:
            rec = {"catalog_model": run.model, **err}
        last_dur = time.perf_counter() - t0
        out.add({"name": name, **rec, "config_wall_s": last_dur})
        m = rec.get("measured")
        status = f"step {m['step_time_s'] * 1e3:.1f} ms" if m else f"FAILED {err}"
        out.log(f"done {name}: {status} [{last_dur:.1f}s]")
        torch.cuda.empty_cache() if device.type == "cuda" else None


def main():
    args = ts.script_args(__doc__, ("base", "extra", "ablation"))
    t_start = time.perf_counter()
    device = torch.device(args.device)
    prov = (
        ts.provenance(device, args)
        | {"script": os.path.abspath(__file__)}
        | {"transformers": transformers.__version__}
    )
    out = ts.Recorder(args.outdir, {"provenance": prov, "records": []}, t_start)
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    out.log(f"start on {prov['device']}, transformers {transformers.__version__}")
    runs = {"base": RUNS, "extra": EXTRA, "ablation": ABLATION}[args.suite]
    runs = runs[:2] if args.smoke else runs
    run_all(runs, device, t_start + args.budget, out, args.smoke)


if __name__ == "__main__":
    main()
