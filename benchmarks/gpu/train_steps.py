"""Time real single-GPU training steps of GPT/Llama-shaped decoder-only transformers.

Usage:
    python train_steps.py OUTDIR [--budget SECONDS] [--device cuda|cpu] [--smoke]
                                 [--suite base|extended] [--pack FILE.tar.gz]

Self-contained: needs only torch (plain PyTorch, no paraplan).  For each configuration
(model shape x micro-batch x numeric stack) it builds the model on the device, warms up 3
steps, then times N steps (N chosen so timing lasts >= 2 s, 5..30) with CUDA events
around each step.  A step is zero_grad(set_to_none) + forward + cross-entropy loss (logits
upcast to fp32) + backward + AdamW step, with gradient accumulation 1.  It also times
forward+loss under no_grad and forward+backward without the optimizer, so the optimizer's
share is visible, and records peak CUDA memory.

--suite base (default) runs the configurations above; --suite extended runs them, then
regimes an analytical model must price: full activation recomputation
(torch.utils.checkpoint around every block), long sequences (8k/16k tokens), gradient
accumulation (4 micro-batches per optimizer step, the whole accumulation step is timed)
and, last because compiling is slow, torch.compile(mode="default") of the whole model
(compilation happens in the warm-up, whose wall time is recorded separately).

Results go to OUTDIR/train_steps.json (rewritten atomically after every configuration,
so partial results survive a kill); progress lines are appended to OUTDIR/train_log.txt.
Each configuration runs in try/except: an OOM is recorded as "oom": true, any other
failure (a failed compile included) as "error", and the run goes on.  No new
configuration starts once the wall budget (default 150 s) would be exceeded, predicted
from the previous configuration's wall time (a first compile is guessed at
COMPILE_GUESS_S unless --smoke).  --smoke runs tiny shapes (2 layers, hidden 64, vocab
256, seq 64 or 1/32 of the long ones) to check the code path, e.g. on --device cpu
(perf_counter timing, no memory stats).  --pack FILE.tar.gz tars+gzips OUTDIR into FILE at the end
(also on SIGTERM).
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

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
# Extended suite, all eager-amp: (catalog model, seq, micro-batch, options), compile last.
EXTENDED = (
    ("gpt3-1.3b", 2048, 4, {"recompute": True}),
    ("gpt3-2.7b", 2048, 2, {"recompute": True}),
    ("gpt3-1.3b", 8192, 1, {}),
    ("llama3-8b", 16384, 1, {}),
    ("gpt3-760m", 2048, 4, {"accum": 4}),
    ("gpt3-350m", 2048, 8, {"compile": True}),
    ("gpt3-1.3b", 2048, 4, {"compile": True}),
)
COMPILE_GUESS_S = 60.0  # predicted wall of a first torch.compile configuration (budget check)
LLAMA_LAYERS, LLAMA_NOTE = 4, "llama3-8b shape with layers reduced 32 -> 4"
SMOKE_NOTE = "tiny smoke shape"
GIB = 1024**3


class Run(NamedTuple):
    catalog: str
    c: dict
    stack: str
    seq: int
    mb: int
    note: str | None = None
    recompute: bool = False  # torch.utils.checkpoint around every block
    compile: bool = False  # torch.compile(model, mode="default")
    accum: int = 1  # micro-batches per optimizer step


def shape(dims, style, **override):
    return {**dict(zip(KEYS, dims, strict=True)), **style, **override}


TINY_GPT = shape((2, 64, 4, 4, 256, 256), GPT)
TINY_LLAMA = shape((2, 64, 4, 2, 192, 256), LLAMA)


def base_configs(smoke):
    """Runs of the base suite, most valuable first."""
    if smoke:
        runs = [Run("smoke-gpt", TINY_GPT, st, 64, 2, SMOKE_NOTE) for st in STACKS]
        return [*runs, Run("smoke-llama", TINY_LLAMA, "eager-amp", 64, 2, SMOKE_NOTE)]
    runs = [("gpt3-125m", "eager-amp", 8), ("gpt3-350m", "eager-amp", 8)]
    runs += [("gpt3-760m", "eager-amp", 4), ("gpt3-1.3b", "eager-amp", 4)]
    runs += [("gpt3-2.7b", "eager-amp", 2), ("gpt3-350m", "eager-bf16", 8)]
    runs += [("gpt3-1.3b", "eager-bf16", 4), ("gpt3-350m", "eager-tf32", 8)]
    out = [Run(m, shape(CATALOG[m], GPT), st, 2048, mb) for m, st, mb in runs]
    llama = shape(CATALOG["llama3-8b"], LLAMA, layers=LLAMA_LAYERS)
    return [*out, Run("llama3-8b", llama, "eager-amp", 4096, 1, LLAMA_NOTE)]


def extended_configs(smoke):
    """EXTENDED as runs; in smoke mode on the tiny shapes with sequences scaled down 32x."""
    out = []
    for catalog, seq, mb, opts in EXTENDED:
        llama = catalog.startswith("llama")
        if smoke:
            c, name = (TINY_LLAMA, "smoke-llama") if llama else (TINY_GPT, "smoke-gpt")
            out.append(Run(name, c, "eager-amp", seq // 32, mb, SMOKE_NOTE, **opts))
        elif llama:
            c = shape(CATALOG[catalog], LLAMA, layers=LLAMA_LAYERS)
            out.append(Run(catalog, c, "eager-amp", seq, mb, LLAMA_NOTE, **opts))
        else:
            out.append(Run(catalog, shape(CATALOG[catalog], GPT), "eager-amp", seq, mb, **opts))
    return out


def configs(smoke, suite):
    return base_configs(smoke) + (extended_configs(smoke) if suite == "extended" else [])


def run_name(run, tag):
    label = run.catalog + (f"-{run.c['layers']}l" if run.note == LLAMA_NOTE else "")
    name = f"{tag}-{label}-{run.stack}-s{run.seq}-mb{run.mb}"
    name += f"-gb{run.mb * run.accum}" if run.accum > 1 else ""
    return name + ("-recompute" if run.recompute else "") + ("-compile" if run.compile else "")


def short_device(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA A100-SXM4-80GB' -> 'a100'; else a slug."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t not in ("", "nvidia", "amd")]
    for t in tokens:
        if re.fullmatch(r"[a-z]+\d+[a-z]*", t) and not t.startswith(("hbm", "sxm", "pcie")):
            return t
    return "_".join(tokens) or "gpu"


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
    def __init__(self, c, seq, gqa_native, recompute=False):
        super().__init__()
        self.recompute = recompute  # full recomputation: keep only each block's input
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
            if self.recompute and torch.is_grad_enabled():
                x = checkpoint(blk, x, rope, use_reentrant=False)
            else:
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


def warm_up(step, cuda, n=3):
    """Wall seconds of n warm-up steps (a torch.compile model compiles in the first)."""
    warm = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        warm.append(time.perf_counter() - t)
    return warm


def measure(step, fwd_bwd, fwd_only, cuda, deadline):
    """Warm up 3 steps, time N steps, then forward-only and forward+backward (median each)."""
    warm = warm_up(step, cuda)
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
    extra = max(3, n // 3)
    measured["forward_s"] = med(time_calls(fwd_only, extra, cuda)[0]) if fwd_only else None
    measured["forward_backward_s"] = med(time_calls(fwd_bwd, extra, cuda)[0])
    measured["wall_per_step_s"] = wall
    measured["warmup_wall_s"] = sum(warm)
    return measured, n, warm


def build(run, device):
    """Model (params in the stack's dtype), AdamW, and the SDPA backend / GQA mode that run."""
    autocast, pdtype, tf32, _, sdpa = STACKS[run.stack]
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    act_dtype = autocast or pdtype
    backend, native = pick_sdpa(sdpa, run.c, act_dtype, device)
    if backend is None:  # requested kernels unavailable here: let any backend run, and say so
        backend, native = pick_sdpa([FLASH, EFF, MATH], run.c, act_dtype, device)
    torch.manual_seed(0)
    with torch.device(device):
        model = Decoder(run.c, run.seq, native, run.recompute).to(pdtype)
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=cuda)
    return model, opt, backend, native


