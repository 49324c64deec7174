"""CLI paths for non-uniform plans and mixed clusters (issue 10), reached from ``estimate --plan`` and
``search --cluster`` / ``search --non-uniform`` (their modules dispatch here on the inputs' shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from paraplan.catalog import _read_file, load_model, load_system
from paraplan.catalog.clusters import load_cluster
from paraplan.cli.app import _stdout
from paraplan.report.text_table import simple_table
from paraplan.specs.cluster import ClusterSpec, uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import (
    StagePlanSpec,
    is_stage_plan,
    stage_plan_from_dict,
    stage_plan_to_dict,
)
from paraplan.specs.system import SystemSpec
from paraplan.units import GiB

if TYPE_CHECKING:
    from paraplan.search.staged.hetero import HeteroResult
    from paraplan.step.result import Estimate


def resolve_cluster(
    cluster: str | Path | None, system: str | None, gpus: int | None
) -> ClusterSpec:
    """``--cluster FILE``, or the uniform special case ``--system`` (+ ``--gpus``)."""
    if cluster is not None:
        if system is not None:
            raise InputError("--cluster: give either --cluster or --system, not both")
        return load_cluster(cluster, field="cluster")
    if system is None:
        raise InputError("--system: missing; give --system (and --gpus) or --cluster FILE")
    if gpus is None or gpus <= 0:
        raise InputError(f"--gpus: {gpus!r} is not allowed; give the number of GPUs with --system")
    return uniform_cluster(load_system(system, field="system"), gpus)


def plan_file_is_non_uniform(path: Path) -> bool:
    """True when ``--plan FILE`` holds a list of stages (specs/stage_plan.py); any other file (a uniform
    plan, a search result, an export) is left to the uniform path and its own errors."""
    try:
        return is_stage_plan(_read_file(Path(path), "--plan"))
    except InputError:
        return False


def estimate_plan_file(
    model: str,
    plan: Path,
    cluster: str | None,
    system: str | None,
    as_json: bool,
    framework: str | None = None,
    sets: list[str] | None = None,
) -> bool:
    """``paraplan estimate --plan FILE`` for a non-uniform plan, under the ``--framework`` profile when given
    (its systems and the plan defaults the file leaves unset, as on a uniform plan) and with the ``--set``
    values on the model and every pool's system after it (cost.frameworks.cluster_specs, the order of a
    uniform plan's run_specs); True when it fits."""
    from paraplan.cli.app import load_framework_option
    from paraplan.cli.estimate_plan import set_overrides
    from paraplan.cost.frameworks import cluster_specs, framework_plan_fields
    from paraplan.step.per_stage import estimate_stage_plan

    model_spec = load_model(model, field="model")
    profile = load_framework_option(framework)
    data = _read_file(Path(plan), "plan")
    if profile is not None and isinstance(data, dict):  # else stage_plan_from_dict's refusal
        data = framework_plan_fields(profile, data)
    plan_spec = stage_plan_from_dict(data, "plan")
    pool_names = {d.pool for s in plan_spec.stages for d in s.devices}
    cluster_spec = resolve_cluster(cluster, system, plan_spec.gpus if system is not None else None)
    model_spec, cluster_spec = cluster_specs(model_spec, cluster_spec, profile, set_overrides(sets))
    if (
        cluster_spec.is_uniform
        and system is not None
        and pool_names != {cluster_spec.pools[0].name}
    ):
        raise InputError(
            f"plan.stages: pools {sorted(pool_names)} are not allowed with --system; name the pool {cluster_spec.pools[0].name!r} or give --cluster"
        )
    est = estimate_stage_plan(model_spec, cluster_spec, plan_spec)
    print_stage_estimate(est, model_spec.name, cluster_spec.name, plan_spec, as_json)
    return est.fits


