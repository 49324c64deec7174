"""Compare predictions with published measurements (``paraplan validate``).

Cases come from the bundled ``paraplan/validate/cases/*.json`` or from user files (JSON or YAML,
schema in MISSION.md, "Validation-case schema"). For each case the plan is estimated and the
predicted metrics are compared with the measured ones; the signed error is
``error_pct = 100 · (predicted / measured − 1)`` (positive = paraplan over-predicts).

Memory scope rule (``MEMORY_SCOPE_RULE``)
-----------------------------------------
Measured memory figures are per GPU on the first pipeline stage. Korthikanti et al. 2022
(arXiv:2205.05198) Figure 1, however, counts only the transformer layers: its parameter bar is
exactly 18 bytes × 12·l·h²/t for the stage's l layers (22B: 18 · 12·48·6144²/8 B = 45.5625 GiB),
leaving out the embedding table that the first stage also holds, and its §4 restricts the
activation analysis to the transformer layers. Cases whose ``source`` names both "Korthikanti" and
"Figure 1" are therefore compared on the transformer-layer fields of stage 0
(``StageMemory.transformer_weights_and_optimizer_bytes`` / ``transformer_activations_bytes``);
their whole-stage values are still reported as ``stage_weights_and_optimizer_gib`` /
``stage_activations_gib``. Every case carries ``"scope"``: ``"transformer_layers"`` or ``"stage"``.

Report format (``run_cases``)::

    {"cases": [{"name", "source", "scope", "predicted": {...}, "measured": {...}, "error_pct": {...}}],
     "summary": {"cases", "step_time_s_mape_pct", "weights_and_optimizer_gib_mape_pct",
                 "activations_gib_mape_pct", "peak_memory_gib_mape_pct", "<metric>_cases",
                 "max_abs_error_pct", "max_abs_error_case", "max_abs_error_metric",
                 "by_source": {file stem: {"cases", "step_time_cases", "step_time_s_mape_pct",
                                           ..., "names": [...]}}}}

A MAPE is ``None`` when no case measures that metric.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from paraplan.catalog import load_model, load_system
from paraplan.estimate import check_plan, estimate
from paraplan.report.result import Estimate
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_input_error
from paraplan.specs.system import SystemSpec
from paraplan.units import GiB, UnitError

METRICS = ("step_time_s", "weights_and_optimizer_gib", "activations_gib", "peak_memory_gib")
CASE_KEYS = ("name", "source", "model", "system", "plan", "measured")

SCOPE_TRANSFORMER = "transformer_layers"
SCOPE_STAGE = "stage"
TRANSFORMER_SCOPE_MARKERS = ("Korthikanti", "Figure 1")
MEMORY_SCOPE_RULE = (
    "Memory figures are per GPU on the first pipeline stage. Korthikanti et al. 2022 (arXiv:2205.05198) "
    "Figure 1 counts only the transformer layers: its parameter bar is exactly 18 bytes × 12·l·h²/t for the "
    "stage's l layers (22B: 18 · 12·48·6144²/8 B = 45.5625 GiB), without the embedding table the first stage "
    "also holds, and §4 of the paper restricts its activation analysis to the transformer layers. Cases whose "
    "source names both \"Korthikanti\" and \"Figure 1\" are therefore compared on the transformer layers of "
    "stage 0 (scope transformer_layers); their whole-stage values are reported too "
    "(stage_weights_and_optimizer_gib, stage_activations_gib). All other cases compare the whole first stage "
    "(scope stage)."
)


@dataclass(frozen=True)
class Case:
    """One validated measurement: inputs ready for ``estimate`` and the measured metrics."""

    name: str
    source: str
    file: str  # stem of the case file, groups the per-source summary
    model: ModelSpec
    system: SystemSpec
    plan: PlanSpec
    measured: dict[str, float]

    @property
    def scope(self) -> str:
        return memory_scope(self.source)


def memory_scope(source: str) -> str:
    """``"transformer_layers"`` for Korthikanti et al. Figure 1 cases, else ``"stage"`` (module docstring)."""
    return SCOPE_TRANSFORMER if all(m in source for m in TRANSFORMER_SCOPE_MARKERS) else SCOPE_STAGE


# ---- loading ---------------------------------------------------------------------------------
def bundled_case_files() -> list[Any]:
    """The case files shipped in ``paraplan/validate/cases``, sorted by name."""
    folder = resources.files("paraplan.validate") / "cases"
    return sorted((p for p in folder.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)


def _read_case_file(path: Any) -> tuple[str, list]:
    """(file stem, raw case list) of a JSON or YAML case file; InputError naming the file otherwise."""
    from paraplan.io import read_document  # bounded, strict reading shared by every input file

    name = path.name
    label = str(path)
    data = read_document(path, "cases")
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise InputError(f"cases: {label!r} must hold a mapping with a list under 'cases'")
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return stem, data["cases"]


def _measured(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"measured: {raw!r} is not allowed; give a mapping with any of {', '.join(METRICS)}")
    out = {}
    for key, value in raw.items():
        if key not in METRICS:
            raise InputError(f"measured.{key}: unknown metric; allowed: {', '.join(METRICS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
            raise InputError(f"measured.{key}: {value!r} is not allowed; must be a positive number")
        out[key] = float(value)
    return out


def _plan(raw: Any) -> PlanSpec:
    if not isinstance(raw, dict):
        raise InputError(f"plan: {raw!r} is not allowed; must be a mapping of plan fields")
    try:
        return PlanSpec.model_validate(raw)
    except ValidationError as exc:
        raise plan_input_error(exc) from None


def _case_from_raw(raw: Any, file: str, index: int) -> Case:
    """Validate one raw case; every error names the file, the case and the field."""
    name = raw.get("name") if isinstance(raw, dict) else None
    label = f"{file}: case {name!r}" if isinstance(name, str) and name else f"{file}: case #{index + 1}"
    try:
        if not isinstance(raw, dict):
            raise InputError("must be a mapping with fields " + ", ".join(CASE_KEYS))
        for key in raw:
            if key not in CASE_KEYS:
                raise InputError(f"{key}: unknown field; allowed: {', '.join(CASE_KEYS)}")
        for key in CASE_KEYS:
            if key not in raw:
                raise InputError(f"{key}: missing")
        if not isinstance(name, str) or not name:
            raise InputError(f"name: {name!r} is not allowed; must be a non-empty string")
        if not isinstance(raw["source"], str):
            raise InputError(f"source: {raw['source']!r} is not allowed; must be a string")
        if not isinstance(raw["model"], (str, dict)):
            raise InputError(f"model: {raw['model']!r} is not allowed; give a catalog name or a mapping")
        if not isinstance(raw["system"], (str, dict)):
            raise InputError(f"system: {raw['system']!r} is not allowed; give a catalog name or a mapping")
        model = load_model(raw["model"], field="model")
        system = load_system(raw["system"], field="system")
        plan = _plan(raw["plan"])
        check_plan(model, system, plan)
        measured = _measured(raw["measured"])
    except (InputError, UnitError) as exc:
        raise InputError(f"{label}: {exc}") from None
    return Case(name, raw["source"], file, model, system, plan, measured)


def load_cases(paths: Iterable[str | Path] | None = None) -> list[Case]:
    """Cases from the given files, or from the bundled case files when ``paths`` is None/empty."""
    files = [Path(p) for p in paths] if paths else bundled_case_files()
    cases: list[Case] = []
    seen: set[tuple[str, str]] = set()
    stems: set[str] = set()
    for path in files:
        stem, raws = _read_case_file(path)
        if stem in stems:  # two files with one stem (a.json, b/a.yaml): label by path instead
            stem = str(path)
        stems.add(stem)
        for i, raw in enumerate(raws):
            case = _case_from_raw(raw, stem, i)
            if (stem, case.name) in seen:
                raise InputError(f"{stem}: case {case.name!r}: name: duplicated in the file")
            seen.add((stem, case.name))
            cases.append(case)
    return cases


# ---- comparison ------------------------------------------------------------------------------
def predicted_metrics(est: Estimate, scope: str) -> dict[str, Any]:
    """Predicted values on stage 0; memory of the comparison ``scope`` plus the whole-stage values."""
    first = est.first_stage
    stage_states = first.weights_and_optimizer_bytes / GiB
    stage_acts = first.activations_bytes / GiB
    if scope == SCOPE_TRANSFORMER:
        states = first.transformer_weights_and_optimizer_bytes / GiB
        acts = first.transformer_activations_bytes / GiB
    else:
        states, acts = stage_states, stage_acts
    return {
        "step_time_s": est.step_time_s,
        "weights_and_optimizer_gib": states,
        "activations_gib": acts,
        "peak_memory_gib": first.peak_bytes / GiB,
        "fits": est.fits,
        "mfu": est.mfu,
        "stage_weights_and_optimizer_gib": stage_states,
        "stage_activations_gib": stage_acts,
    }


def error_pct(predicted: float, measured: float) -> float:
    """Signed relative error in percent: 100 · (predicted / measured − 1)."""
    return 100.0 * (predicted / measured - 1.0)


def run_case(case: Case) -> dict:
    """The report entry of one case (format in the module docstring)."""
    try:
        est = estimate(case.model, case.system, case.plan)
    except (InputError, UnitError) as exc:
        raise InputError(f"{case.file}: case {case.name!r}: {exc}") from None
    scope = case.scope
    predicted = predicted_metrics(est, scope)
    errors = {k: error_pct(predicted[k], v) for k, v in case.measured.items()}
    return {
        "name": case.name,
        "source": case.source,
        "scope": scope,
        "predicted": predicted,
        "measured": dict(case.measured),
        "error_pct": errors,
    }


def _mape(values: list[float]) -> float | None:
    return sum(abs(v) for v in values) / len(values) if values else None


def summarize(entries: list[dict], files: list[str]) -> dict:
    """MAPE per metric, the largest absolute error, and per-source-file step-time MAPE and counts."""
    summary: dict[str, Any] = {"cases": len(entries)}
    for metric in METRICS:
        errs = [e["error_pct"][metric] for e in entries if metric in e["error_pct"]]
        summary[f"{metric}_mape_pct"] = _mape(errs)
        summary[f"{metric}_cases"] = len(errs)
    worst = (None, None, 0.0)
    for e in entries:
        for metric, err in e["error_pct"].items():
            if worst[0] is None or abs(err) > abs(worst[2]):
                worst = (e["name"], metric, err)
    summary["max_abs_error_pct"] = abs(worst[2]) if worst[0] is not None else None
    summary["max_abs_error_case"] = worst[0]
    summary["max_abs_error_metric"] = worst[1]
    by_source: dict[str, dict] = {}
    for file in dict.fromkeys(files):
        mine = [e for e, f in zip(entries, files) if f == file]
        group: dict[str, Any] = {
            "cases": len(mine),
            "step_time_cases": sum(1 for e in mine if "step_time_s" in e["error_pct"]),
        }
        for metric in METRICS:
            errs = [e["error_pct"][metric] for e in mine if metric in e["error_pct"]]
            if metric == "step_time_s" or errs:
                group[f"{metric}_mape_pct"] = _mape(errs)
        group["names"] = [e["name"] for e in mine]
        by_source[file] = group
    summary["by_source"] = by_source
    return summary


def run_cases(cases: list[Case]) -> dict:
    """``{"cases": [...], "summary": {...}}`` for the given cases, in order."""
    entries = [run_case(c) for c in cases]
    return {"cases": entries, "summary": summarize(entries, [c.file for c in cases])}


def summary_mapes(summary: dict) -> dict[str, float]:
    """Every MAPE in a summary (overall and per source) that has a value, by a readable key."""
    out = {k: v for k, v in summary.items() if k.endswith("_mape_pct") and v is not None}
    for file, group in summary.get("by_source", {}).items():
        out.update({f"{file}.{k}": v for k, v in group.items() if k.endswith("_mape_pct") and v is not None})
    return out
