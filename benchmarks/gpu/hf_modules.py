"""Measure eager Hugging Face modules, Inductor's launch path and re-check norm kernels.

Usage:
    python hf_modules.py OUTDIR [--budget SECONDS] [--device cuda|cpu] [--smoke]

Needs torch; transformers where present (its own module classes are timed; without it the
same formulas written out).  Writes, in OUTDIR:

- ``modules.csv`` (module, impl, shape, dtype_in, fwd_us, fwd_bwd_us, peak_extra_mib, kernels_fwd,
  kernels_fwd_bwd): one module of a transformers model run as ``Trainer`` runs it (under
  ``torch.autocast(bfloat16)``, parameters fp32), forward alone and forward + backward, the
  memory it adds at its peak over its inputs (``max_memory_allocated``), and the CUDA kernels
  one call launches (torch.profiler):
  activations (``gelu_new``: transformers' NewGELUActivation, the tanh formula as eager ops;
  ``gelu_tanh``: ``F.gelu(approximate="tanh")``, one kernel; ``gelu``: exact erf GeLU;
  ``silu_mul``: Llama's ``act(gate) * up``), norms (``rmsnorm_hf``: LlamaRMSNorm on the fp32
  residual stream; ``rmsnorm_hf_bf16``: the same on a bf16 tensor, Qwen3's q/k norm over the head
  dimension; ``layernorm``: ``nn.LayerNorm``), rotary (``rope_hf``: ``apply_rotary_pos_emb`` on q
  and k), ``dropout`` (p = 0.1) and the loss (``loss_hf``: transformers' ``ForCausalLMLoss`` on
  bf16 logits: the fp32 upcast, cross-entropy, and their backward).
- ``norm_recheck.csv`` (op, shape, bytes_moved_nominal, time_us, repeat): the norm rows of
  ``../shared/reference/measured/gpu_components.py`` (same calls, same nominal bytes) timed
  three times each, to check outliers in an earlier table.
- ``inductor_host.csv`` (mode, layers, step_us, fwd_bwd_us, profiler_sessions_before,
  teardown_cupti, kernels_per_step; before 2026-11-28: mode, layers, kernels_per_step, step_us,
  fwd_bwd_us, each row profiled before it was timed, CUPTI left attached): host-bound steps
  of a tiny residual MLP stack (LayerNorm, Linear 256->1024, GeLU, Linear 1024->256, residual;
  1,024 tokens) run eagerly and ``torch.compile``'d (``default``: Inductor's Triton kernels
  launched from Python, no CUDA graphs; ``reduce-overhead``: CUDA graphs) at 2-16 layers
  (eager 2/4/8/16, ``default`` 2/4/8, ``reduce-overhead`` 2/8): the slope over layers divided by the kernels a layer adds is the host time per
  launched kernel of that path (component data for the host model: not one of the validation
  steps' models).

Component data only: never validation cases.  Timings: host_fp8.kernel_time_us (CUDA events over
back-to-back calls after warm-ups; the measurements of 2026-11-27 capped a run at 500 calls, the
shared function at 2,000).
"""

from __future__ import annotations

import json
import math
import os
import time

import torch
import torch.nn.functional as F
import train_steps as ts
from host_fp8 import kernel_time_us, sync, write_csv
from torch import nn

try:  # the modules as transformers writes them (read at run time, not copied)
    import transformers
    from transformers.activations import NewGELUActivation
    from transformers.loss.loss_utils import ForCausalLMLoss
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb
except Exception:  # noqa: BLE001 -- fall back to the formulas
    transformers = None


def gelu_new(x):
    """GPT-2's tanh GeLU written as eager ops (Hendrycks & Gimpel 2016, Eq. for the tanh form)."""
    if transformers is not None:
        return NewGELUActivation()(x)
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


class RMSNormEager(nn.Module):
    """RMSNorm with the fp32 upcast, as eager ops (Zhang & Sennrich 2019)."""

    def __init__(self, h, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), eps

    def forward(self, x):
        dt = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rms_norm(h, device):
    mod = LlamaRMSNorm(h) if transformers is not None else RMSNormEager(h)
    return mod.to(device)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rope(q, k, cos, sin):
    if transformers is not None:
        return apply_rotary_pos_emb(q, k, cos, sin)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s


def causal_lm_loss(logits, labels, vocab):
    if transformers is not None:
        return ForCausalLMLoss(logits, labels, vocab)
    lg = logits.float()
    lab = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
    return F.cross_entropy(lg.view(-1, vocab), lab.view(-1), ignore_index=-100)


