"""Validation cases on clusters of mixed GPU types and per-stage plans (``paraplan validate --hetero``).

Schema (documented in docs/heterogeneous.md, "Cases"): a JSON/YAML file ``{"cases": [CASE, ...]}``::

    CASE = {"name", "source",
            "model":   MODEL (MISSION.md schema, plus the architecture fields of issue 10) or a catalog name,
            "cluster": CLUSTER (specs/cluster.py: pools of catalog systems, optional links),
            "plan":    STAGE_PLAN (specs/stage_plan.py: global_batch, seq_length, microbatches, stages, ...),
            "measured": {"step_time_s": float} or {"fits": false} (the trial could not run: out of memory),
            optional "reference": {"<tool>_predicted_s": float} (another tool's prediction of the same trial),
            documentation keys (group, quote, notes, record, confidence, derived) accepted and ignored}

The bundled file is ``cases/hetero/amp2022.json``, AMP's real trials converted by
``paraplan.validate.amp_import``. The report has the shape of ``validate.run.run_cases`` (so the same
tables and ``--max-mape`` apply) plus, per case, ``reference`` / ``reference_error_pct``, and a
summary of the reference tool's MAPE and of the trials that must be predicted not to fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from paraplan.catalog import load_model
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.step.result import Estimate
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.specs.cluster import ClusterSpec
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import StagePlanSpec, check_stage_plan, stage_plan_from_dict
from paraplan.units import GiB, UnitError
from paraplan.validate.case_files import SCOPE_STAGE, _read_case_file
from paraplan.validate.run import case_role, error_pct, mape, summarize

REQUIRED = ("name", "source", "model", "cluster", "plan", "measured")
DOC_KEYS = {
    "group",
    "quote",
    "notes",
    "record",
    "confidence",
    "derived",
    "tier",
    "reference",
    "evidence",
}


@dataclass(frozen=True)
class HeteroCase:
    name: str
    source: str
    file: str
    group: str
    model: ModelSpec
    cluster: ClusterSpec
    plan: StagePlanSpec
    measured: dict[str, float]
    must_not_fit: bool
    reference: dict[str, float]

    @property
    def scope(self) -> str:
        return SCOPE_STAGE

    @property
    def cv_group(self) -> str:
        """The group left out together by ``paraplan validate --hetero --cv`` (validate.cv)."""
        return self.group


def bundled_hetero_files() -> list[Any]:
    folder = resources.files("paraplan.validate") / "cases" / "hetero"
    return sorted((p for p in folder.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)


def is_hetero_file(path: str | Path) -> bool:
    """True when the file's first case has a ``cluster`` (this module's schema)."""
    try:
        _, raws = _read_case_file(Path(path))
    except InputError:
        return False
    return bool(raws) and isinstance(raws[0], dict) and "cluster" in raws[0]


def _case(raw: Any, stem: str, index: int) -> HeteroCase:
    label = f"{stem}: case {index}"
    if not isinstance(raw, dict):
        raise InputError(f"{label}: must be a mapping with {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise InputError(f"{label}: {missing[0]}: missing; a case needs {', '.join(REQUIRED)}")
    unknown = sorted(set(raw) - set(REQUIRED) - DOC_KEYS)
    if unknown:
        raise InputError(
            f"{label}: {unknown[0]}: unknown field; allowed: {', '.join(REQUIRED + tuple(sorted(DOC_KEYS)))}"
        )
    label = f"{stem}: case {raw['name']!r}"
    try:
        model = load_model(raw["model"], field="model", referenced=True)
        cluster = cluster_from_dict(raw["cluster"], field="cluster")
        plan = stage_plan_from_dict(raw["plan"], field="plan")
        check_stage_plan(plan, model, cluster)
    except (InputError, UnitError) as exc:
        raise InputError(f"{label}: {exc}") from None
    measured = raw["measured"]
    if measured == {"fits": False}:
        values, oom = {}, True
    elif (
        isinstance(measured, dict)
        and set(measured) == {"step_time_s"}
        and isinstance(measured["step_time_s"], (int, float))
        and measured["step_time_s"] > 0
    ):
        values, oom = {"step_time_s": float(measured["step_time_s"])}, False
    else:
        raise InputError(
            f"{label}: measured: {measured!r} is not allowed; give {{'step_time_s': seconds > 0}} or {{'fits': false}}"
        )
    ref = raw.get("reference") or {}
    return HeteroCase(
        str(raw["name"]),
        str(raw["source"]),
        stem,
        str(raw.get("group", stem)),
        model,
        cluster,
        plan,
        values,
        oom,
        {k: float(v) for k, v in ref.items() if isinstance(v, (int, float))},
    )


def load_hetero_cases(paths=None) -> list[HeteroCase]:
    files = [Path(p) for p in paths] if paths else bundled_hetero_files()
    cases = []
    for path in files:
        stem, raws = _read_case_file(path)
        cases += [_case(raw, stem, i) for i, raw in enumerate(raws)]
    return cases


def _predicted(est: Estimate) -> dict[str, Any]:
    peak = max(est.stages, key=lambda s: s.peak_bytes / s.capacity_bytes)
    return {
        "step_time_s": est.step_time_s,
        "fits": est.fits,
        "peak_memory_gib": peak.peak_bytes / GiB,
        "peak_stage": peak.stage,
        "peak_fraction_of_capacity": peak.peak_bytes / peak.capacity_bytes,
        "problems": list(est.problems),
    }


def run_hetero_case(case: HeteroCase) -> dict:
    est = estimate_stage_plan(case.model, case.cluster, case.plan)
    predicted = _predicted(est)
    entry = {
        "name": case.name,
        "source": case.source,
        "group": case.group,
        "role": case_role(
            case
        ),  # calibration: a constant of validate.fitted was fitted on the case's group
        "scope": case.scope,
        "status": "ok",
        "predicted": predicted,
        "measured": dict(case.measured),
        "error_pct": {k: error_pct(predicted[k], v) for k, v in case.measured.items()},
        "reference": dict(case.reference),
        "reference_error_pct": {},
        # where the time goes: the step's parts and each stage's per-micro-batch work and tail
        "detail": {
            "breakdown": dict(est.breakdown.__dict__),
            "stage_work_s": list(est.stage_work_s),
            "stage_tail_s": list(est.stage_tail_s),
        },
    }
    if "step_time_s" in case.measured:
        entry["reference_error_pct"] = {
            k: error_pct(v, case.measured["step_time_s"])
            for k, v in case.reference.items()
            if k.endswith("_predicted_s")
        }
    if case.must_not_fit:
        entry["must_not_fit"] = True
    return entry


def run_hetero_cases(cases: list[HeteroCase]) -> dict:
    entries = [run_hetero_case(c) for c in cases]
    summary = summarize(entries, [c.file for c in cases])
    groups: dict[str, dict] = {}
    for e in entries:
        g = groups.setdefault(
            e["group"],
            {
                "cases": 0,
                "step_time_cases": 0,
                "errors": [],
                "reference": {},
                "oom_cases": 0,
                "oom_predicted": 0,
            },
        )
        g["cases"] += 1
        if "step_time_s" in e["error_pct"]:
            g["step_time_cases"] += 1
            g["errors"].append(e["error_pct"]["step_time_s"])
            for k, v in e["reference_error_pct"].items():
                g["reference"].setdefault(k, []).append(v)
        if e.get("must_not_fit"):
            g["oom_cases"] += 1
            g["oom_predicted"] += 0 if e["predicted"]["fits"] else 1
    summary["by_group"] = {
        name: {
            "cases": g["cases"],
            "step_time_cases": g["step_time_cases"],
            "step_time_s_mape_pct": mape(g["errors"]),
            "reference_mape_pct": {k: mape(v) for k, v in g["reference"].items()},
            "oom_cases": g["oom_cases"],
            "oom_predicted_not_to_fit": g["oom_predicted"],
        }
        for name, g in groups.items()
    }
    return {"cases": entries, "summary": summary}
