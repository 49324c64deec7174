"""Time real single-GPU training steps of GPT/Llama-shaped decoder-only transformers.

Usage:
    python train_steps.py OUTDIR [--budget SECONDS] [--device cuda|cpu] [--smoke]

Self-contained: needs only torch (plain PyTorch, no compile, no paraplan).  For each
configuration (model shape x micro-batch x numeric stack) it builds the model on the
device, warms up 3 steps, then times N steps (N chosen so timing lasts >= 2 s, 5..30)
with CUDA events around each step.  A step is zero_grad(set_to_none) + forward +
cross-entropy loss (logits upcast to fp32) + backward + AdamW step, with gradient
accumulation 1.  It also times forward+loss under no_grad and forward+backward without
the optimizer, so the optimizer's share is visible, and records peak CUDA memory.

Results go to OUTDIR/train_steps.json (rewritten atomically after every configuration,
so partial results survive a kill); progress lines are appended to OUTDIR/train_log.txt.
Each configuration runs in try/except: an OOM is recorded as "oom": true and the run
goes on.  No new configuration starts once the wall budget (default 150 s) would be
exceeded.  --smoke runs tiny shapes (2 layers, hidden 64, seq 64, vocab 256) to check the
code path, e.g. on --device cpu (perf_counter timing, no memory stats).
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# Shapes copied from src/paraplan/catalog/models/*.yaml.
KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")
CATALOG = {
    "gpt3-125m": (12, 768, 12, 12, 3072, 51200),
    "gpt3-350m": (24, 1024, 16, 16, 4096, 51200),
    "gpt3-760m": (24, 1536, 16, 16, 6144, 51200),
    "gpt3-1.3b": (24, 2048, 16, 16, 8192, 51200),
    "gpt3-2.7b": (32, 2560, 32, 32, 10240, 51200),
    "llama3-8b": (32, 4096, 32, 8, 14336, 128256),
}
GPT = {"mlp": "gelu", "norm": "layernorm", "tie_embeddings": True, "position_embedding": "learned"}
LLAMA = {"mlp": "swiglu", "norm": "rmsnorm", "tie_embeddings": False, "position_embedding": "rope"}
FLASH, EFF, MATH = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH
# stack -> (autocast dtype, parameter dtype, tf32 matmuls, plan dtype, SDPA backends to try in order)
STACKS = {
    "eager-amp": (torch.bfloat16, torch.float32, False, "bf16", [FLASH]),
    "eager-bf16": (None, torch.bfloat16, False, "bf16", [FLASH]),
    "eager-tf32": (None, torch.float32, True, "tf32", [EFF, MATH]),
}
GIB = 1024**3


def shape(dims, style, **override):
    return {**dict(zip(KEYS, dims, strict=True)), **style, **override}


def configs(smoke):
    """(catalog name, shape, stack, seq, micro-batch, note), most valuable first."""
    if smoke:
        tiny = "tiny smoke shape"
        gpt, llama = shape((2, 64, 4, 4, 256, 256), GPT), shape((2, 64, 4, 2, 192, 256), LLAMA)
        runs = [("smoke-gpt", gpt, st, 64, 2, tiny) for st in STACKS]
        return [*runs, ("smoke-llama", llama, "eager-amp", 64, 2, tiny)]
    runs = [("gpt3-125m", "eager-amp", 8), ("gpt3-350m", "eager-amp", 8)]
    runs += [("gpt3-760m", "eager-amp", 4), ("gpt3-1.3b", "eager-amp", 4)]
    runs += [("gpt3-2.7b", "eager-amp", 2), ("gpt3-350m", "eager-bf16", 8)]
    runs += [("gpt3-1.3b", "eager-bf16", 4), ("gpt3-350m", "eager-tf32", 8)]
    out = [(m, shape(CATALOG[m], GPT), st, 2048, mb, None) for m, st, mb in runs]
    llama = shape(CATALOG["llama3-8b"], LLAMA, layers=4)
    note = "llama3-8b shape with layers reduced 32 -> 4"
    return [*out, ("llama3-8b", llama, "eager-amp", 4096, 1, note)]


def rope_tables(seq, head_dim, base=500000.0):
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):  # x: (b, h, s, d); rotate-half convention
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).type_as(x)


def make_norm(c):
    return (nn.LayerNorm if c["norm"] == "layernorm" else nn.RMSNorm)(c["hidden"])


class Block(nn.Module):
    def __init__(self, c, gqa_native):
        super().__init__()
        self.h, self.kv, self.hd = c["heads"], c["kv_heads"], c["hidden"] // c["heads"]
        self.swiglu, self.gqa_native = c["mlp"] == "swiglu", gqa_native
        bias = c["norm"] == "layernorm"  # GPT/Megatron linears have biases, Llama's do not
        self.ln1, self.ln2 = make_norm(c), make_norm(c)
        self.qkv = nn.Linear(c["hidden"], (self.h + 2 * self.kv) * self.hd, bias=bias)
        self.proj = nn.Linear(self.h * self.hd, c["hidden"], bias=bias)
        self.fc = nn.Linear(c["hidden"], c["ffn_hidden"] * (2 if self.swiglu else 1), bias=bias)
        self.out = nn.Linear(c["ffn_hidden"], c["hidden"], bias=bias)

    def forward(self, x, rope):
        b, t, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, self.h + 2 * self.kv, self.hd).transpose(1, 2)
        q, k, v = qkv.split([self.h, self.kv, self.kv], dim=1)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        gqa = self.kv != self.h
        if gqa and not self.gqa_native:
            k, v = (z.repeat_interleave(self.h // self.kv, dim=1) for z in (k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=gqa and self.gqa_native
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, self.h * self.hd))
        h = self.fc(self.ln2(x))
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        return x + self.out(h)


class Decoder(nn.Module):
    def __init__(self, c, seq, gqa_native):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        learned = c["position_embedding"] == "learned"
        self.wpe = nn.Embedding(seq, c["hidden"]) if learned else None
        if not learned:  # rope
            cos, sin = rope_tables(seq, c["hidden"] // c["heads"])
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        self.blocks = nn.ModuleList(Block(c, gqa_native) for _ in range(c["layers"]))
        self.ln_f = make_norm(c)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        if c["tie_embeddings"]:
            self.lm_head.weight = self.wte.weight
        for m in self.modules():  # GPT-2 style init, so the loss starts near ln(vocab)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        rope = None if self.wpe is not None else (self.cos, self.sin)
        for blk in self.blocks:
            x = blk(x, rope)
        logits = self.lm_head(self.ln_f(x)).float()  # loss on fp32 logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def pick_sdpa(candidates, c, dtype, device):
    """First backend (and GQA mode) that runs fwd+bwd on these head shapes; None if none."""
    hd, gqa = c["hidden"] // c["heads"], c["kv_heads"] != c["heads"]
    for backend in candidates:
        for native in [True, False] if gqa else [False]:
            kv_heads = c["kv_heads"] if native else c["heads"]
            q = torch.randn(1, c["heads"], 128, hd, device=device, dtype=dtype)
            k, v = (torch.randn(1, kv_heads, 128, hd, device=device, dtype=dtype) for _ in "kv")
            try:
                with warnings.catch_warnings(), sdpa_kernel([backend]):
                    warnings.simplefilter("ignore")
                    q.requires_grad_(True)
                    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=native)
                    y.sum().backward()
                return backend, native
            except RuntimeError:
                continue
    return None, False


def time_calls(fn, n, cuda):
    """Per-call durations in seconds (CUDA events on GPU, perf_counter on CPU) and wall/call."""
    t0, times = time.perf_counter(), []
    if cuda:
        events = [[torch.cuda.Event(enable_timing=True) for _ in "ab"] for _ in range(n)]
        for a, b in events:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in events]
    else:
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return times, (time.perf_counter() - t0) / n


def measure(step, fwd_bwd, fwd_only, cuda, deadline):
    """Warm up 3 steps, time N steps, then forward-only and forward+backward (median each)."""
    warm = []
    for _ in range(3):
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        warm.append(time.perf_counter() - t)
    n = max(5, min(30, math.ceil(2.0 / max(warm[-1], 1e-9))))
    while n > 5 and time.perf_counter() + 1.7 * n * warm[-1] > deadline:  # 1.7: + extras
        n -= 1
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, wall = time_calls(step, n, cuda)
    med = statistics.median
    measured = {"step_time_s": med(times), "step_time_mean_s": statistics.mean(times)}
    measured |= {"step_time_min_s": min(times), "step_time_max_s": max(times)}
    if cuda:
        measured["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / GIB
        measured["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / GIB
    measured["forward_s"] = med(time_calls(fwd_only, max(3, n // 3), cuda)[0])
    measured["forward_backward_s"] = med(time_calls(fwd_bwd, max(3, n // 3), cuda)[0])
    measured["wall_per_step_s"] = wall
    return measured, n, warm


def run_config(catalog, c, stack_name, seq, mb, device, deadline):
    autocast, pdtype, tf32, plan_dtype, sdpa = STACKS[stack_name]
    cuda = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    act_dtype = autocast or pdtype
    backend, native = pick_sdpa(sdpa, c, act_dtype, device)
    if backend is None:  # requested kernels unavailable here: let any backend run, and say so
        backend, native = pick_sdpa([FLASH, EFF, MATH], c, act_dtype, device)
    torch.manual_seed(0)
    with torch.device(device):
        model = Decoder(c, seq, native).to(pdtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=cuda)
    tok = torch.randint(0, c["vocab"], (mb, seq + 1), device=device)
    x, y, last = tok[:, :-1], tok[:, 1:], {}

    def amp():
        return torch.autocast(device.type, dtype=autocast, enabled=autocast is not None)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        with amp():
            loss = model(x, y)
        loss.backward()
        last["loss"] = loss.detach()

    def step():
        fwd_bwd()
        opt.step()

    def fwd_only():
        with torch.no_grad(), amp():
            model(x, y)

    with sdpa_kernel([backend]):
        kinds = ("flash", "mem_efficient", "math", "cudnn")
        flags = {k: getattr(torch.backends.cuda, f"{k}_sdp_enabled")() for k in kinds}
        measured, n, warm = measure(step, fwd_bwd, fwd_only, cuda, deadline)
    gqa_mode = ("enable_gqa" if native else "repeat_kv") if c["kv_heads"] != c["heads"] else None
    stack = {
        "name": stack_name,
        "autocast": str(autocast).removeprefix("torch.") if autocast else None,
        "param_dtype": str(pdtype).removeprefix("torch."),
        "tf32_matmul": tf32,
        "optimizer": f"torch.optim.AdamW(fused={cuda}, lr=1e-4, weight_decay=0.1)",
        "loss": "cross_entropy on fp32 logits",
        "sdpa_backend": backend.name,
        "sdpa_requested": [b.name for b in sdpa],
        "sdpa_flags": flags,
        "gqa": gqa_mode,
        "torch": torch.__version__,
        "compile": False,
    }
    plan = {"gpus": 1, "tp": 1, "pp": 1, "dp": 1, "micro_batch": mb, "global_batch": mb}
    plan |= {"seq_length": seq, "recompute": "none", "zero": 0, "dtype": plan_dtype}
    plan["attention"] = "flash"
    return {
        "model": dict(c),
        "catalog_model": catalog,
        "plan": plan,
        "stack": stack,
        "measured": measured,
        "params": sum(p.numel() for p in model.parameters()),
        "steps_timed": n,
        "sanity": {"loss_last": last["loss"].item(), "warmup_s": warm},
    }


def provenance(device, args):
    p = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    p |= {"torch": torch.__version__, "cuda": torch.version.cuda}
    p |= {"python": platform.python_version(), "script": os.path.abspath(__file__)}
    p |= {"argv": sys.argv, "budget_s": args.budget, "smoke": args.smoke}
    if device.type != "cuda":
        return p | {"device": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    prop = torch.cuda.get_device_properties(device)
    p |= {"device": prop.name, "sm_count": prop.multi_processor_count}
    p |= {"total_memory_gib": prop.total_memory / GIB, "cudnn": torch.backends.cudnn.version()}
    query = "--query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version"
    try:
        smi = subprocess.run(
            ["nvidia-smi", query, "--format=csv"],
            capture_output=True,
            check=False,
            text=True,
            timeout=30,
        )
        p["nvidia_smi"] = (smi.stdout + smi.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        p["nvidia_smi"] = f"unavailable: {e}"
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=150.0, help="wall s; no config starts past it")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, quick code-path check")
    args = ap.parse_args()
    t_start = time.perf_counter()
    deadline = t_start + args.budget
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA not available; use --device cpu")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    os.makedirs(args.outdir, exist_ok=True)
    out_json = os.path.join(args.outdir, "train_steps.json")
    log_path = os.path.join(args.outdir, "train_log.txt")

    def log(msg):
        now = datetime.datetime.now(datetime.UTC)
        line = f"{now:%H:%M:%S} +{time.perf_counter() - t_start:6.1f}s {msg}"
        print(line, flush=True)
        with open(log_path, "a") as f:
            f.write(line + "\n")

    result = {"provenance": provenance(device, args), "records": []}
    records = result["records"]

    def flush():
        with open(out_json + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(out_json + ".tmp", out_json)

    flush()
    dev_name = result["provenance"]["device"]
    tag = "cpu" if not cuda else "h200" if "H200" in dev_name else slug(dev_name)
    log(f"start on {dev_name}, torch {torch.__version__}, budget {args.budget:.0f}s")
    last_dur = 0.0
    for catalog, c, stack, seq, mb, note in configs(args.smoke):
        label = catalog + (f"-{c['layers']}l" if note and "reduced" in note else "")
        name = f"{tag}-{label}-{stack}-s{seq}-mb{mb}"
        if time.perf_counter() + last_dur > deadline:  # predict from the previous config
            log(f"skip {name}: budget")
            records.append({"name": name, "catalog_model": catalog, "skipped": "budget"})
            flush()
            continue
        log(f"run  {name}")
        t0, err = time.perf_counter(), None
        try:
            rec = run_config(catalog, c, stack, seq, mb, device, deadline)
        except torch.OutOfMemoryError as e:
            err = {"oom": True, "error": str(e)[:400]}
        except Exception as e:  # noqa: BLE001 -- one bad config must not lose the rest
            err = {"error": f"{type(e).__name__}: {e}"[:400]}
        if err is not None:
            rec = {"model": dict(c), "catalog_model": catalog, "stack": {"name": stack}, **err}
            rec["plan"] = {"micro_batch": mb, "seq_length": seq}
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        last_dur = time.perf_counter() - t0
        rec = {"name": name, **rec, "config_wall_s": last_dur} | ({"note": note} if note else {})
        records.append(rec)
        flush()
        if m := rec.get("measured"):
            ms = {
                k: f"{m[k] * 1e3:.1f}" for k in ("step_time_s", "forward_s", "forward_backward_s")
            }
            status = f"step {ms['step_time_s']} ms (fwd {ms['forward_s']}, "
            status += f"fwd+bwd {ms['forward_backward_s']}) n={rec['steps_timed']} "
            status += f"sdpa={rec['stack']['sdpa_backend']}"
        else:
            status = f"FAILED {err}"
        log(f"done {name}: {status} [{last_dur:.1f}s]")
    n_ok = sum("measured" in r for r in records)
    log(f"end: {n_ok}/{len(records)} measured -> {out_json}")


def slug(text):
    return "".join(ch if ch.isalnum() else "_" for ch in text.lower())


if __name__ == "__main__":
    main()
