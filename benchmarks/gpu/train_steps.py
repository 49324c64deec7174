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
from torch import nn
import torch.nn.functional as F
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


def shape(dims, style, **override):
    return {**dict(zip(KEYS, dims, strict=True)), **style, **override}


def configs(smoke):
    """(catalog name, shape, stack, seq, micro-batch, note) in the order they should run."""
    if smoke:
        tiny = "tiny smoke shape"
        gpt, llama = shape((2, 64, 4, 4, 256, 256), GPT), shape((2, 64, 4, 2, 192, 256), LLAMA)
        return [("smoke-gpt", gpt, st, 64, 2, tiny) for st in STACKS] + [
            ("smoke-llama", llama, "eager-amp", 64, 2, tiny)
        ]
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


class Block(nn.Module):
    def __init__(self, c, gqa_native):
        super().__init__()
        self.h, self.kv, self.hd = c["heads"], c["kv_heads"], c["hidden"] // c["heads"]
        self.swiglu, self.gqa_native = c["mlp"] == "swiglu", gqa_native
        norm = nn.LayerNorm if c["norm"] == "layernorm" else nn.RMSNorm
        bias = c["norm"] == "layernorm"  # GPT/Megatron linears have biases, Llama's do not
        self.ln1, self.ln2 = norm(c["hidden"]), norm(c["hidden"])
        self.qkv = nn.Linear(c["hidden"], (self.h + 2 * self.kv) * self.hd, bias=bias)
        self.proj = nn.Linear(self.h * self.hd, c["hidden"], bias=bias)
        self.fc = nn.Linear(c["hidden"], c["ffn_hidden"] * (2 if self.swiglu else 1), bias=bias)
        self.out = nn.Linear(c["ffn_hidden"], c["hidden"], bias=bias)

    def forward(self, x, rope):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(
            [self.h * self.hd, self.kv * self.hd, self.kv * self.hd], -1
        )
        q, k, v = (z.view(b, t, -1, self.hd).transpose(1, 2) for z in (q, k, v))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.kv != self.h and not self.gqa_native:
            k, v = (z.repeat_interleave(self.h // self.kv, dim=1) for z in (k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.kv != self.h and self.gqa_native
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, self.h * self.hd))
        h = self.fc(self.ln2(x))
        h = (
            F.silu(h[..., : h.shape[-1] // 2]) * h[..., h.shape[-1] // 2 :]
            if self.swiglu
            else F.gelu(h)
        )
        return x + self.out(h)


class Decoder(nn.Module):
    def __init__(self, c, seq, gqa_native):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        self.wpe = nn.Embedding(seq, c["hidden"]) if c["position_embedding"] == "learned" else None
        if c["position_embedding"] == "rope":
            cos, sin = rope_tables(seq, c["hidden"] // c["heads"])
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        self.blocks = nn.ModuleList(Block(c, gqa_native) for _ in range(c["layers"]))
        self.ln_f = (nn.LayerNorm if c["norm"] == "layernorm" else nn.RMSNorm)(c["hidden"])
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
        rope = (self.cos, self.sin) if self.wpe is None else None
        for blk in self.blocks:
            x = blk(x, rope)
        logits = self.lm_head(self.ln_f(x)).float()  # loss on fp32 logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def pick_sdpa(candidates, c, dtype, device):
    """First backend (and GQA mode) that runs fwd+bwd on these head shapes; None if none."""
    hd, gqa = c["hidden"] // c["heads"], c["kv_heads"] != c["heads"]
    for backend in candidates:
        for native in [True, False] if gqa else [False]:
            try:
                q = torch.randn(
                    1, c["heads"], 128, hd, device=device, dtype=dtype, requires_grad=True
                )
                kv_h = c["kv_heads"] if native else c["heads"]
                k, v = (torch.randn(1, kv_h, 128, hd, device=device, dtype=dtype) for _ in "kv")
                with warnings.catch_warnings(), sdpa_kernel([backend]):
                    warnings.simplefilter("ignore")
                    F.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=native
                    ).sum().backward()
                return backend, native
            except RuntimeError:
                continue
    return None, False


def time_calls(fn, n, cuda):
    """Per-call durations in seconds (CUDA events on GPU, perf_counter on CPU) and wall/call."""
    t0 = time.perf_counter()
    if cuda:
        ev = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(n)
        ]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in ev]
    else:
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return times, (time.perf_counter() - t0) / n


