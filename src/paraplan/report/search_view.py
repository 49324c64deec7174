"""Text, CSV and JSON views of a search result.

What the objective ranks, and in which unit, is stated once here (``OBJECTIVES``) and used by the
table title, the JSON document and the CSV. Cost figures: USD per step = step time · GPUs · price /
3600; per million tokens = that / tokens per step · 10⁶.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from paraplan.report.text_table import simple_table
from paraplan.search.run import RankedPlan, SearchResult
from paraplan.search.space import SearchProblem
from paraplan.specs.plan import PlanSpec
from paraplan.specs.plan_label import plan_label
from paraplan.specs.rules_offload import offload_rule
from paraplan.units import GiB

if TYPE_CHECKING:  # search.explain loads with --explain only (issue 31)
    from paraplan.search.explain import Alternative


@dataclass(frozen=True)
class Objective:
    """What a search objective ranks: its title, the unit of ``objective`` values, and their meaning."""

    name: str
    title: str  # the table title
    ranked_by: str
    unit: str
    meaning: str

    def to_dict(self) -> dict:
        return {"name": self.name, "unit": self.unit, "better": "lower", "meaning": self.meaning}


OBJECTIVES = {
    "time": Objective(
        "time",
        "Fastest plans that fit",
        "time per token",
        "s/token",
        "step time / tokens per step (at a fixed global batch: the step time order)",
    ),
    "cost": Objective(
        "cost",
        "Cheapest plans that fit",
        "USD per token",
        "USD/token",
        "step time · GPUs · USD per GPU-hour / 3600 / tokens per step",
    ),
    "mfu": Objective(
        "mfu",
        "Plans with the highest MFU that fit",
        "MFU",
        "-MFU (fraction)",
        "minus the model FLOPs utilisation, so that lower is better as for the other objectives",
    ),
    "robust": Objective(
        "robust",
        "Fastest plans that fit, pessimistically",
        "time per token at the pessimistic end of the error band",
        "s/token",
        "pessimistic end of the error band (cross-validated residuals of the plan's stack, "
        "generation and traits, validate.band) / tokens per step",
    ),
}


# the bands of the plans shown lately, by the identity of (ranked plan, problem), each kept with the two objects (so
# neither identity is reused while it is here): the table, the note under it and the JSON document each read a plan's
# band (issue 31: three error_band calls per plan)
_BANDS: dict[tuple[int, int], tuple] = {}


def plan_band(ranked: RankedPlan, problem: SearchProblem):
    """The error band of a ranked plan (validate.band.error_band): computed for the plans shown only, once each."""
    from paraplan.validate.band import error_band

    known = _BANDS.get((id(ranked), id(problem)))
    if known is not None and known[0] is ranked and known[1] is problem:
        return known[2]
    band = error_band(
        problem.model, problem.system, ranked.plan, ranked.estimate.step_time_s, problem.framework
    )
    if len(_BANDS) >= 64:
        _BANDS.clear()
    _BANDS[(id(ranked), id(problem))] = (ranked, problem, band)
    return band


def band_note(result: SearchResult, problem: SearchProblem) -> str | None:
    """The line under the table: what the band column means, and the features of the shown plans no
    validation case has (the '*' rows)."""
    from paraplan.validate.band import CLAIMED_COVERAGE_PCT

    bands = [plan_band(r, problem) for r in result.plans]
    unvalidated = sorted({f for b in bands for f in b.extrapolated})
    text = (
        f"band: range claimed to hold the true step time of {CLAIMED_COVERAGE_PCT} % of runs, from the "
        "cross-validated residuals of the validation cases of each plan's stack, generation and "
        "traits (paraplan validate; docs/validation.md)"
    )
    priors = sorted({b.basis for b in bands if b.prior})
    if priors:
        text += "; " + "; ".join(priors)
    if unvalidated:
        text += f"; * extrapolated, no validation case has: {', '.join(unvalidated)}"
    return text


def table_title(problem: SearchProblem) -> str:
    """'Fastest plans that fit (ranked by step time)', 'Cheapest plans ... at $2.50/GPU-hour', ..."""
    objective = OBJECTIVES[problem.objective]
    ranked_by = objective.ranked_by
    if problem.objective == "time" and problem.global_batch is not None:
        ranked_by = "step time"
    if problem.objective == "robust" and problem.global_batch is not None:
        ranked_by = "step time at the pessimistic end of the error band"
    if problem.objective == "cost":
        ranked_by += f" at ${problem.price_per_gpu_hour:.2f}/GPU-hour"
    return f"{objective.title} (ranked by {ranked_by})"


def cost_usd_per_step(ranked: RankedPlan, problem: SearchProblem) -> float | None:
    """USD per step = step time · GPUs · USD per GPU-hour / 3600 (None without a price)."""
    if problem.price_per_gpu_hour is None:
        return None
    return ranked.estimate.step_time_s * problem.gpus * problem.price_per_gpu_hour / 3600.0


def equivalent_text(plan: PlanSpec, other: PlanSpec) -> str:
    """How ``other`` (same time and memory, search.ranking groups) differs from ``plan``, in label
    words: 'tp-dp-cp-pp', 'offload:w instead of ...'."""
    mine, theirs = plan_label(plan).split(), plan_label(other).split()
    added = [w for w in theirs if w not in mine]
    removed = [w for w in mine if w not in theirs]
    text = " ".join(added) or "without"
    return (
        f"{text} instead of {' '.join(removed)}"
        if removed and added
        else (f"without {' '.join(removed)}" if removed else text)
    )


def plan_cell(ranked: RankedPlan) -> str:
    """The plan label, and the plans with the same time and memory when there are any."""
    label = plan_label(ranked.plan)
    if not ranked.equivalents:
        return label
    return f"{label} (same time and memory: {'; '.join(equivalent_text(ranked.plan, q) for q in ranked.equivalents)})"


def plan_figures(ranked: RankedPlan, problem: SearchProblem, tokens: float | None = None) -> dict:
    """The figures of one ranked plan beyond the estimate: its label and the labels of the plans
    with the same time and memory, cost per step and per million tokens, and for a run of
    ``tokens`` tokens its days, GPU-hours and cost."""
    e = ranked.estimate
    out: dict = {
        "plan_label": plan_label(ranked.plan),
        "equivalent_plan_labels": [plan_label(q) for q in ranked.equivalents],
    }
    per_step = cost_usd_per_step(ranked, problem)
    if per_step is not None:
        out["cost_usd_per_step"] = per_step
        out["cost_usd_per_million_tokens"] = per_step / e.tokens_per_step * 1e6
    if tokens is not None:
        out["run"] = e.run_totals(tokens, problem.price_per_gpu_hour)
    out["error_band"] = plan_band(ranked, problem).to_dict()
    return out


def plans_table(
    result: SearchResult,
    problem: SearchProblem | None = None,
    tokens: float | None = None,
    title: str | None = None,
):
    """Top plans with step time, tokens/s, MFU, peak memory and the main time components; with the
    cost objective also USD per step and per million tokens, with ``tokens`` the run's days (and
    cost). The plan goes on its own line under its row when the table is too wide for it."""
    cost = (
        problem is not None
        and problem.objective == "cost"
        and problem.price_per_gpu_hour is not None
    )
    run = tokens is not None and problem is not None
    run_cost = run and problem.price_per_gpu_hour is not None
    extra = (
        (["$/step", "$/M tokens"] if cost else [])
        + (["run days"] if run else [])
        + (["run $"] if run_cost else [])
    )
    if title is None:
        title = table_title(problem) if problem is not None else OBJECTIVES["time"].title
    table = simple_table(
        title,
        "#",
        "plan",
        "global batch",
        "step s",
        "band",
        "tokens/s",
        "MFU",
        "peak GiB",
        "compute s",
        "bubble s",
        "comm s",
        *extra,
        numeric_from=2,
        foldable=(),
        detach=1,
    )
    for ranked in result.plans:
        e, b = ranked.estimate, ranked.estimate.breakdown
        comm = b.tp_comm_s + b.cp_comm_s + b.pp_comm_s + b.ep_comm_s + b.dp_comm_s
        cells = [
            str(ranked.rank),
            plan_cell(ranked),
            str(ranked.plan.global_batch),
            f"{e.step_time_s:.3f}",
            plan_band(ranked, problem).text() if problem is not None else "",
            f"{e.tokens_per_s:,.0f}",
            f"{e.mfu:.1%}",
            f"{e.peak_stage.peak_bytes / GiB:.1f}",
            f"{b.forward_s + b.backward_s + b.recompute_s:.3f}",
            f"{b.bubble_s:.3f}",
            f"{comm:.3f}",
        ]
        figures = plan_figures(ranked, problem, tokens) if problem is not None else {}
        if cost:
            cells += [
                f"{figures['cost_usd_per_step']:.4g}",
                f"{figures['cost_usd_per_million_tokens']:.4g}",
            ]
        if run:
            cells.append(f"{figures['run']['days']:,.1f}")
        if run_cost:
            cells.append(f"{figures['run']['cost_usd']:,.0f}")
        table.add_row(*cells)
    return table


def summary_line(result: SearchResult) -> str:
    pruned = result.candidates - result.evaluated
    rest = f"; {pruned:,} ruled out by an admissible time bound" if pruned else ""
    return (
        f"{result.candidates:,} candidate plans ({result.rows:,} per-layer configurations); "
        f"{result.evaluated:,} evaluated, {result.feasible:,} of those fit{rest}; {result.seconds:.2f} s"
    )


def nearest_miss_line(result: SearchResult, problem: SearchProblem | None = None) -> str:
    """Nothing fits: the plan that came closest, by how much, and what could still make one fit."""
    miss = result.nearest_miss
    if miss is None:
        return "no plan in the searched space fits, and none was evaluated"
    plan = PlanSpec.model_validate(miss["plan"])
    text = (
        f"no plan fits in memory. Nearest miss: {plan_label(plan)} needs {miss['peak_memory_gib']:.1f} GiB "
        f"per GPU > {miss['capacity_gib']:.0f} GiB (over by {miss['overflow_gib']:.1f} GiB)."
    )
    if problem is None:
        return text
    ways = []
    restricted = [
        f"--{flag}"
        for flag, value in (
            ("tp", problem.tp),
            ("pp", problem.pp),
            ("cp", problem.cp),
            ("micro-batch", problem.micro_batch),
            ("recompute", problem.recompute),
            ("zero", problem.zero),
            ("schedule", problem.schedules),
        )
        if value is not None
    ]
    if restricted:
        ways.append(f"fewer restrictions ({', '.join(restricted)})")
    acc = problem.system.accelerator
    offloadable = not offload_rule(True, acc.host_bandwidth, acc.host_memory, problem.system.name)
    if not problem.vary_offload and offloadable:
        ways.append("allowing offload (without --no-offload)")
    ways += ["more GPUs", "a smaller global batch or sequence", "GPUs with more memory"]
    return f"{text} What may make a plan fit: {'; '.join(ways)}."


def explain_band_lines(ranked: RankedPlan, problem: SearchProblem) -> list[str]:
    """What --explain says about the best plan's validation: its error band and its unvalidated knobs."""
    band = plan_band(ranked, problem)
    lines = [
        f"the best plan's error band ({band.coverage_pct} % claimed): step {band.low_s:.4g} to "
        f"{band.high_s:.4g} s ({band.low_pct:+.1f} % / {band.high_pct:+.1f} %), {band.basis}"
    ]
    lines.append(
        "unvalidated knobs (no validation case has them): " + ", ".join(band.extrapolated)
        if band.extrapolated
        else "every feature of the best plan is covered by validation cases"
    )
    return lines


