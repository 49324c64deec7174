"""The typed schema of a sweep's records: one definition of a point's summary (sweep.json) and
of the sweep.csv columns, both derived from the result's own lists (report.result's breakdown and
memory parts, specs.plan.PLAN_COLUMNS)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from paraplan.specs.fields import picked
from paraplan.specs.plan import PLAN_COLUMNS
from paraplan.step.result import BREAKDOWN_FIELDS
from paraplan.step.result import MEMORY_PARTS as STAGE_MEMORY_PARTS

MEMORY_PARTS = tuple(part.key for part in STAGE_MEMORY_PARTS)


@dataclass(frozen=True)
class PlanSummary:
    """What a sweep point records of one plan (its best plan, or its nearest miss)."""

    plan: dict | None = None
    plan_label: str | None = None
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    global_batch: int | None = None
    memory: dict | None = (
        None  # peak stage: "<part>_gib" per MEMORY_PARTS, stage, peak, capacity, fits
    )
    breakdown: dict | None = None  # TimeBreakdown fields

    @classmethod
    def of(cls, est, plan) -> "PlanSummary":
        from paraplan.specs.plan_label import plan_label

        stage = est.peak_stage.to_dict()
        memory = {f"{p}_gib": stage[f"{p}_gib"] for p in MEMORY_PARTS}
        memory.update(
            stage=stage["stage"],
            peak_gib=stage["peak_gib"],
            capacity_gib=stage["capacity_gib"],
            fits=stage["fits"],
        )
        return cls(
            plan=plan.model_dump(),
            plan_label=plan_label(plan),
            **picked(est, "step_time_s tokens_per_s mfu hfu"),
            global_batch=plan.global_batch,
            memory=memory,
            breakdown=asdict(est.breakdown),
        )

    def to_dict(self) -> dict:
        return asdict(self)


EMPTY_SUMMARY: dict = PlanSummary().to_dict()
SUMMARY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PlanSummary))


GOODPUT_COLUMNS = (
    "effective_training_time_ratio",
    "expected_days",
    "days_p10",
    "days_p50",
    "days_p90",
    "expected_failures",
    "checkpoint_interval_s",
    "gpu_hours",
    "cost_usd",
    "energy_mwh",
    "emissions_tco2",
)  # sweep --goodput: of each point's goodput (goodput.plan.PlanGoodput.to_dict)


def csv_columns(
    set_paths: list[str], with_days: bool, with_goodput: bool = False
) -> list[tuple[str, Callable[[dict], object]]]:
    """(header, value of a point record) for every sweep.csv column, in order."""

    def get(*path):
        def value(r: dict):
            for key in path:
                r = (r or {}).get(key)
            return r

        return value

    columns = [("index", get("index")), ("system", get("system")), ("gpus", get("gpus"))]
    columns += [(p, get(p)) for p in set_paths]
    columns += [
        (k, get(k)) for k in ("feasible", "global_batch", "step_time_s", "tokens_per_s", "mfu")
    ]
    if with_days:
        columns.append(("time_to_train_days", get("time_to_train_days")))
    if with_goodput:
        columns += [(c, get("goodput", c)) for c in GOODPUT_COLUMNS]
    columns.append(("plan", get("plan_label")))
    columns += [(c, get("plan", c)) for c in PLAN_COLUMNS]
    columns += [
        ("peak_memory_gib", get("memory", "peak_gib")),
        ("capacity_gib", get("memory", "capacity_gib")),
    ]
    columns += [(f"{p}_gib", get("memory", f"{p}_gib")) for p in MEMORY_PARTS]
    columns += [(c, get("breakdown", c)) for c in BREAKDOWN_FIELDS]
    columns += [
        ("nearest_miss_overflow_gib", get("nearest_miss", "overflow_gib")),
        ("reason", get("reason")),
    ]
    return columns
