"""Measure what the shared kernel tables leave out: fp8 quantisation kernels and host (launch) costs.

Usage:
    python host_fp8.py OUTDIR [--budget SECONDS] [--device cuda|cpu] [--smoke]

Needs only torch.  Writes, in OUTDIR:

- ``fp8_kernels.csv`` (op, tokens, width, bytes_moved_nominal, time_us): the kernels a
  tensor-wise fp8 recipe runs around each GEMM operand of shape tokens x width (bf16 in):
  ``amax`` (``x.abs().amax()``, the scale's input), ``cast`` (``(x * s).to(float8_e4m3fn)``,
  eager: a multiply kernel and a cast kernel), ``cast_transpose`` (the cast plus the
  transposed copy the backward GEMM reads), and ``fused_cast_transpose_amax`` (one
  ``torch.compile``'d function producing amax, the fp8 tensor and its transpose, the fusion
  Transformer Engine's cast-transpose kernel performs).  bytes_moved_nominal counts 2 B read +
  1 B written per element (+1 B for a transpose).
- ``host.csv`` (what, value_us, n, note): host-side costs.  ``dispatch_<op>``: wall time per
  eager op of a loop of n calls on a one-element tensor (enqueue only, no sync inside: the
  host, not the GPU, is the bottleneck); ``gpu_kernel_<op>``: GPU time per kernel when n
  such kernels run back to back from a CUDA graph (the device floor of a tiny kernel);
  ``graph_replay_host``: host time of one ``graph.replay()``; ``sync_idle`` and
  ``item_d2h``: one ``torch.cuda.synchronize()`` and one ``.item()`` on an idle GPU;
  ``adamw_fused_per_tensor`` / ``adamw_foreach_per_tensor``: host+device time of one
  optimizer step over n tiny tensors, per tensor; ``autograd_node``: backward time per node of
  a chain of n tiny element-wise ops.
- ``tiny_steps.json``: host-bound training steps of tiny GPT decoders (hidden 256, 2-16
  layers, seq 256, micro-batch 4; `train_steps.py`'s model and step, eager bf16 autocast, fused
  AdamW), each with the CUDA kernels and CPU ops one step runs (torch.profiler), so that step
  time per kernel can be compared with the host table.  Held-out validation data, never fit
  targets.  Every configuration is timed before any is profiled, and each record carries its
  ``profiler_state`` (profiling sessions run earlier in the process, TEARDOWN_CUPTI in force):
  Kineto leaves CUPTI attached after a session unless TEARDOWN_CUPTI=1, which this script sets
  unless the environment says otherwise (train_steps.cupti_teardown_default).
  ``cupti_state.py`` measures what an attached CUPTI costs.

Timings: CUDA events over back-to-back calls after 3 warm-ups (fp8 kernels), perf_counter for
host costs.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

import train_steps as ts

FP8 = getattr(torch, "float8_e4m3fn", None)
FP8_SHAPES = [(t, w) for t in (4096, 16384) for w in (2048, 4096, 8192, 14336)]
TINY_LAYERS = (2, 4, 8, 16)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def kernel_time_us(fn, device, target_s=0.01):
    """Mean time of one call over back-to-back calls filling ~target_s, after 3 warm-ups."""
    for _ in range(3):
        fn()
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    n = max(3, min(2000, int(target_s / max(time.perf_counter() - t, 1e-6))))
    if device.type != "cuda":
        t = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t) / n * 1e6
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3


def fp8_ops(x, scale, fused):
    def amax():
        return x.abs().amax()

    def cast():
        return (x * scale).to(FP8)

    def cast_transpose():
        q = (x * scale).to(FP8)
        return q, q.t().contiguous()

    ops = {"amax": amax, "cast": cast, "cast_transpose": cast_transpose}
    if fused is not None:
        ops["fused_cast_transpose_amax"] = lambda: fused(x, scale)
    return ops


def fused_quantize(x, scale):
    q = (x.float() * scale).clamp(-448.0, 448.0).to(FP8)
    return q, q.t().contiguous(), x.abs().amax()


def measure_fp8(device, deadline, smoke, log):
    if FP8 is None:
        log("fp8: torch has no float8_e4m3fn")
        return []
    shapes = [(64, 32)] if smoke else FP8_SHAPES
    fused = None
    if device.type == "cuda":
        for knob in ("cache_size_limit", "recompile_limit"):  # one compile per shape
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 64)
        fused = torch.compile(fused_quantize, dynamic=False)
    rows = []
    for tokens, width in shapes:
        if time.perf_counter() > deadline:
            log("fp8: stopping for time")
            break
        x = torch.randn(tokens, width, device=device, dtype=torch.bfloat16)
        scale = torch.tensor(2.0, device=device)
        for op, fn in fp8_ops(x, scale, fused).items():
            try:
                us = kernel_time_us(fn, device)
            except Exception as e:  # noqa: BLE001 -- record and go on
                log(f"fp8 {op} {tokens}x{width}: {type(e).__name__}: {e}"[:300])
                continue
            nbytes = (
                tokens * width * (3 + (1 if "transpose" in op else 0) - (1 if op == "amax" else 0))
            )
            rows.append({"op": op, "tokens": tokens, "width": width})
            rows[-1] |= {"bytes_moved_nominal": nbytes, "time_us": round(us, 4)}
        log(
            f"fp8 {tokens}x{width}: "
            + ", ".join(f"{r['op']} {r['time_us']:.1f}" for r in rows[-4:])
        )
    return rows


def dispatch_us(fn, n):
    """Host wall per call of n enqueued calls (no sync inside), and wall including the drain."""
    for _ in range(10):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    enq = time.perf_counter() - t
    return enq / n * 1e6


def tiny_ops(device):
    a = torch.ones(1, device=device)
    w = torch.ones(16, 16, device=device)
    v = torch.ones(4, 16, device=device)
    q = torch.ones(1, 1, 8, 16, device=device, dtype=torch.bfloat16)
    return {
        "add_": lambda: a.add_(1.0),
        "mul": lambda: a * 2.0,
        "gelu": lambda: F.gelu(a),
        "layer_norm": lambda: F.layer_norm(v, (16,)),
        "linear": lambda: F.linear(v, w),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
    }


def graph_kernel_us(device, n):
    """GPU time per tiny kernel when n run back to back from a CUDA graph; host time of replay."""
    a = torch.ones(1, device=device)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            a.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            a.add_(1.0)
    g.replay()
    torch.cuda.synchronize()
    per_kernel = kernel_time_us(g.replay, device, target_s=0.02) / n
    host = []
    for _ in range(20):
        torch.cuda.synchronize()
        t = time.perf_counter()
        g.replay()
        host.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return per_kernel, statistics.median(host) * 1e6


def median_wall_us(fn, device, warm=3, runs=10):
    """Median wall microseconds of one synchronised call, after ``warm`` calls."""
    for _ in range(warm):
        fn()
    sync(device)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def adamw_per_tensor_us(device, n, fused):
    params = [torch.nn.Parameter(torch.ones(256, device=device)) for _ in range(n)]
    for p in params:
        p.grad = torch.ones_like(p)
    kind = {"fused": True} if fused else {"foreach": True}
    opt = torch.optim.AdamW(params, lr=1e-4, **kind)
    return median_wall_us(opt.step, device) / n


def autograd_node_us(device, n):
    x = torch.ones(16, device=device, requires_grad=True)

    def fwd_bwd():
        y = x
        for _ in range(n):
            y = y * 1.0001
        y.sum().backward()

    return median_wall_us(fwd_bwd, device) / n


def measure_host(device, smoke, log):
    n = 200 if smoke else 5000
    rows = []
    for op, fn in tiny_ops(device).items():
        rows.append(("dispatch_" + op, dispatch_us(fn, n), n, "host enqueue per eager op"))
    sync(device)
    if device.type == "cuda":
        per_kernel, replay = graph_kernel_us(device, 1000)
        rows.append(("gpu_kernel_add_", per_kernel, 1000, "GPU time per tiny kernel in a graph"))
        rows.append(("graph_replay_host", replay, 20, "host time of one replay (1000 kernels)"))
        t = []
        for _ in range(50):
            s = time.perf_counter()
            torch.cuda.synchronize()
            t.append(time.perf_counter() - s)
        rows.append(("sync_idle", statistics.median(t) * 1e6, 50, "torch.cuda.synchronize, idle"))
        a, t = torch.ones(1, device=device), []
        for _ in range(50):
            s = time.perf_counter()
            a.item()
            t.append(time.perf_counter() - s)
        rows.append(("item_d2h", statistics.median(t) * 1e6, 50, ".item() of one element, idle"))
    m = 50 if smoke else 500
    for fused in (True, False) if device.type == "cuda" else (False,):
        name = "adamw_fused_per_tensor" if fused else "adamw_foreach_per_tensor"
        note = "one AdamW step over n tensors of 256 fp32, per tensor"
        rows.append((name, adamw_per_tensor_us(device, m, fused), m, note))
    rows.append(("autograd_node", autograd_node_us(device, m), m, "fwd+bwd per mul node"))
    for r in rows:
        log(f"host {r[0]}: {r[1]:.2f} us")
    return [
        dict(zip(("what", "value_us", "n", "note"), (r[0], round(r[1], 4), *r[2:]))) for r in rows
    ]


def kernel_counts(step, device):
    """CUDA kernels (and memcpy/memset) and CPU ops of one step, from torch.profiler. Counts the
    session (train_steps.PROFILER_SESSIONS): a session that ends with TEARDOWN_CUPTI unset leaves
    CUPTI attached and slows later host-bound timings in this process (train_steps.py)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        step()
        sync(device)
    ts.PROFILER_SESSIONS[0] += 1
    events = prof.events()
    gpu = [e for e in events if e.device_type.name == "CUDA"]
    cpu_ops = [e for e in events if e.device_type.name == "CPU" and e.name.startswith("aten::")]
    return {"gpu_events": len(gpu), "aten_ops": len(cpu_ops)}