def estimate_uniform_stages(
    model_spec: ModelSpec,
    system_spec: SystemSpec,
    plan: PlanSpec,
    as_json: bool,
    width: int | None = None,
) -> bool:
    """``paraplan estimate`` with the uniform options for an encoder-decoder: the plan's per-stage form
    (specs.uniform_stages.uniform_stage_plan) costed by step.per_stage on the uniform cluster; True when it fits."""
    from paraplan.specs.uniform_stages import uniform_stage_plan
    from paraplan.step.per_stage import estimate_stage_plan

    cluster_spec = uniform_cluster(system_spec, plan.gpus)
    engine = system_spec.accelerator.efficiency.runtime.pipeline_engine  # the profile's
    plan_spec = uniform_stage_plan(plan, model_spec, cluster_spec.pools[0].name, engine)
    est = estimate_stage_plan(model_spec, cluster_spec, plan_spec)
    layers = ",".join(str(s.layers) for s in plan_spec.stages)
    note = (
        f"{model_spec.architecture}: costed stage by stage (the per-stage estimator, step.per_stage) as the per-stage plan of these "
        f"options, transformer layers per stage {layers} (docs/heterogeneous.md)"
    )
    print_stage_estimate(
        est, model_spec.name, cluster_spec.name, plan_spec, as_json, width, (note,)
    )
    return est.fits


def print_stage_estimate(
    est: Estimate,
    model_name: str,
    cluster_name: str,
    plan_spec: StagePlanSpec,
    as_json: bool,
    width: int | None = None,
    notes: tuple[str, ...] = (),
) -> None:
    """The report of a per-stage estimate: JSON (the estimate and its per-stage plan), or the stage and step tables
    (a cp, ep or etp column where a stage runs that degree above 1)."""
    if as_json:
        print(json.dumps(est.to_dict() | {"stage_plan": stage_plan_to_dict(plan_spec)}, indent=2))
        return
    console = _stdout(width)
    console.print(
        f"{model_name} on {cluster_name}: {plan_spec.pp} stages, {plan_spec.gpus} GPUs, "
        f"{plan_spec.n_microbatches} micro-batches, global batch {plan_spec.global_batch}, {plan_spec.dtype}"
    )
    for line in notes:
        console.print(line)
    # the degrees beyond tp and dp, each shown where a stage runs it
    extra = [d for d in ("cp", "ep", "etp") if any(s.get(d, 1) > 1 for s in est.stage_summary)]
    table = simple_table(
        "Stages",
        "stage",
        "devices",
        "blocks",
        "tp",
        *extra,
        "dp",
        "micro-batch",
        "recompute",
        "work/µbatch (ms)",
        "tail (ms)",
        "peak (GiB)",
        "capacity (GiB)",
        "fits",
        numeric_from=3,
    )
    for summary, work, tail, mem in zip(
        est.stage_summary, est.stage_work_s, est.stage_tail_s, est.stages
    ):
        devices = " + ".join(f"{d['gpus']} {d['pool']}" for d in summary["devices"])
        table.add_row(
            str(summary["stage"]),
            devices,
            f"{summary['blocks'][0]}-{summary['blocks'][1]}",
            str(summary["tp"]),
            *(str(summary[d]) for d in extra),
            str(summary["dp"]),
            str(summary["micro_batch"]),
            summary["recompute"],
            f"{work * 1e3:.2f}",
            f"{tail * 1e3:.2f}",
            f"{mem.peak_bytes / GiB:.2f}",
            f"{mem.capacity_bytes / GiB:.1f}",
            "yes" if mem.fits else "NO",
        )
    console.print(table)
    parts = simple_table("Step", "part", "seconds", numeric_from=1)
    for name, value in est.breakdown.__dict__.items():
        if value:
            parts.add_row(name.removesuffix("_s"), f"{value:.4f}")
    parts.add_section()
    parts.add_row("step time", f"{est.step_time_s:.4f}")
    console.print(parts)
    console.print(
        f"{est.tokens_per_s:,.0f} tokens/s, MFU {est.mfu:.1%}; "
        + ("fits in memory" if est.fits else "does NOT fit in memory")
    )