def kernels_of(fn, device):
    """CUDA kernels one call launches (torch.profiler), -1 off CUDA."""
    if device.type != "cuda":
        return -1
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync(device)
    ts.PROFILER_SESSIONS[0] += 1  # CUPTI stays attached unless TEARDOWN_CUPTI=1 (train_steps.py)
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def peak_extra_mib(fn, device):
    if device.type != "cuda":
        return -1.0
    sync(device)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    sync(device)
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def module_cases(device, smoke):
    """(module, impl, shape text, input factory, call) of each module timed."""
    bf, f32 = torch.bfloat16, torch.float32
    T = 256 if smoke else 16384
    cases = []
    for w in (64,) if smoke else (3072, 8192):
        for impl, fn in (
            ("gelu_new", gelu_new),
            ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
            ("gelu", F.gelu),
        ):
            cases.append(("activation", impl, f"{T}x{w}", ((T, w), bf), fn))
        cases.append(
            (
                "activation",
                "silu_mul",
                f"{T}x{w}",
                ((T, 2 * w), bf),
                lambda x: F.silu(x[:, : x.shape[1] // 2]) * x[:, x.shape[1] // 2 :],
            )
        )
    for h in (64,) if smoke else (768, 1024, 2048, 4096):
        norm = rms_norm(h, device)
        ln = nn.LayerNorm(h).to(device)
        cases.append(("norm", "rmsnorm_hf", f"{T}x{h}", ((T, h), f32), norm))
        cases.append(("norm", "layernorm", f"{T}x{h}", ((T, h), f32), ln))
        cases.append(
            ("dropout", "dropout_p0.1", f"{T}x{h}", ((T, h), f32), lambda x: F.dropout(x, 0.1))
        )
    hd = 16 if smoke else 128
    for heads in (4,) if smoke else (16, 32):
        norm = rms_norm(hd, device)
        cases.append(("norm", "rmsnorm_hf_bf16", f"{T}x{heads}x{hd}", ((T, heads, hd), bf), norm))
    b, s = (1, 64) if smoke else (4, 2048)
    for hq, hkv in ((2, 1),) if smoke else ((16, 8), (32, 8)):
        cases.append(
            ("rotary", "rope_hf", f"{b}x{hq}/{hkv}x{s}x{hd}", ((b, hq, hkv, s, hd), bf), None)
        )
    for v in (256,) if smoke else (50257, 50304, 128256, 151936):
        cases.append(("loss", "loss_hf", f"{T}x{v}", ((T, v), bf), None))
    return cases


def run_module(case, device):
    module, impl, shape, (dims, dtype), fn = case
    if module == "rotary":
        b, hq, hkv, s, hd = dims
        q = torch.randn(b, hq, s, hd, device=device, dtype=dtype, requires_grad=True)
        k = torch.randn(b, hkv, s, hd, device=device, dtype=dtype, requires_grad=True)
        pos = torch.arange(s, device=device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=device).float() / hd))
        emb = torch.cat([torch.outer(pos, inv)] * 2, dim=-1)[None]
        cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
        inputs = (q, k)

        def call():
            return rope(q, k, cos, sin)

        def grads(out):
            return out, tuple(torch.ones_like(o) for o in out)
    elif module == "loss":
        t, v = dims
        x = torch.randn(1, t, v, device=device, dtype=dtype, requires_grad=True)
        labels = torch.randint(0, v, (1, t), device=device)
        inputs = (x,)

        def call():
            return (causal_lm_loss(x, labels, v),)

        def grads(out):
            return out, (torch.ones_like(out[0]),)
    else:
        x = torch.randn(*dims, device=device, dtype=dtype, requires_grad=True)
        inputs = (x,)

        def call():
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                return (fn(x),)

        def grads(out):
            return out, tuple(torch.ones_like(o) for o in out)

    def fwd():
        with torch.no_grad():
            call()

    def fwd_bwd():
        outs, gs = grads(call())
        torch.autograd.backward(outs, gs)
        for t in inputs:
            t.grad = None

    row = {"module": module, "impl": impl, "shape": shape, "dtype_in": str(dtype).split(".")[-1]}
    row["fwd_us"] = round(kernel_time_us(fwd, device, 0.02), 3)
    row["fwd_bwd_us"] = round(kernel_time_us(fwd_bwd, device, 0.02), 3)
    row["peak_extra_mib"] = round(peak_extra_mib(fwd_bwd, device), 2)
    row["kernels_fwd"] = kernels_of(fwd, device)
    row["kernels_fwd_bwd"] = kernels_of(fwd_bwd, device)
    return row