def run_config(catalog, c, stack_name, seq, mb, device, deadline):
    st, cuda = STACKS[stack_name], device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = st["tf32"]
    torch.backends.cudnn.allow_tf32 = st["tf32"]
    act_dtype = st["autocast"] or st["param"]
    backend, native = pick_sdpa(st["sdpa"], c, act_dtype, device)
    if backend is None:  # requested kernels unavailable here: let any backend run, and say so
        backend, native = pick_sdpa(FALLBACK_SDPA, c, act_dtype, device)
    torch.manual_seed(0)
    with torch.device(device):
        model = Decoder(c, seq, native).to(st["param"])
    fused = cuda
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=fused)
    tok = torch.randint(0, c["vocab"], (mb, seq + 1), device=device)
    x, y = tok[:, :-1], tok[:, 1:]

    def amp():
        return torch.autocast(device.type, st["autocast"], enabled=st["autocast"] is not None)

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    last = {}

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
        flags = {
            k: getattr(torch.backends.cuda, f"{k}_sdp_enabled")()
            for k in ("flash", "mem_efficient", "math", "cudnn")
        }
        warm = []
        for _ in range(3):
            t = time.perf_counter()
            step()
            sync()
            warm.append(time.perf_counter() - t)
        est = warm[-1]
        n = max(5, min(30, math.ceil(2.0 / max(est, 1e-9))))
        while n > 5 and time.perf_counter() + 1.7 * n * est > deadline:  # step + fwd/bwd extras
            n -= 1
        if cuda:
            sync()
            torch.cuda.reset_peak_memory_stats()
        times, wall = time_calls(step, n, cuda)
        mem = {}
        if cuda:
            gib = 1024**3
            mem = {
                "peak_allocated_gib": torch.cuda.max_memory_allocated() / gib,
                "peak_reserved_gib": torch.cuda.max_memory_reserved() / gib,
            }
        n_aux = max(3, n // 3)
        fwd, _ = time_calls(fwd_only, n_aux, cuda)
        fb, _ = time_calls(fwd_bwd, n_aux, cuda)
    measured = {
        "step_time_s": statistics.median(times),
        "step_time_mean_s": statistics.mean(times),
        "step_time_min_s": min(times),
        "step_time_max_s": max(times),
        "forward_s": statistics.median(fwd),
        "forward_backward_s": statistics.median(fb),
        **mem,
        "wall_per_step_s": wall,
    }
    stack = {
        "name": stack_name,
        "autocast": str(st["autocast"]).replace("torch.", "") if st["autocast"] else None,
        "param_dtype": str(st["param"]).replace("torch.", ""),
        "tf32_matmul": st["tf32"],
        "optimizer": f"torch.optim.AdamW(fused={fused})",
        "loss": "cross_entropy on fp32 logits",
        "sdpa_backend": backend.name,
        "sdpa_requested": [b.name for b in st["sdpa"]],
        "sdpa_flags": flags,
        "gqa": ("enable_gqa" if native else "repeat_kv") if c["kv_heads"] != c["heads"] else None,
        "torch": torch.__version__,
        "compile": False,
    }
    plan = {
        "gpus": 1,
        "tp": 1,
        "pp": 1,
        "dp": 1,
        "micro_batch": mb,
        "global_batch": mb,
        "seq_length": seq,
        "recompute": "none",
        "zero": 0,
        "dtype": st["dtype"],
        "attention": "flash",
    }
    rec = {
        "model": dict(c),
        "catalog_model": catalog,
        "plan": plan,
        "stack": stack,
        "measured": measured,
        "params": sum(p.numel() for p in model.parameters()),
        "steps_timed": n,
        "sanity": {"loss_last": last["loss"].item(), "warmup_s": warm},
    }
    return rec


def provenance(device, args):
    p = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "script": os.path.abspath(__file__),
        "argv": sys.argv,
        "budget_s": args.budget,
        "smoke": args.smoke,
    }
    if device.type == "cuda":
        prop = torch.cuda.get_device_properties(device)
        p.update(
            device=prop.name,
            sm_count=prop.multi_processor_count,
            total_memory_gib=prop.total_memory / 1024**3,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            p["nvidia_smi"] = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,power.limit,clocks.max.sm,clocks.max.mem,driver_version",
                    "--format=csv",
                ],
                capture_output=True,
                check=False,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            p["nvidia_smi"] = f"unavailable: {e}"
    else:
        p.update(device=platform.processor() or platform.machine(), cpu_count=os.cpu_count())
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument(
        "--budget", type=float, default=150.0, help="wall seconds; no config starts past it"
    )
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, quick code-path check")
    args = ap.parse_args()
    t_start = time.perf_counter()
    deadline = t_start + args.budget
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA not available; use --device cpu")
    device = torch.device(args.device)
    os.makedirs(args.outdir, exist_ok=True)
    out_json, log_path = (
        os.path.join(args.outdir, "train_steps.json"),
        os.path.join(args.outdir, "train_log.txt"),
    )

    def log(msg):
        line = f"{datetime.datetime.now(datetime.UTC):%H:%M:%S} +{time.perf_counter() - t_start:6.1f}s {msg}"
        print(line, flush=True)
        with open(log_path, "a") as f:
            f.write(line + "\n")

    result = {"provenance": provenance(device, args), "records": []}

    def flush():
        tmp = out_json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, out_json)

    flush()
    tag = (
        "cpu"
        if device.type == "cpu"
        else (
            "h200"
            if "H200" in result["provenance"]["device"]
            else result["provenance"]["device"].lower().replace(" ", "_")
        )
    )
    log(
        f"start on {result['provenance']['device']}, torch {torch.__version__}, budget {args.budget:.0f}s"
    )
    last_dur = 0.0
    for catalog, c, stack, seq, mb, note in configs(args.smoke):
        label = catalog + (f"-{c['layers']}l" if note and "reduced" in note else "")
        name = f"{tag}-{label}-{stack}-s{seq}-mb{mb}"
        if time.perf_counter() + last_dur > deadline:
            log(f"skip {name}: budget")
            result["records"].append({"name": name, "catalog_model": catalog, "skipped": "budget"})
            flush()
            continue
        log(f"run  {name}")
        t0, err = time.perf_counter(), None
        try:
            rec = run_config(catalog, c, stack, seq, mb, device, deadline)
        except torch.OutOfMemoryError as e:
            err = {"oom": True, "error": str(e)[:400]}
        except Exception as e:  # noqa: BLE001 -- record and go on: one bad config must not lose the rest
            err = {"error": f"{type(e).__name__}: {e}"[:400]}
        if err is not None:
            rec = {
                "model": dict(c),
                "catalog_model": catalog,
                "plan": {"micro_batch": mb, "seq_length": seq},
                "stack": {"name": stack},
                **err,
            }
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        last_dur = time.perf_counter() - t0
        rec = {"name": name, **rec, "config_wall_s": last_dur}
        if note:
            rec["note"] = note
        result["records"].append(rec)
        flush()
        m = rec.get("measured")
        log(
            f"done {name}: "
            + (
                f"step {m['step_time_s'] * 1e3:.1f} ms (fwd {m['forward_s'] * 1e3:.1f}, "
                f"fwd+bwd {m['forward_backward_s'] * 1e3:.1f}) n={rec['steps_timed']} "
                f"sdpa={rec['stack']['sdpa_backend']}"
                if m
                else f"FAILED {err}"
            )
            + f" [{last_dur:.1f}s]"
        )
    log(
        f"end: {sum('measured' in r for r in result['records'])}/{len(result['records'])} measured -> {out_json}"
    )


if __name__ == "__main__":
    main()