def explain_table(alternatives: list[Alternative], best_time_s: float):
    """One row per one-knob neighbour of the best plan: what changed and what decided."""
    table = simple_table(
        "Why the best plan wins (one knob changed at a time)",
        "knob",
        "change",
        "verdict",
        "Δ step",
        "reason",
        numeric_from=3,
        foldable=(1, 4),
    )
    for alt in alternatives:
        delta = "" if alt.delta_s is None else f"{alt.delta_s / best_time_s:+.1%}"
        table.add_row(alt.knob, alt.change, alt.verdict, delta, alt.reason)
    return table


def problem_dict(problem: SearchProblem, tokens: float | None = None) -> dict:
    """What was searched: model, system, GPUs, batch, sequence, datatype, objective and price, and
    the axis restrictions (None = every value)."""
    return {
        "model": problem.model.name,
        "system": problem.system.name,
        "gpus": problem.gpus,
        "seq_length": problem.seq_length,
        "global_batch": problem.global_batch,
        "max_global_batch": problem.max_global_batch,
        "dtype": problem.dtype,
        "attention": problem.attention,
        "objective": problem.objective,
        "framework": problem.framework,
        "price_per_gpu_hour": problem.price_per_gpu_hour,
        "tokens": tokens,
        # the router's expert spread every plan is priced at, where the search states one (--expert-load-cv)
        **(
            {"expert_load_cv": problem.expert_load_cv} if problem.expert_load_cv is not None else {}
        ),
        "restrictions": {
            "tp": problem.tp,
            "pp": problem.pp,
            "cp": problem.cp,
            "micro_batch": problem.micro_batch,
            "recompute": problem.recompute,
            "zero": problem.zero,
            "sequence_parallel": problem.sequence_parallel,
            "schedules": problem.schedules,
            "vary_offload": problem.vary_offload,
            "vary_overlap": problem.vary_overlap,
            "vary_placement": problem.vary_placement,
            "vary_split": problem.vary_split,
        },
    }


def search_document(
    problem: SearchProblem, result: SearchResult, tokens: float | None = None
) -> dict:
    """The JSON of ``paraplan search --json``: the problem, the objective and its unit, the ranked
    plans (with cost and run figures), the counts, and — apart, under ``timing`` — the wall-clock
    time, so that everything but ``timing`` is the same on every run."""
    body = result.to_dict()
    seconds = body.pop("seconds")
    plans = body.pop("plans")
    for item, ranked in zip(plans, result.plans):
        item.update(plan_figures(ranked, problem, tokens))
    if result.robust_exact is not None:
        body["robust_exact"] = result.robust_exact
    return {
        "problem": problem_dict(problem, tokens),
        "objective": OBJECTIVES[problem.objective].to_dict(),
        "plans": plans,
        **body,
        "timing": {"search_s": seconds},
    }