def device_tag(device):
    return ts.short_device(torch.cuda.get_device_name()) if device.type == "cuda" else "cpu"


def eager_step_maker(run, device):
    """A fresh model, optimizer and step of ``run`` (the step kernel_counts profiles)."""

    def make():
        model, opt, _, _ = ts.build(run, device)
        return ts.step_fns(run, model, opt, device)[0]

    return make


def profile_records(records, makers, device, log):
    """Profile each timed record's step (kernel_counts) after every timing is done, so no timing
    follows a profiling session (before 2026-11-28 each configuration was profiled right after its
    timing, and every configuration but a run's first was timed with CUPTI left attached)."""
    for rec, make in zip(records, makers):
        if make is None or "error" in rec:
            continue
        try:
            step = make()
            step()
            rec["profile"] = kernel_counts(step, device)
        except Exception as e:  # noqa: BLE001 -- record and go on
            rec["profile_error"] = f"{type(e).__name__}: {e}"[:400]
        m = rec.get("measured", {})
        log(
            f"tiny {rec['name']}: step {m.get('step_time_s', float('nan')) * 1e3:.2f} ms "
            f"{rec.get('profile')} {rec.get('profiler_state')}"
        )
    return records


def measure_tiny(device, deadline, smoke, log, layer_counts=TINY_LAYERS):
    """Host-bound tiny GPT steps, every configuration timed first, then profiled."""
    records, makers = [], []
    for layers in layer_counts[:2] if smoke else layer_counts:
        c = ts.shape((layers, 256, 4, 4, 1024, 8192), ts.GPT)
        run = ts.Run(f"tiny-gpt-{layers}l", c, "eager-amp", 64 if smoke else 256, 4)
        name = f"{device_tag(device)}-tiny-gpt-{layers}l-eager-amp-s{run.seq}-mb{run.mb}"
        try:
            rec = ts.run_config(run, device, deadline) | {"profiler_state": ts.profiler_state()}
            makers.append(eager_step_maker(run, device))
        except Exception as e:  # noqa: BLE001 -- record and go on
            rec = {"error": f"{type(e).__name__}: {e}"[:400]}
            makers.append(None)
        records.append({"name": name, **rec})
    return profile_records(records, makers, device, log)


