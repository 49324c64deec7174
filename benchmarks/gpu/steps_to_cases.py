"""Turn measured single-GPU training steps (train_steps.py output) into paraplan validation cases.

    python benchmarks/gpu/steps_to_cases.py OUT.json DIR/steps/train_steps.json [...] [--group NAME]

``--group`` names the cases' validation group (default gpu-steps-2026-11). Records named
``*-repeat`` or ``*-ablation-base`` (a base run measured again: the run-to-run spread) are not cases.

Also reads hf_steps.py output (records with ``hf_config``: the model is paraplan's reading of
that config, catalog.hf.model_from_hf_config; framework ``hf-transformers``, or the fp32 stack as
``hf-transformers`` with dtype ``fp32``) and host_fp8.py's tiny_steps*.json (train_steps records;
a ``compile`` mode of ``default`` is ``pytorch-compile``; ``reduce-overhead``, CUDA graphs, has no
profile and is skipped).

Each record becomes one held-out case (step_time_s, and peak_allocated_gib where the record measured
the allocator's peak over its own run alone: not host_fp8.py's, whose loops keep the previous variant's
model and optimizer alive), encoded the way it ran: the catalog system
of the GPU that ran it, the model shape that ran (inline), the record's 1-GPU plan (dtype ``tf32`` for
fp32 parameters with TF32 matmuls, ``recompute: full`` for torch.utils.checkpoint per block,
``global_batch`` > ``micro_batch`` for gradient accumulation) and the framework profile of its stack
(STACK_FRAMEWORK). The cases are never fit targets (validate.fitted names no constant fitted on them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SYSTEMS = {"h100": "dgx-h100-80gb", "h200": "dgx-h200"}
# stack -> (framework profile, plan fields the stack sets)
STACK_FRAMEWORK = {
    "eager-amp": ("pytorch-eager", {}),
    "eager-bf16": ("pytorch-eager-bf16", {}),
    "eager-tf32": ("pytorch-eager", {"dtype": "tf32"}),
}
COMPILED = ("pytorch-compile", {})
GROUP = "gpu-steps-2026-11"
MEASURED = Path(__file__).parent / "measured"
HF_STACK = {"hf-trainer-amp": {}, "hf-trainer-fp32": {"dtype": "fp32"}}


def measured_figures(rec: dict, allocator_peak: bool = True) -> dict:
    """The record's compared figures: the median step time and, where the record has it and
    ``allocator_peak``, the allocator's peak over the timed steps (torch.cuda.max_memory_allocated,
    compared by validate.run.predicted_metrics)."""
    out = {"step_time_s": round(rec["measured"]["step_time_s"], 6)}
    if allocator_peak and "peak_allocated_gib" in rec["measured"]:
        out["peak_allocated_gib"] = round(rec["measured"]["peak_allocated_gib"], 4)
    return out


def hf_record_case(rec: dict, source: str, group: str) -> dict:
    """A hf_steps.py record as a case: the model as paraplan reads the config that ran."""
    from paraplan.catalog.hf import model_from_hf_config

    spec = model_from_hf_config(rec["hf_config"], rec["catalog_model"])
    model = spec.model_dump(mode="json", exclude_defaults=True, exclude={"name"})
    stack = rec["stack"]
    notes = (
        f"Trainer-style step ({stack['name']}): transformers {stack['transformers']}, "
        f"autocast {stack['autocast']}, params {stack['param_dtype']}, "
        f"attn_implementation {stack['attn_implementation']}, {stack['loss']}, "
        f"clip_grad_norm {stack['clip_grad_norm']}, {stack['optimizer']}, gradient checkpointing "
        f"{stack['gradient_checkpointing']}, grad_accum {stack['grad_accum']}; median of "
        f"{rec['steps_timed']} steps (min {rec['measured']['step_time_min_s']:.4f}, max "
        f"{rec['measured']['step_time_max_s']:.4f} s); peak allocated "
        f"{rec['measured']['peak_allocated_gib']:.2f} GiB; {rec['params']:,} parameters"
    )
    return {
        "name": rec["name"],
        "source": source,
        "scope": "stage",
        "framework": "hf-transformers",
        "group": group,
        "model": model,
        "system": SYSTEMS[rec["name"].split("-", 1)[0]],
        "plan": {**rec["plan"], **HF_STACK[stack["name"]]},
        "measured": measured_figures(rec),
        "notes": notes,
    }


def record_case(rec: dict, source: str, group: str = GROUP, allocator_peak: bool = True) -> dict:
    stack = rec["stack"]
    if "hf_config" in rec:
        return hf_record_case(rec, source, group)
    framework, fields = COMPILED if stack.get("compile") else STACK_FRAMEWORK[stack["name"]]
    plan = {**rec["plan"], **fields}
    if stack["name"] == "eager-tf32":
        plan["attention"] = "flash"  # SDPA memory-efficient kernel: fused, no score matrix
    system = SYSTEMS[rec["name"].split("-", 1)[0]]
    sdpa = stack.get("sdpa_backend")
    g = {k: stack.get(k, "not recorded") for k in ("autocast", "param_dtype", "tf32_matmul")}
    g |= {k: stack.get(k, "not recorded") for k in ("optimizer", "loss")}
    notes = (
        f"stack {stack['name']}: autocast {g['autocast']}, params {g['param_dtype']}, "
        f"tf32 matmul {g['tf32_matmul']}, {g['optimizer']}, loss {g['loss']}, "
        f"SDPA {sdpa}, compile {stack.get('compile')}, recompute {stack.get('recompute')}, "
        f"grad_accum {stack.get('grad_accum', 1)}; median of {rec['steps_timed']} steps "
        f"(min {rec['measured']['step_time_min_s']:.4f}, max {rec['measured']['step_time_max_s']:.4f} s); "
        f"peak allocated {rec['measured']['peak_allocated_gib']:.2f} GiB"
    )
    if "profiler_state" in rec:  # host_fp8.py / cupti_state.py: CUPTI left attached or not
        state = rec["profiler_state"]
        notes += (
            f"; timed after {state['profiler_sessions_before']} torch.profiler session(s) in its "
            f"process, TEARDOWN_CUPTI {state['teardown_cupti'] or 'unset'}"
        )
    return {
        "name": rec["name"],
        "source": source,
        "scope": "stage",
        "framework": framework,
        "group": group,
        "model": {**rec["model"], "dropout": False},  # train_steps.py's Decoder runs no dropout
        "system": system,
        "plan": plan,
        "measured": measured_figures(rec, allocator_peak),
        "notes": notes,
    }


def profiler_state_of(rec: dict, index: int, script: str) -> dict:
    """``rec`` with its ``profiler_state``: as recorded (host_fp8.py from 2026-11-28 on), or, for a
    host_fp8.py record without one, the state its script's order implies: before 2026-11-28
    measure_tiny and measure_tiny_extra profiled each configuration (torch.profiler, CPU and CUDA
    activities) right after timing it, in one process per suite, with TEARDOWN_CUPTI unset, so the
    record at ``index`` was timed after ``index`` sessions that left CUPTI attached (Kineto
    finalizes it only under TEARDOWN_CUPTI=1: libkineto/src/CuptiActivityApi.cpp cuptiTearDown_).
    Other scripts run no profiler: records unchanged."""
    if script != "host_fp8.py" or "profiler_state" in rec:
        return rec
    return rec | {"profiler_state": {"profiler_sessions_before": index, "teardown_cupti": None}}


def main(out: str, *inputs: str, group: str = GROUP) -> None:
    cases = []
    for path in inputs:
        doc = json.loads(Path(path).read_text())
        prov = doc["provenance"]
        script = Path(prov.get("script", "train_steps.py")).name
        if Path(path).name.startswith("tiny_steps"):
            script = "host_fp8.py"  # its provenance names train_steps.py, whose model it runs
        elif any("hf_config" in r for r in doc["records"]):
            script = "hf_steps.py"
        where = Path(path).resolve().relative_to(MEASURED.resolve())
        source = (
            f"paraplan benchmarks/gpu/{script} on one {prov['device']} "
            f"({prov['date'][:10]}, torch {prov['torch']}); {where.parts[0]}/"
            f"{'/'.join(where.parts[1:])} (held out: single-GPU steps measured by the project)"
        )
        # host_fp8.py before 2026-11-28 kept the previous variant's model, AdamW state and gradients alive
        # while it measured the next (measure_tiny / measure_tiny_extra bound `model, opt` for the kernel
        # profile and rebound them only after the next run_config), so its allocator peaks are not the
        # run's own: not compared
        own_peak = script != "host_fp8.py"
        records = [profiler_state_of(r, i, script) for i, r in enumerate(doc["records"])]
        cases += [
            record_case(r, source, group, own_peak)
            for r in records
            if "step_time_s" in r.get("measured", {})
            and not r["name"].endswith(("-repeat", "-ablation-base"))
            and r["stack"].get("compile") in (None, False, True, "default")
        ]
    Path(out).write_text(json.dumps({"cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--group" in args:
        at = args.index("--group")
        main(*args[:at], *args[at + 2 :], group=args[at + 1])
    else:
        main(*args)