def search_hetero(
    model: str,
    cluster: str | None,
    system: str | None,
    gpus: int | None,
    non_uniform: bool,
    seq_length: int,
    global_batch: int,
    dtype: str,
    attention: str,
    top: int,
    as_json: bool,
    time_budget_s: float = 5.0,
    width: int | None = None,
    note: str = "",
    restrictions: dict | None = None,
    framework: str | None = None,
    attention_given: bool = True,
    dtype_given: bool = True,
) -> HeteroResult:
    """``paraplan search --cluster FILE`` (AMP-style) or ``--non-uniform`` (Aceso-style); ``note`` ends the header
    line; ``restrictions``: HeteroProblem axis fields (AMP-style only: tps, pps, micro_batches, recompute;
    both: cps, schedules, search.staged.axes, and an MoE model's ep, etp, dispatchers and expert_load_cv,
    search.staged.experts);
    ``framework``: a profile's stack on every pool and its plan defaults (profile_fields), as
    ``estimate --plan --framework`` prices a per-stage plan; ``attention_given``: --attention was stated
    (else the profile's attention default wins); ``dtype_given``: --dtype was stated. Those not stated
    are chosen for the cluster's accelerators (cli.app.accelerator_precision_defaults: fp16 and unfused
    attention where a pool is a V100 / T4), as ``search --system`` chooses them."""
    from paraplan.cli.app import accelerator_precision_defaults, load_framework_option
    from paraplan.search.staged.axes import axes_violations
    from paraplan.search.staged.hetero import HeteroProblem, search_cluster, under_profile
    from paraplan.search.staged.non_uniform import search_non_uniform

    model_spec = load_model(model, field="model")
    profile = load_framework_option(framework)  # an unknown name is one line before anything runs
    cluster_spec = resolve_cluster(cluster, system, gpus)
    given = {k: v for k, v in (restrictions or {}).items() if v is not None}
    stated = {n for n, g in (("dtype", dtype_given), ("attention", attention_given)) if g}
    chosen = accelerator_precision_defaults(
        stated, [p.system.accelerator for p in cluster_spec.pools]
    )
    dtype, attention = chosen.get("dtype", dtype), chosen.get("attention", attention)
    attention_given = attention_given or "attention" in chosen and attention != "flash"
    if profile is not None:
        stated = given | ({"attention": attention} if attention_given else {})
        cluster_spec, given = under_profile(profile, cluster_spec, stated)
        attention = given.pop("attention")
    problem = HeteroProblem(
        model_spec, cluster_spec, global_batch, seq_length, dtype, attention, **given
    )
    if refused := axes_violations(problem, seeded=non_uniform):
        raise InputError.from_violations(refused)
    result = (
        search_non_uniform(problem, top_k=top, time_budget_s=time_budget_s)
        if non_uniform
        else search_cluster(problem, top_k=top, time_budget_s=time_budget_s)
    )
    if as_json:
        print(json.dumps(result.to_dict() | ({"note": note} if note else {}), indent=2))
        return result
    console = _stdout(width)
    console.print(
        f"{model_spec.name} on {cluster_spec.name} ({cluster_spec.gpus} GPUs), seq {seq_length}, "
        f"global batch {global_batch}, {dtype}; search {result.mode}"
        + (f"; {note}" if note else "")
    )
    table = simple_table("Plans", "rank", "step (s)", "plan", numeric_from=1)
    for i, c in enumerate(result.plans, 1):
        table.add_row(str(i), f"{c.step_time_s:.4f}", c.label)
    console.print(table)
    if result.trajectory:
        traj = simple_table("Trajectory", "iteration", "move", "step (s)", "fits", numeric_from=2)
        for s in result.trajectory:
            if s.improved:
                traj.add_row(
                    str(s.iteration), s.move, f"{s.step_time_s:.4f}", "yes" if s.fits else "no"
                )
        console.print(traj)
    if result.stopped and result.plans:
        console.print(
            f"stopped: {result.stopped}; the search was cut by --time-budget, the plans above are the "
            "best of the part searched"
        )
    console.print(
        f"{result.evaluated:,} candidates in {result.elapsed_s:.2f} s"
        + (
            ""
            if result.plans or result.stopped
            else "; no plan fits"
            if result.evaluated
            else "; no candidate: the axis restrictions leave none (tp: powers of two within a node that "
            "divide the heads; pp: divisors of the GPUs / tp)"
        )
    )
    if result.space and not result.stopped and result.mode == "alleviation":
        console.print(  # a local search ends before its space does: it never claims the best of all
            "finished: bottleneck alleviation ran to its end within the time budget, a local search "
            f"from the best uniform plans; the non-uniform space holds {result.space:,} candidates "
            "before the per-stage rules"
        )
    elif result.space and not result.stopped:
        console.print(
            f"finished: the search ran to the end of its space ({result.space:,} candidates before "
            "the per-stage rules)"
            + ("; the plans above are the best of all" if result.plans else "")
        )
    if result.stopped and not result.plans:
        console.print(
            "no plan found: the time budget ran out before any feasible plan was found "
            f"(stopped: {result.stopped}); give a larger --time-budget"
        )
    return result