def step_fns(run, model, opt, device):
    """step = zero_grad + accum x (forward + loss/accum + backward) + AdamW step; fwd_bwd
    without the optimizer; fwd_only (None when compiled: a no-grad forward would compile a
    third graph); last holds the last micro-batch's loss."""
    autocast = STACKS[run.stack][0]
    fwd = torch.compile(model, mode="default") if run.compile else model
    tok = torch.randint(0, run.c["vocab"], (run.accum, run.mb, run.seq + 1), device=device)
    x, y, last = tok[..., :-1], tok[..., 1:], {}

    def amp():
        return torch.autocast(device.type, dtype=autocast, enabled=autocast is not None)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        for i in range(run.accum):
            with amp():
                loss = fwd(x[i], y[i])
            (loss / run.accum if run.accum > 1 else loss).backward()
        last["loss"] = loss.detach()

    def step():
        fwd_bwd()
        opt.step()

    def fwd_only():
        with torch.no_grad(), amp():
            for i in range(run.accum):
                fwd(x[i], y[i])

    return step, fwd_bwd, None if run.compile else fwd_only, last


def plan_of(run):
    """paraplan-style 1-GPU plan of a run."""
    plan = {"gpus": 1, "tp": 1, "pp": 1, "dp": 1, "micro_batch": run.mb}
    plan |= {"global_batch": run.mb * run.accum, "seq_length": run.seq}
    plan |= {"recompute": "full" if run.recompute else "none", "zero": 0}
    return plan | {"dtype": STACKS[run.stack][3], "attention": "flash"}


