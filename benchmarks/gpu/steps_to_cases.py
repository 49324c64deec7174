"""Turn measured single-GPU training steps (train_steps.py output) into paraplan validation cases.

    python benchmarks/gpu/steps_to_cases.py OUT.json DIR/steps/train_steps.json [...]

Each record becomes one held-out case (step_time_s only), encoded the way it ran: the catalog system
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


def record_case(rec: dict, source: str) -> dict:
    stack = rec["stack"]
    framework, fields = COMPILED if stack.get("compile") else STACK_FRAMEWORK[stack["name"]]
    plan = {**rec["plan"], **fields}
    if stack["name"] == "eager-tf32":
        plan["attention"] = "flash"  # SDPA memory-efficient kernel: fused, no score matrix
    system = SYSTEMS[rec["name"].split("-", 1)[0]]
    sdpa = stack.get("sdpa_backend")
    notes = (
        f"stack {stack['name']}: autocast {stack['autocast']}, params {stack['param_dtype']}, "
        f"tf32 matmul {stack['tf32_matmul']}, {stack['optimizer']}, loss {stack['loss']}, "
        f"SDPA {sdpa}, compile {stack.get('compile')}, recompute {stack.get('recompute')}, "
        f"grad_accum {stack.get('grad_accum', 1)}; median of {rec['steps_timed']} steps "
        f"(min {rec['measured']['step_time_min_s']:.4f}, max {rec['measured']['step_time_max_s']:.4f} s); "
        f"peak allocated {rec['measured']['peak_allocated_gib']:.2f} GiB"
    )
    return {
        "name": rec["name"],
        "source": source,
        "scope": "stage",
        "framework": framework,
        "group": GROUP,
        "model": rec["model"],
        "system": system,
        "plan": plan,
        "measured": {"step_time_s": round(rec["measured"]["step_time_s"], 6)},
        "notes": notes,
    }


def main(out: str, *inputs: str) -> None:
    cases = []
    for path in inputs:
        doc = json.loads(Path(path).read_text())
        prov = doc["provenance"]
        source = (
            f"paraplan benchmarks/gpu/train_steps.py on one {prov['device']} "
            f"({prov['date'][:10]}, torch {prov['torch']}); {Path(path).parent.parent.name}/steps/"
            "train_steps.json (held out: single-GPU steps measured by the project)"
        )
        cases += [
            record_case(r, source) for r in doc["records"] if "step_time_s" in r.get("measured", {})
        ]
    Path(out).write_text(json.dumps({"cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
