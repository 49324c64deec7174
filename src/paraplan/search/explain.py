"""Why the best plan wins: its neighbours one knob away, and what decided against each.

For the winning plan, every main knob (tp, pp, cp, micro-batch, recompute, sequence parallelism,
ZeRO stage, schedule / vpp, offloads) is moved to each neighbouring value the search space
allows (dp absorbs the change in tp·pp·cp); each neighbour is estimated with the same estimator
and reported as slower (naming the time components that grew most), faster but over the memory
capacity (naming its peak), or invalid. That is the trade-off the search resolved.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.step.estimate import estimate
from paraplan.step.result import BREAKDOWN_PARTS, Estimate
from paraplan.search import launch
from paraplan.search.space import SearchProblem
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.recompute import mode_of, plan_fields
from paraplan.specs.rules import even_share
from paraplan.units import GiB

_COMPONENTS = {part.name: part.label for part in BREAKDOWN_PARTS}


@dataclass(frozen=True)
class Alternative:
    knob: str
    change: str
    verdict: str  # "slower" | "does not fit" | "invalid" | "faster" | "equal"
    step_time_s: float | None
    delta_s: float | None
    reason: str


def _neighbours(problem: SearchProblem, plan: PlanSpec) -> list[tuple[str, str, dict]]:
    out = []
    degree_sets = {
        "tp": sorted({f.tp for f in problem.factorizations}),
        "pp": sorted({f.pp for f in problem.factorizations}),
        "cp": sorted({f.cp for f in problem.factorizations}),
    }
    for knob, values in degree_sets.items():
        current = getattr(plan, knob)
        lower = [v for v in values if v < current]
        higher = [v for v in values if v > current]
        for v in ([lower[-1]] if lower else []) + ([higher[0]] if higher else []):
            rest = plan.tp * plan.pp * plan.cp // current * v
            if not (dp := even_share(problem.gpus, rest)):  # the other degrees split the GPUs
                continue
            change = {knob: v, "dp": dp, "vpp": 1, "schedule": None}
            out.append((knob, f"{current} → {v}", change))
    for mb in (plan.micro_batch // 2, plan.micro_batch * 2):
        if mb >= 1:
            out.append(("micro_batch", f"{plan.micro_batch} → {mb}", {"micro_batch": mb}))
    current = mode_of(plan.recompute, plan.recompute_modules)  # specs.recompute modes
    for mode in launch.recompute_modes(problem.framework):
        if mode != current:
            out.append(("recompute", f"{current} → {mode}", plan_fields(mode)))
    if plan.tp > 1:
        out.append(
            (
                "sequence_parallel",
                f"{plan.sequence_parallel} → {not plan.sequence_parallel}",
                {"sequence_parallel": not plan.sequence_parallel},
            )
        )
    for z in (plan.zero - 1, plan.zero + 1):
        if 0 <= z <= 3:
            out.append(("zero", f"{plan.zero} → {z}", {"zero": z}))
    if plan.pp > 1:
        for sched, vpp in (("1f1b", 1), ("gpipe", 1), ("interleaved", plan.vpp * 2)):
            if (sched, vpp) != (plan.pipeline_schedule, plan.vpp):
                out.append(
                    (
                        "schedule",
                        f"{plan.pipeline_schedule}/vpp{plan.vpp} → {sched}/vpp{vpp}",
                        {"schedule": sched, "vpp": vpp},
                    )
                )
    for knob in ("offload_weights", "offload_activations", "offload_optimizer", "overlap_tp_comm"):
        out.append(
            (
                knob,
                f"{getattr(plan, knob)} → {not getattr(plan, knob)}",
                {knob: not getattr(plan, knob)},
            )
        )
    return out


def _main_differences(best: Estimate, other: Estimate) -> str:
    a, b = best.breakdown.__dict__, other.breakdown.__dict__
    deltas = sorted(((b[k] - a[k], k) for k in a), reverse=True)
    grew = [f"{_COMPONENTS[k]} {d:+.3g} s" for d, k in deltas if d > 1e-3 * best.step_time_s][:2]
    shrank = [
        f"{_COMPONENTS[k]} {d:+.3g} s" for d, k in reversed(deltas) if d < -1e-3 * best.step_time_s
    ][:1]
    return ", ".join(grew + shrank) or "same time components"


def explain(problem: SearchProblem, best_plan: PlanSpec, best: Estimate) -> list[Alternative]:
    """Each one-knob neighbour of the best plan, estimated and classified."""
    out = []
    for knob, change, update in _neighbours(problem, best_plan):
        data = best_plan.model_dump()
        data.update(update)
        if (
            problem.max_global_batch is not None
        ):  # the batch follows dp·micro_batch, as in the search
            unit = data["dp"] * data["micro_batch"]
            if unit > problem.max_global_batch:
                out.append(
                    Alternative(
                        knob,
                        change,
                        "invalid",
                        None,
                        None,
                        f"dp·micro_batch = {unit} exceeds max global batch {problem.max_global_batch}",
                    )
                )
                continue
            data["global_batch"] = problem.max_global_batch // unit * unit
        try:
            plan = PlanSpec.model_validate(data)
            other = estimate(problem.model, problem.system, plan)
        except (InputError, ValueError) as exc:
            out.append(Alternative(knob, change, "invalid", None, None, str(exc).splitlines()[0]))
            continue
        delta = other.step_time_s - best.step_time_s
        if other.tokens_per_step != best.tokens_per_step:
            delta = (
                other.step_time_s / other.tokens_per_step * best.tokens_per_step - best.step_time_s
            )
        if not other.fits:
            peak = other.peak_stage
            out.append(
                Alternative(
                    knob,
                    change,
                    "does not fit",
                    other.step_time_s,
                    delta,
                    f"needs {peak.peak_bytes / GiB:.1f} GiB on stage {peak.stage} > "
                    f"{peak.capacity_bytes / GiB:.0f} GiB",
                )
            )
        elif delta > 1e-12 * best.step_time_s:
            out.append(
                Alternative(
                    knob, change, "slower", other.step_time_s, delta, _main_differences(best, other)
                )
            )
        elif delta < -1e-12 * best.step_time_s:
            out.append(
                Alternative(
                    knob,
                    change,
                    "faster",
                    other.step_time_s,
                    delta,
                    "outside the searched space (an axis was restricted)",
                )
            )
        else:
            out.append(
                Alternative(
                    knob, change, "equal", other.step_time_s, delta, "no effect on this plan"
                )
            )
    return out