def stack_of(run, backend, native, flags, cuda):
    autocast, pdtype, tf32, _, sdpa = STACKS[run.stack]
    gqa = run.c["kv_heads"] != run.c["heads"]
    return {
        "name": run.stack,
        "autocast": str(autocast).removeprefix("torch.") if autocast else None,
        "param_dtype": str(pdtype).removeprefix("torch."),
        "tf32_matmul": tf32,
        "optimizer": f"torch.optim.AdamW(fused={cuda}, lr=1e-4, weight_decay=0.1)",
        "loss": "cross_entropy on fp32 logits",
        "sdpa_backend": backend.name,
        "sdpa_requested": [b.name for b in sdpa],
        "sdpa_flags": flags,
        "gqa": ("enable_gqa" if native else "repeat_kv") if gqa else None,
        "torch": torch.__version__,
        "compile": run.compile,
        "compile_mode": "default" if run.compile else None,
        "recompute": "torch.utils.checkpoint(use_reentrant=False)" if run.recompute else None,
        "grad_accum": run.accum,
    }


def run_config(run, device, deadline):
    model, opt, backend, native = build(run, device)
    step, fwd_bwd, fwd_only, last = step_fns(run, model, opt, device)
    cuda = device.type == "cuda"
    with sdpa_kernel([backend]):
        kinds = ("flash", "mem_efficient", "math", "cudnn")
        flags = {k: getattr(torch.backends.cuda, f"{k}_sdp_enabled")() for k in kinds}
        measured, n, warm = measure(step, fwd_bwd, fwd_only, cuda, deadline)
    if run.compile:  # first step's excess over a compiled step ~ compile time
        measured["compile_s"] = warm[0] - measured["step_time_s"]
    return {
        "model": dict(run.c),
        "catalog_model": run.catalog,
        "plan": plan_of(run),
        "stack": stack_of(run, backend, native, flags, cuda),
        "measured": measured,
        "params": sum(p.numel() for p in model.parameters()),
        "steps_timed": n,
        "sanity": {"loss_last": last["loss"].item(), "warmup_s": warm},
    }


