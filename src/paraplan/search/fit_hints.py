"""What would make a plan that does not fit in memory fit: one knob changed at a time.

``fit_changes`` tries, on the same GPUs, batch and sequence, each single change that lowers the
memory of a stage — a higher ZeRO stage, sequence parallelism, activation recomputation, twice the
pipeline or tensor parallelism, offloading the optimizer state or the activations — through the
same ``estimate``, and returns the ones that fit, fastest first. When none does, the CLI falls back
to the search (the fastest plan that fits at this batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.step.estimate import estimate
from paraplan.step.result import Estimate
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules_offload import offload_rule
from paraplan.specs.system import SystemSpec


@dataclass(frozen=True)
class FitChange:
    """One change to the plan (as the command-line flag that makes it) and its outcome (the CLI renders
    it: cli.estimate_cmd.fit_hint_lines)."""

    flag: str
    plan: PlanSpec
    estimate: Estimate


def _changes(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> list[tuple[str, dict]]:
    """(flag, plan fields to change) for every single memory-lowering change that applies."""
    out: list[tuple[str, dict]] = []
    if plan.dp * plan.cp > 1:
        out += [(f"--zero {z}", {"zero": z}) for z in range(plan.zero + 1, 4)]
    if plan.tp > 1 and not plan.sequence_parallel:
        out.append(("--sequence-parallel", {"sequence_parallel": True}))
    later = {"none": ("selective", "full"), "selective": ("full",), "full": ()}[plan.recompute]
    out += [(f"--recompute {m}", {"recompute": m, "recompute_modules": None}) for m in later]
    if plan.dp % 2 == 0:
        out.append((f"--pp {2 * plan.pp}", {"pp": 2 * plan.pp, "dp": plan.dp // 2}))
        out.append((f"--tp {2 * plan.tp}", {"tp": 2 * plan.tp, "dp": plan.dp // 2}))
    acc = system.accelerator
    if not offload_rule(True, acc.host_bandwidth, acc.host_memory, system.name):
        if not plan.offload_optimizer:
            out.append(("--offload-optimizer", {"offload_optimizer": True}))
        if not plan.offload_activations:
            out.append(("--offload-activations", {"offload_activations": True}))
    return out


def fit_changes(
    model: ModelSpec, system: SystemSpec, plan: PlanSpec, limit: int = 4
) -> list[FitChange]:
    """Single changes after which the plan fits, fastest first (at most ``limit``)."""
    found = []
    for flag, update in _changes(model, system, plan):
        data = plan.model_dump()
        data.update(update)
        try:
            candidate = PlanSpec.model_validate(data)
            result = estimate(model, system, candidate)
        except (InputError, ValueError):  # the change breaks a rule of this model (tp, pp, batch)
            continue
        if result.fits:
            found.append(FitChange(flag, candidate, result))
    found.sort(key=lambda c: (c.estimate.step_time_s, c.estimate.peak_stage.peak_bytes))
    return found[:limit]