def compiled_step(run, device, mode):
    """train_steps' model and AdamW with the model compiled in `mode` (reduce-overhead: CUDA
    graphs of forward and backward; the optimizer step stays eager)."""
    model, opt, _, _ = ts.build(run, device)
    fwd = torch.compile(model, mode=mode)
    tok = torch.randint(0, run.c["vocab"], (run.mb, run.seq + 1), device=device)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = fwd(tok[:, :-1], tok[:, 1:])
        loss.backward()

    def step():
        fwd_bwd()
        opt.step()

    return step, fwd_bwd


def measure_tiny_extra(device, deadline, smoke, log):
    """Width sweep at 8 layers (host-bound to device-bound), then 8 layers compiled; every
    configuration timed first, then profiled (profile_records)."""
    records, makers, tag = [], [], device_tag(device)
    variants = [(8, w, None) for w in (512, 1024, 2048)]
    variants += [(8, 256, "default"), (8, 256, "reduce-overhead")] if device.type == "cuda" else []
    for layers, width, mode in variants[:2] if smoke else variants:
        if time.perf_counter() > deadline:
            break
        c = ts.shape(
            (layers, width, 4 if width == 256 else width // 128, 0, 4 * width, 8192), ts.GPT
        )
        c["kv_heads"] = c["heads"]
        run = ts.Run(f"tiny-gpt-{layers}l", c, "eager-amp", 64 if smoke else 256, 4)
        name = f"{tag}-tiny-gpt-{layers}l-h{width}-eager-amp-s{run.seq}-mb{run.mb}"
        name += f"-compile-{mode}" if mode else ""
        try:
            if mode is None:
                rec = ts.run_config(run, device, deadline)
                makers.append(eager_step_maker(run, device))
            else:
                step, fwd_bwd = compiled_step(run, device, mode)
                measured, n, warm = ts.measure(step, fwd_bwd, None, device.type == "cuda", deadline)
                rec = {"model": dict(c), "plan": ts.plan_of(run), "measured": measured}
                rec |= {"steps_timed": n, "stack": {"name": "eager-amp", "compile": mode}}
                makers.append(lambda step=step: step)  # the compiled step itself, not a recompile
            rec["profiler_state"] = ts.profiler_state()
        except Exception as e:  # noqa: BLE001 -- record and go on
            rec = {"error": f"{type(e).__name__}: {e}"[:400]}
            makers.append(None)
        records.append({"name": name, **rec})
    return profile_records(records, makers, device, log)


def measure_alignment(device, smoke, log):
    """bf16 GEMMs of a GPT-2 LM head (tokens x 768 x vocab) with the vocabulary as published
    (50257, odd) and padded to a multiple of 64 (50304): forward (t x h x V), data gradient
    (t x V x h) and weight gradient (V x t x h), as torch.matmul runs them."""
    rows, t, h = [], (256 if smoke else 16384), (64 if smoke else 768)
    for vocab in (50257, 50304) if not smoke else (257, 320):
        x = torch.randn(t, h, device=device, dtype=torch.bfloat16)
        w = torch.randn(vocab, h, device=device, dtype=torch.bfloat16)
        g = torch.randn(t, vocab, device=device, dtype=torch.bfloat16)
        shapes = {
            "fwd": (lambda: x @ w.t(), (t, vocab, h)),
            "dgrad": (lambda: g @ w, (t, h, vocab)),
            "wgrad": (lambda: g.t() @ x, (vocab, h, t)),
        }
        for kind, (fn, (m, n, k)) in shapes.items():
            us = kernel_time_us(fn, device)
            rows.append({"op": f"lm_head_{kind}", "m": m, "n": n, "k": k, "vocab": vocab})
            rows[-1] |= {"time_us": round(us, 4), "tflops": round(2 * m * n * k / us / 1e6, 1)}
            log(f"align {kind} vocab {vocab}: {us:.1f} us {rows[-1]['tflops']} TFLOP/s")
    return rows


def write_csv(path, rows):
    if not rows:
        return
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(path + ".tmp", path)


def main():
    args = ts.script_args(__doc__, ("base", "extra", "align"))
    t0 = time.perf_counter()
    device = torch.device(args.device)
    os.makedirs(args.outdir, exist_ok=True)
    logf = open(os.path.join(args.outdir, "log.txt"), "a")

    def log(msg):
        line = f"+{time.perf_counter() - t0:6.1f}s {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    ts.cupti_teardown_default()
    prov = ts.provenance(device, args) | {"script": os.path.abspath(__file__)}
    with open(os.path.join(args.outdir, "env.json"), "w") as f:
        json.dump(prov, f, indent=1)
    log(f"start on {prov['device']}")
    if args.suite == "align":
        rows = measure_alignment(device, args.smoke, log)
        write_csv(os.path.join(args.outdir, "gemm_alignment.csv"), rows)
        return log(f"end after {time.perf_counter() - t0:.1f}s")
    if args.suite == "extra":
        tiny = measure_tiny_extra(device, t0 + args.budget, args.smoke, log)
        with open(os.path.join(args.outdir, "tiny_steps_extra.json"), "w") as f:
            json.dump({"provenance": prov, "records": tiny}, f, indent=1)
        return log(f"end after {time.perf_counter() - t0:.1f}s")
    write_csv(os.path.join(args.outdir, "host.csv"), measure_host(device, args.smoke, log))
    deadline = t0 + args.budget
    rows = measure_fp8(device, t0 + 0.5 * args.budget, args.smoke, log)
    write_csv(os.path.join(args.outdir, "fp8_kernels.csv"), rows)
    tiny = measure_tiny(device, deadline, args.smoke, log)
    with open(os.path.join(args.outdir, "tiny_steps.json"), "w") as f:
        json.dump({"provenance": prov, "records": tiny}, f, indent=1)
    log(f"end after {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