# Kineto, torch.profiler's GPU tracer, leaves CUPTI attached to the process after a profiling session
# unless the environment has TEARDOWN_CUPTI=1 when the session ends (pytorch/kineto
# libkineto/src/CuptiActivityApi.cpp cuptiTearDown_, unchanged up to kineto HEAD of 2026-08-20;
# pytorch/pytorch#144455; #146604: training "slowed down by roughly 10-20% even after completion").
# Host-bound timings taken after a profiled call in the same process then run slower than before
# it. The scripts that count kernels with torch.profiler call this before their first session and
# record, with each timing, how many sessions preceded it (PROFILER_SESSIONS). torch.compile with
# CUDA graphs sets TEARDOWN_CUPTI=0 for the rest of the process (torch/__init__.py,
# _TorchCompileInductorWrapper), so each record also carries the value in force.
PROFILER_SESSIONS = [0]


def cupti_teardown_default():
    """Ask Kineto to finalize CUPTI at the end of every profiling session (TEARDOWN_CUPTI=1) unless
    the caller's environment says otherwise; returns the value in force."""
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    return os.environ["TEARDOWN_CUPTI"]


def profiler_state():
    """What a host-bound timing depends on beyond the host: torch.profiler sessions run earlier in
    this process and the TEARDOWN_CUPTI value in force."""
    return {
        "profiler_sessions_before": PROFILER_SESSIONS[0],
        "teardown_cupti": os.environ.get("TEARDOWN_CUPTI"),
    }


def provenance(device, args):
    p = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    p |= {"torch": torch.__version__, "cuda": torch.version.cuda}
    p |= {"python": platform.python_version(), "script": os.path.abspath(__file__)}
    p |= {"argv": sys.argv, "budget_s": args.budget, "smoke": args.smoke, "suite": args.suite}
    p |= {"teardown_cupti_env": os.environ.get("TEARDOWN_CUPTI")}
    if device.type != "cuda":
        cpu = platform.processor() or platform.machine()
        return p | {"device": cpu, "device_short": "cpu", "cpus": os.cpu_count()}
    prop = torch.cuda.get_device_properties(device)
    name = torch.cuda.get_device_name(device)
    p |= {"device": name, "device_short": short_device(name)}
    p |= {"sm_count": prop.multi_processor_count, "total_memory_gib": prop.total_memory / GIB}
    p |= {"cudnn": torch.backends.cudnn.version()}
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


