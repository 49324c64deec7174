"""One point of a sweep: ``run_point(task) -> record``, plain data in and out, so that the same
function runs in this process, in a process pool or as a Dask task and gives the same record.

Records carry no wall-clock value and their floats are rounded to ``FLOAT_DIGITS`` significant
digits (``rounded``); ``point_key`` hashes everything a point depends on (the journal's key).
"""

from __future__ import annotations

import hashlib
import math

from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import RuntimeFields
from paraplan.specs.system import SystemSpec
from paraplan.sweep.journal import dumps, leaves
from paraplan.sweep.schema import EMPTY_SUMMARY, PlanSummary
from paraplan.units import GiB

FLOAT_DIGITS = (
    9  # significant digits of every float written (last-bit differences between machines vanish)
)


# ---- one point ------------------------------------------------------------------------------
def point_key(task: dict) -> str:
    """Hash of the whole point (model and system specs, settings, swept values): the journal's key."""
    identity = {k: task[k] for k in ("model", "system", "settings", "swept", "set_si")}
    return hashlib.sha256(dumps(identity).encode()).hexdigest()[:32]


def rounded(value):
    """Floats to FLOAT_DIGITS significant digits (recursively); non-finite floats raise ValueError."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(value)
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def _first_non_finite(value) -> str | None:
    """The path of the first non-finite float in a record (sweep.journal.leaves), or None."""
    for path, _, leaf in leaves(value):
        if isinstance(leaf, float) and not math.isfinite(leaf):
            return path or "value"
    return None


def run_point(task: dict) -> dict:
    """Search one point; return its record (plain JSON data, floats rounded, no wall-clock value).

    A point whose result holds a non-finite number is recorded as not feasible with the reason,
    never written as ``Infinity``/``NaN``."""
    record = _run_point(task)
    bad = _first_non_finite(record)
    if bad is not None:
        keep = {k: record[k] for k in ("index", "model", *task["swept"], "set_si")}
        record = {
            **keep,
            **EMPTY_SUMMARY,
            "feasible": False,
            "top": [],
            "nearest_miss": None,
            "search": None,
            "reason": f"the model gave a non-finite value ({bad}); the inputs are outside its range",
        }
        if task["settings"]["tokens"]:
            record["time_to_train_days"] = None
    record["key"] = point_key(task)
    return rounded(record)


def _run_point(task: dict) -> dict:
    from paraplan.search.run import search

    model = ModelSpec.model_validate(task["model"])
    system = SystemSpec.model_validate(task["system"])
    record = {
        "index": task["index"],
        "model": model.name,
        **task["swept"],
        "set_si": task["set_si"],
    }
    settings = task["settings"]
    problem = _problem(task, model, system)
    record.update(
        EMPTY_SUMMARY, feasible=False, top=[], nearest_miss=None, reason=None, search=None
    )
    try:
        result = search(
            problem, top_k=settings["top"], workers=1
        )  # a sweep runs its points in parallel instead
    except (
        InputError
    ) as exc:  # this point cannot be searched (no split of the GPUs, batch too small, ...)
        record["reason"] = str(exc)
        return record
    record["search"] = {
        "candidates": result.candidates,
        "evaluated": result.evaluated,
        "feasible": result.feasible,
    }
    if result.plans:
        _record_plans(record, result.plans, settings, model, system)
    elif result.nearest_miss is not None:
        _record_nearest_miss(record, result.nearest_miss, model, system)
    else:
        record["reason"] = "no candidate plan"
    if settings["tokens"] and "time_to_train_days" not in record:
        record["time_to_train_days"] = None
    return record


def _problem(task: dict, model: ModelSpec, system: SystemSpec):
    """The point's search problem (search.space.SearchProblem) from the task's settings."""
    from paraplan.search.space import SearchProblem

    settings = task["settings"]
    return SearchProblem(
        model=model,
        system=system,
        gpus=task["swept"]["gpus"],
        seq_length=settings["seq_length"],
        global_batch=settings["global_batch"],
        max_global_batch=settings["max_global_batch"],
        dtype=settings["dtype"],
        attention=settings["attention"],
        objective=settings["objective"],
        vary_offload=not settings["no_offload"],
        vary_overlap=not settings["default_overlap"],
        vary_placement=not settings["default_placement"],
        vary_split=settings["vary_split"],
        price_per_gpu_hour=system.price_per_gpu_hour,
        **{k: tuple(v) for k, v in settings["restrictions"].items()},
        **(
            {
                "framework": settings["framework"],
                "default_overlaps": tuple(settings["default_overlaps"]),
                "runtime": RuntimeFields(**settings["runtime"]),
            }
            if "framework" in settings
            else {}
        ),
    )


def _record_plans(record: dict, plans: list, settings: dict, model=None, system=None) -> None:
    """The best plan's summary, the top plans and the time to train into ``record``."""
    best = plans[0]
    record.update(PlanSummary.of(best.estimate, best.plan).to_dict(), feasible=True)
    record["top"] = [
        {
            "rank": p.rank,
            "plan_label": PlanSummary.of(p.estimate, p.plan).plan_label,
            "plan": p.plan.model_dump(),
            "step_time_s": p.estimate.step_time_s,
            "tokens_per_s": p.estimate.tokens_per_s,
            "mfu": p.estimate.mfu,
            "peak_memory_gib": p.estimate.peak_stage.peak_bytes / GiB,
        }
        for p in plans
    ]
    if settings["tokens"]:
        record["time_to_train_days"] = best.estimate.run_totals(settings["tokens"], None)["days"]
    if settings.get("goodput") is not None:
        record["goodput"] = _goodput(best, model, system, settings)


def _goodput(best, model: ModelSpec, system: SystemSpec, settings: dict) -> dict:
    """The best plan's goodput over --tokens (goodput.plan.plan_goodput with the sweep's inputs, at
    the system's price)."""
    from paraplan.goodput.inputs import GoodputInputs
    from paraplan.goodput.plan import plan_goodput

    inputs = GoodputInputs.model_validate(settings["goodput"])
    return plan_goodput(
        best.estimate,
        model,
        system,
        best.plan,
        settings["tokens"],
        inputs,
        system.price_per_gpu_hour,
    ).to_dict()


def _record_nearest_miss(record: dict, miss: dict, model: ModelSpec, system: SystemSpec) -> None:
    """The plan that came nearest to fitting, estimated again for its summary, and the reason."""
    from paraplan.specs.plan import PlanSpec
    from paraplan.step.estimate import estimate

    plan = PlanSpec.model_validate(miss["plan"])
    near = PlanSummary.of(estimate(model, system, plan), plan).to_dict()
    near["overflow_gib"] = miss["overflow_gib"]
    record["nearest_miss"] = near
    record["reason"] = (
        f"no plan fits in memory; nearest miss needs {miss['peak_memory_gib']:.1f} GiB "
        f"of {miss['capacity_gib']:.1f} GiB per GPU"
    )