def measure_modules(device, deadline, smoke, log):
    rows = []
    for case in module_cases(device, smoke):
        if time.perf_counter() > deadline:
            log("modules: stopping for time")
            break
        try:
            rows.append(run_module(case, device))
            r = rows[-1]
            log(
                f"module {r['impl']} {r['shape']}: fwd {r['fwd_us']:.1f} us, fwd+bwd "
                f"{r['fwd_bwd_us']:.1f} us, +{r['peak_extra_mib']:.0f} MiB, kernels "
                f"{r['kernels_fwd']}/{r['kernels_fwd_bwd']}"
            )
        except Exception as e:  # noqa: BLE001 -- record and go on
            log(f"module {case[1]} {case[2]}: {type(e).__name__}: {e}"[:300])
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def measure_norm_recheck(device, smoke, log):
    """gpu_components.py's norm rows, three repeats each (same calls, same nominal bytes)."""
    rows = []
    sizes = [(256, 64)] if smoke else [(t, h) for t in (4096, 16384) for h in (2048, 4096, 8192)]
    for rep in range(3):
        for t, h in sizes:
            x = torch.randn(t, h, device=device, dtype=torch.bfloat16, requires_grad=True)
            w = torch.ones(h, device=device, dtype=torch.bfloat16, requires_grad=True)
            bb = torch.zeros(h, device=device, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(t, h, device=device, dtype=torch.bfloat16)
            nb = t * h * 2
            ops = {
                "layernorm_fwd": (
                    2 * nb,
                    lambda: F.layer_norm(x.detach(), (h,), w.detach(), bb.detach()),
                ),
                "layernorm_fwd_bwd": (5 * nb, lambda: F.layer_norm(x, (h,), w, bb).backward(g)),
                "rmsnorm_fwd_bwd": (5 * nb, lambda: F.rms_norm(x, (h,), w).backward(g)),
            }
            for op, (nbytes, fn) in ops.items():
                us = kernel_time_us(fn, device, 0.02)
                rows.append(
                    {
                        "op": op,
                        "shape": f"{t}x{h}",
                        "bytes_moved_nominal": nbytes,
                        "time_us": round(us, 3),
                        "repeat": rep,
                    }
                )
            x.grad = w.grad = bb.grad = None
        log(
            "norm recheck "
            + ", ".join(
                f"{r['op']} {r['shape']} {r['time_us']:.0f}"
                for r in rows[-3 * len(sizes) :]
                if r["shape"].startswith("16384")
            )
        )
    return rows


class Stack(nn.Module):
    """Tiny residual MLP layers: the host, not the GPU, bounds a step."""

    def __init__(self, layers, h=256):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(h), nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
            for _ in range(layers)
        )

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x.float().pow(2).mean()


def inductor_row(mode, layers, device):
    """One tiny stack's step and forward + backward time, eager or compiled in ``mode``."""
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    model = Stack(layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    x = torch.randn(4, 256, 256, device=device)
    fwd = model if mode == "eager" else torch.compile(model, mode=mode)

    def fwd_bwd(update=False):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = fwd(x)
        loss.backward()
        if update:
            opt.step()
        opt.zero_grad(set_to_none=True)

    def step():
        fwd_bwd(update=True)

    for _ in range(3):
        step()
    # timed before this row's profiling session (kernels_of): the sessions of earlier rows and
    # modules ran with TEARDOWN_CUPTI=1 (main) unless a CUDA-graph compile set it to 0 (train_steps.py)
    row = {"mode": mode, "layers": layers}
    row["step_us"] = round(kernel_time_us(step, device, 0.05), 2)
    row["fwd_bwd_us"] = round(kernel_time_us(fwd_bwd, device, 0.05), 2)
    row |= ts.profiler_state()
    row["kernels_per_step"] = kernels_of(step, device)
    return row


def measure_inductor(device, deadline, smoke, log):
    runs = [("eager", n) for n in ((2, 4) if smoke else (2, 4, 8, 16))]
    if device.type == "cuda":  # compile time grows with layers: fewer compiled sizes
        runs += [("default", n) for n in (2, 4, 8)] + [("reduce-overhead", n) for n in (2, 8)]
    rows = []
    for mode, layers in runs:
        if time.perf_counter() > deadline:
            log("inductor: stopping for time")
            break
        try:
            rows.append(inductor_row(mode, layers, device))
        except Exception as e:  # noqa: BLE001 -- record and go on
            log(f"inductor {mode} {layers}L: {type(e).__name__}: {e}"[:300])
            continue
        r = rows[-1]
        log(
            f"inductor {mode} {layers}L: step {r['step_us']:.0f} us, fwd+bwd "
            f"{r['fwd_bwd_us']:.0f} us, {r['kernels_per_step']} kernels"
        )
    return rows


def main():
    args = ts.script_args(__doc__, ("base",))
    t0 = time.perf_counter()
    device = torch.device(args.device)
    os.makedirs(args.outdir, exist_ok=True)
    logf = open(os.path.join(args.outdir, "log.txt"), "a")

    def log(msg):
        line = f"+{time.perf_counter() - t0:6.1f}s {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    ts.cupti_teardown_default()  # profiled modules must not slow the host-bound rows after them
    prov = ts.provenance(device, args) | {"script": os.path.abspath(__file__)}
    prov["transformers"] = getattr(transformers, "__version__", None)
    with open(os.path.join(args.outdir, "env.json"), "w") as f:
        json.dump(prov, f, indent=1)
    log(f"start on {prov['device']}, transformers {prov['transformers']}")
    write_csv(
        os.path.join(args.outdir, "norm_recheck.csv"), measure_norm_recheck(device, args.smoke, log)
    )
    rows = measure_modules(device, t0 + 0.6 * args.budget, args.smoke, log)
    write_csv(os.path.join(args.outdir, "modules.csv"), rows)
    rows = measure_inductor(device, t0 + args.budget, args.smoke, log)
    write_csv(os.path.join(args.outdir, "inductor_host.csv"), rows)
    log(f"end after {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
