"""What a CUPTI left attached by torch.profiler costs the host: eager dispatch, autograd and tiny steps.

Usage:
    python cupti_state.py OUTDIR [--budget SECONDS] [--device cuda|cpu] [--smoke]

Needs only torch (and host_fp8.py / train_steps.py beside it).  Kineto, torch.profiler's GPU
tracer, finalizes CUPTI at the end of a profiling session only when the environment has
TEARDOWN_CUPTI=1 (pytorch/kineto libkineto/src/CuptiActivityApi.cpp cuptiTearDown_,
teardownContext; pytorch/pytorch#144455): otherwise CUPTI stays attached and, by
pytorch/pytorch#146604, training runs "roughly 10-20%" slower "even after completion".  The tiny
steps of ``measured/h100-2026-11-27b/host/tiny_steps.json`` and ``../h100-2026-11-27c/`` were
timed this way, each configuration but the first after the previous one's profiling session.
In one process, this script measures host_fp8.py's ``dispatch_<op>`` rows, its
``autograd_node`` and train_steps' 2- and 8-layer tiny GPT steps (hidden 256, seq 256,
micro-batch 4, eager bf16 autocast, fused AdamW) in three states: before any profiling session
(``clean``), after a session that ended with TEARDOWN_CUPTI=0 (``attached``) and after one
that ended with TEARDOWN_CUPTI=1 (``torn_down``).  Writes ``cupti_state.csv`` (what, value_us,
n, state, profiler_sessions_before, teardown_cupti) and ``tiny_steps_cupti.json`` (held-out
repeats of the tiny steps, each with its ``cupti_state``), ``env.json`` and ``log.txt``.
Component data for the host model: the per-call cost of an attached CUPTI, so that a step
timed after profiling can be priced as it ran.  Run it as a process of its own, so that
``clean`` is clean; about 15 s on an H100.
"""

from __future__ import annotations

import json
import os
import time

import torch
import train_steps as ts
from host_fp8 import (
    autograd_node_us,
    device_tag,
    dispatch_us,
    eager_step_maker,
    kernel_counts,
    sync,
    tiny_ops,
    write_csv,
)


def cupti_state_rows(device, state, smoke):
    """host.csv's eager dispatch rows and autograd node, measured in one CUPTI ``state``."""
    n, m = (200, 50) if smoke else (5000, 500)
    rows = [("dispatch_" + op, dispatch_us(fn, n), n) for op, fn in tiny_ops(device).items()] + [
        ("autograd_node", autograd_node_us(device, m), m)
    ]
    extra = {"state": state} | ts.profiler_state()
    return [{"what": w, "value_us": round(v, 4), "n": k} | extra for w, v, k in rows]


def set_cupti_teardown(device, value, seq, log):
    """Run one profiling session (a tiny eager step) that ends with TEARDOWN_CUPTI=``value``:
    "0" leaves CUPTI attached, "1" finalizes it (asynchronously, at the exit of a later CUDA call:
    libkineto/src/CuptiActivityApi.cpp teardownContext; a few synchronised calls and a pause follow)."""
    os.environ["TEARDOWN_CUPTI"] = value
    c = ts.shape((2, 256, 4, 4, 1024, 8192), ts.GPT)
    run = ts.Run("tiny-gpt-2l", c, "eager-amp", seq, 4)
    step = eager_step_maker(run, device)()
    step()
    log(f"cupti: session ending with TEARDOWN_CUPTI={value}: {kernel_counts(step, device)}")
    for _ in range(3):
        torch.ones(1, device=device).add_(1.0)
        sync(device)
        time.sleep(0.2)


def measure_cupti(device, deadline, smoke, log):
    """The same host rows and tiny GPT steps (2 and 8 layers) in three states of one process:
    before any profiling session ("clean"), after a session left CUPTI attached ("attached"), and
    after a session that finalized it ("torn_down"). Component data for the host model: what an
    attached CUPTI adds per eager call, and whether a step timed after profiling must be priced
    apart. Run in a fresh process, so that "clean" is clean."""
    rows, steps = [], []
    for state, teardown in (("clean", None), ("attached", "0"), ("torn_down", "1")):
        if teardown is not None:
            set_cupti_teardown(device, teardown, 64 if smoke else 256, log)
        rows += cupti_state_rows(device, state, smoke)
        for layers in (2, 8) if not smoke else (2,):
            c = ts.shape((layers, 256, 4, 4, 1024, 8192), ts.GPT)
            run = ts.Run(f"tiny-gpt-{layers}l", c, "eager-amp", 64 if smoke else 256, 4)
            name = f"{device_tag(device)}-tiny-gpt-{layers}l-eager-amp-s{run.seq}-mb{run.mb}"
            rec = ts.run_config(run, device, deadline) | {"profiler_state": ts.profiler_state()}
            steps.append({"name": f"{name}-cupti-{state}", "cupti_state": state, **rec})
            log(f"cupti {state} {name}: {rec['measured']['step_time_s'] * 1e3:.2f} ms")
        log(f"cupti {state}: " + ", ".join(f"{r['what']} {r['value_us']:.2f}" for r in rows[-7:]))
    return rows, steps


def main():
    args = ts.script_args(__doc__, ("cupti",))
    t0 = time.perf_counter()
    device = torch.device(args.device)
    os.makedirs(args.outdir, exist_ok=True)
    logf = open(os.path.join(args.outdir, "log.txt"), "a")  # noqa: SIM115 -- appended to as it runs

    def log(msg):
        line = f"+{time.perf_counter() - t0:6.1f}s {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    prov = ts.provenance(device, args) | {"script": os.path.abspath(__file__)}
    with open(os.path.join(args.outdir, "env.json"), "w") as f:
        json.dump(prov, f, indent=1)
    log(f"start on {prov['device']}")
    rows, steps = measure_cupti(device, t0 + args.budget, args.smoke, log)
    write_csv(os.path.join(args.outdir, "cupti_state.csv"), rows)
    with open(os.path.join(args.outdir, "tiny_steps_cupti.json"), "w") as f:
        json.dump({"provenance": prov, "records": steps}, f, indent=1)
    log(f"end after {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