class Recorder:
    """OUTDIR/train_steps.json (rewritten atomically) and OUTDIR/train_log.txt."""

    def __init__(self, outdir, result, t_start):
        os.makedirs(outdir, exist_ok=True)
        self.json = os.path.join(outdir, "train_steps.json")
        self.log_path = os.path.join(outdir, "train_log.txt")
        self.result, self.t_start = result, t_start
        self.flush()

    def log(self, msg):
        now = datetime.datetime.now(datetime.UTC)
        line = f"{now:%H:%M:%S} +{time.perf_counter() - self.t_start:6.1f}s {msg}"
        print(line, flush=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    def add(self, record):
        self.result["records"].append(record)
        self.flush()

    def flush(self):
        with open(self.json + ".tmp", "w") as f:
            json.dump(self.result, f, indent=1)
        os.replace(self.json + ".tmp", self.json)


def run_one(run, device, deadline):
    """(record, error or None) of one configuration; never raises for a failed run."""
    err = None
    try:
        rec = run_config(run, device, deadline)
    except torch.OutOfMemoryError as e:
        err = {"oom": True, "error": str(e)[:400]}
    except Exception as e:  # noqa: BLE001 -- one bad config (or compile) must not lose the rest
        err = {"error": f"{type(e).__name__}: {e}"[:400]}
    if err is not None:
        stack = {"name": run.stack, "compile": run.compile, "grad_accum": run.accum}
        rec = {"model": dict(run.c), "catalog_model": run.catalog, "stack": stack, **err}
        rec["plan"] = plan_of(run)
    if run.compile:
        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec, err


def status_line(rec, err):
    if not (m := rec.get("measured")):
        return f"FAILED {err}"
    ms = {
        k: "-" if m[k] is None else f"{m[k] * 1e3:.1f}"
        for k in ("step_time_s", "forward_s", "forward_backward_s")
    }
    status = f"step {ms['step_time_s']} ms (fwd {ms['forward_s']}, "
    status += f"fwd+bwd {ms['forward_backward_s']}) n={rec['steps_timed']} "
    status += f"warm-up {m['warmup_wall_s']:.1f}s sdpa={rec['stack']['sdpa_backend']}"
    return status


def run_all(runs, device, deadline, out, compile_guess):
    tag = out.result["provenance"]["device_short"]
    last_dur, compile_dur = 0.0, compile_guess
    for run in runs:
        name = run_name(run, tag)
        predicted = max(last_dur, compile_dur) if run.compile else last_dur
        if time.perf_counter() + predicted > deadline:
            out.log(f"skip {name}: budget (predicted {predicted:.0f}s)")
            out.add({"name": name, "catalog_model": run.catalog, "skipped": "budget"})
            continue
        out.log(f"run  {name}")
        t0 = time.perf_counter()
        rec, err = run_one(run, device, deadline)
        last_dur = time.perf_counter() - t0
        compile_dur = last_dur if run.compile else compile_dur
        rec = {"name": name, **rec, "config_wall_s": last_dur}
        out.add(rec | ({"note": run.note} if run.note else {}))
        out.log(f"done {name}: {status_line(rec, err)} [{last_dur:.1f}s]")
    records = out.result["records"]
    n_ok = sum("measured" in r for r in records)
    out.log(f"end: {n_ok}/{len(records)} measured -> {out.json}")


def script_args(doc, suites):
    """The arguments hf_steps.py and host_fp8.py share: OUTDIR, --budget (wall s), --device,
    --smoke and --suite (one of ``suites``, the first the default)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=90.0)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--suite", default=suites[0], choices=list(suites))
    return ap.parse_args()


def pack(outdir, dest):
    """tar+gzip OUTDIR into dest (via dest.tmp, excluded if inside OUTDIR); size in bytes."""
    root, dest = os.path.abspath(outdir), os.path.abspath(dest)
    tmp, parent = dest + ".tmp", os.path.dirname(root)

    def keep(info):
        return None if os.path.join(parent, info.name) in (dest, tmp) else info

    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(root, arcname=os.path.basename(root), filter=keep)
    os.replace(tmp, dest)
    return os.path.getsize(dest)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=150.0, help="wall s; no config starts past it")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, quick code-path check")
    ap.add_argument("--suite", default="base", choices=["base", "extended"])
    ap.add_argument("--pack", metavar="FILE.tar.gz", help="tar+gzip OUTDIR into FILE at the end")
    args = ap.parse_args()
    t_start = time.perf_counter()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA not available; use --device cpu")
    device = torch.device(args.device)
    out = Recorder(args.outdir, {"provenance": provenance(device, args), "records": []}, t_start)
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))  # still pack
    prov = out.result["provenance"]
    out.log(
        f"start on {prov['device']}, torch {torch.__version__}, suite {args.suite}, "
        f"budget {args.budget:.0f}s"
    )
    try:
        guess = 0.0 if args.smoke else COMPILE_GUESS_S
        run_all(configs(args.smoke, args.suite), device, t_start + args.budget, out, guess)
    finally:
        if args.pack:
            out.log(f"pack {args.outdir} -> {args.pack}")
            out.log(f"packed {pack(args.outdir, args.pack)} bytes")


if __name__ == "__main__":
    main()
