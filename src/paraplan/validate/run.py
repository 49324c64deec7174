"""Compare predictions with published measurements (``paraplan validate``).

Cases come from the bundled ``paraplan/validate/cases/*.json`` or from user files (JSON or YAML,
schema in MISSION.md, "Validation-case schema"). For each case the plan is estimated and the
predicted metrics are compared with the measured ones; the signed error is
``error_pct = 100 · (predicted / measured − 1)`` (positive = paraplan over-predicts).

Memory scope (``scope`` field, ``MEMORY_SCOPE_RULE``)
----------------------------------------------------
Measured memory figures are per GPU on the first pipeline stage. Each case states what its memory
figures count in an explicit ``scope`` field: ``"stage"`` (default: the whole first stage) or
``"transformer_layers"`` (the decoder layers of stage 0 only, as in Korthikanti et al. 2022
Figure 1, whose parameter bar is exactly 18 bytes × 12·l·h²/t for the stage's l layers:
22B: 18 · 12·48·6144²/8 B = 45.5625 GiB, without the embedding table). Transformer-layer cases are
compared on ``StageMemory.transformer_*_bytes``; their whole-stage values are still reported as
``stage_weights_and_optimizer_gib`` / ``stage_activations_gib``.

Case by case
------------
A malformed case file (not JSON/YAML, a missing or misspelt case key, an unknown metric, a value
out of range) is an input error naming the file, case and field. A well-formed case whose model or
plan uses a field this model does not know (for example the mixture-of-experts fields before the
MoE layer exists), names a model or system the catalog does not have, or whose plan breaks one of paraplan's plan rules (specs.plan.plan_violations: a
published run that ran is evidence against the rule, not bad input), is **unsupported**: it is
reported with the reason and left out of the summary, and the other cases still run.

Documentation keys (``DOC_KEYS``: ``notes``, ``group``, ``tier``, ``confidence``, ``derived``,
``quote``, ``record``, ``config_id``) are accepted and not interpreted, except ``group`` (the
cross-validation group, default: the file stem). ``framework`` names a framework profile
(paraplan.cost.frameworks) that sets the implementation defaults of the run; ``framework_overrides`` (a mapping of
profile fields) states where the case's own recipe departs from that profile, e.g. a CUDA-graph scope its model's
configuration leaves off, cited in its notes. Measured keys in
``DOC_METRICS`` (``tflops_per_gpu``, ...) are accepted and not compared.

Calibration vs held out
-----------------------
A case is a *calibration* case when its group or file was used to fit a constant
(``paraplan.validate.fitted.FITTED_CONSTANTS``); every other case is *held out*. The summary
reports both apart (``calibration`` / ``held_out``).

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

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import apply_framework
from paraplan.step.estimate import check_plan, estimate
from paraplan.step.result import Estimate
from paraplan.specs.errors import InputError, UnknownNameError
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_input_error
from paraplan.specs.system import SystemSpec
from paraplan.units import GiB, UnitError

METRICS = (
    "step_time_s",
    "weights_and_optimizer_gib",
    "activations_gib",
    "peak_memory_gib",
    "peak_allocated_gib",
    "peak_reserved_gib",
)
# measured keys that document a case (derived from the same row) but are not compared
DOC_METRICS = ("tflops_per_gpu", "tokens_per_s_per_gpu", "mfu")
CASE_KEYS = ("name", "source", "model", "system", "plan", "measured")
DOC_KEYS = ("notes", "group", "tier", "confidence", "derived", "quote", "record", "config_id")
OPTIONAL_KEYS = ("framework", "framework_overrides", "scope", *DOC_KEYS)

SCOPE_TRANSFORMER = "transformer_layers"
SCOPE_STAGE = "stage"
SCOPES = (SCOPE_STAGE, SCOPE_TRANSFORMER)
MEMORY_SCOPE_RULE = (
    "Memory figures are per GPU on the first pipeline stage; each case states what they count in its `scope` "
    "field. Korthikanti et al. 2022 (arXiv:2205.05198) Figure 1 counts only the transformer layers: its "
    "parameter bar is exactly 18 bytes × 12·l·h²/t for the stage's l layers (22B: 18 · 12·48·6144²/8 B = "
    "45.5625 GiB), without the embedding table the first stage also holds, and §4 of the paper restricts its "
    "activation analysis to the transformer layers. Those cases carry scope transformer_layers and are compared "
    "on the transformer layers of stage 0; their whole-stage values are reported too "
    "(stage_weights_and_optimizer_gib, stage_activations_gib). Cases with scope stage (the default) compare "
    "the whole first stage."
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
    scope: str = SCOPE_STAGE
    framework: str | None = None
    group: str = ""  # cross-validation group; default the file stem
    outside_allocator_bytes: float | None = None  # the profile's CUDA context + comm. buffers

    @property
    def cv_group(self) -> str:
        return self.group or self.file


@dataclass(frozen=True)
class UnsupportedCase:
    """A well-formed case the model cannot express (a field it does not know); reported, not scored."""

    name: str
    source: str
    file: str
    reason: str
    group: str = ""

    @property
    def cv_group(self) -> str:
        return self.group or self.file


class _Unsupported(Exception):
    """Raised inside case loading for a field the model does not know."""


# ---- loading ---------------------------------------------------------------------------------
def bundled_case_files() -> list[Any]:
    """The case files shipped in ``paraplan/validate/cases``, sorted by name."""
    folder = resources.files("paraplan.validate") / "cases"
    return sorted((p for p in folder.iterdir() if p.name.endswith(".json")), key=lambda p: p.name)


def _read_case_file(path: Any) -> tuple[str, list]:
    """(file stem, raw case list) of a JSON or YAML case file, or of a file of AMP's trial records (converted by
    validate.amp_import, as the bundled hetero/amp2022.json was); InputError naming the file otherwise."""
    # bounded, strict reading shared by every input file
    from paraplan.io.documents import read_document
    from paraplan.validate.amp_import import convert_records, is_records

    name = path.name
    label = str(path)
    data = read_document(path, "cases")
    # AMP's raw trial records (reference/published/amp-trials.json): made cases on reading
    if is_records(data):
        try:
            data = convert_records(data)
        except ValueError as exc:
            raise InputError(f"cases: {label!r}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise InputError(f"cases: {label!r} must hold a mapping with a list under 'cases'")
    stem = name.rsplit(".", 1)[0] if "." in name else name
    return stem, data["cases"]


def _measured(raw: Any) -> dict[str, float]:
    allowed = ", ".join(METRICS + DOC_METRICS)
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"measured: {raw!r} is not allowed; give a mapping with any of {allowed}")
    out = {}
    for key, value in raw.items():
        if key not in METRICS and key not in DOC_METRICS:
            raise InputError(f"measured.{key}: unknown metric; allowed: {allowed}")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (0 < value < math.inf)
        ):
            raise InputError(f"measured.{key}: {value!r} is not allowed; must be a positive number")
        if key in METRICS:
            out[key] = float(value)
    if not out:
        raise InputError(
            f"measured: {raw!r} has nothing to compare; give any of {', '.join(METRICS)}"
        )
    return out


def _unknown_fields_only(exc: InputError) -> bool:
    return bool(exc.violations) and all(v.rule == "unknown field" for v in exc.violations)


def _plan(raw: Any) -> PlanSpec:
    if not isinstance(raw, dict):
        raise InputError(f"plan: {raw!r} is not allowed; must be a mapping of plan fields")
    try:
        return PlanSpec.model_validate(raw)
    except ValidationError as exc:
        raise plan_input_error(exc) from None


def _check_keys(raw: dict) -> None:
    for key in raw:
        if key not in CASE_KEYS and key not in OPTIONAL_KEYS:
            raise InputError(
                f"{key}: unknown field; allowed: {', '.join(CASE_KEYS + OPTIONAL_KEYS)}"
            )
    for key in CASE_KEYS:
        if key not in raw:
            raise InputError(f"{key}: missing")
    name = raw["name"]
    if not isinstance(name, str) or not name:
        raise InputError(f"name: {name!r} is not allowed; must be a non-empty string")
    if "framework_overrides" in raw and "framework" not in raw:
        raise InputError("framework_overrides: needs a framework to override")
    for key in ("source", "group", "framework", "scope"):
        if key in raw and not isinstance(raw[key], str):
            raise InputError(f"{key}: {raw[key]!r} is not allowed; must be a string")
    if raw.get("scope", SCOPE_STAGE) not in SCOPES:
        raise InputError(f"scope: {raw['scope']!r} is not allowed; allowed: {', '.join(SCOPES)}")
    if not isinstance(raw["model"], (str, dict)):
        raise InputError(
            f"model: {raw['model']!r} is not allowed; give a catalog name or a mapping"
        )
    if not isinstance(raw["system"], (str, dict)):
        raise InputError(
            f"system: {raw['system']!r} is not allowed; give a catalog name or a mapping"
        )


def case_profile(framework: str, overrides: dict) -> FrameworkSpec:
    """The case's framework profile with ``framework_overrides`` applied: the fields where this case's recipe
    differs from its stack's profile (e.g. a per-model CUDA-graph scope), each cited in the case's notes."""
    profile = load_framework(framework, "framework", True)
    if not overrides:
        return profile
    if not isinstance(overrides, dict) or {"name", "sources"} & set(overrides):
        raise InputError(
            f"framework_overrides: {overrides!r} is not allowed; give a mapping of profile fields "
            "other than name and sources"
        )
    return load_framework({**profile.model_dump(), **overrides}, "framework_overrides")


def _expressible(load, *args):
    """Call a loader; an InputError that only names unknown fields, or a catalog name the catalog does not have, means
    the model cannot express the case."""
    try:
        return load(*args)
    except InputError as exc:
        # a name the catalog does not have yet is unsupported too
        if _unknown_fields_only(exc) or isinstance(exc, UnknownNameError):
            raise _Unsupported(str(exc)) from None
        raise


def _case_from_raw(raw: Any, file: str, index: int) -> Case | UnsupportedCase:
    """Validate one raw case; every error names the file, the case and the field (module docstring)."""
    name = raw.get("name") if isinstance(raw, dict) else None
    label = (
        f"{file}: case {name!r}" if isinstance(name, str) and name else f"{file}: case #{index + 1}"
    )
    try:
        if not isinstance(raw, dict):
            raise InputError("must be a mapping with fields " + ", ".join(CASE_KEYS))
        _check_keys(raw)
        measured = _measured(raw["measured"])
        group = raw.get("group", "")
        try:
            # a case names its model, system and framework: files it names are referenced
            # (checked before reading, never shown: catalog.referenced_file_error)
            model = _expressible(load_model, raw["model"], "model", True)
            system = _expressible(load_system, raw["system"], "system", True)
            plan_fields = raw["plan"]
            framework, outside = raw.get("framework"), None
            if framework is not None:
                profile = case_profile(framework, raw.get("framework_overrides", {}))
                outside = profile.outside_allocator_bytes()
                if isinstance(plan_fields, dict):
                    system, plan_fields = apply_framework(profile, system, plan_fields)
            elif "peak_reserved_gib" in measured:
                raise InputError(
                    "measured.peak_reserved_gib: needs the case's framework, whose profile states "
                    "what the caching allocator does not hold (cuda_context, communication_buffers)"
                )
            plan = _expressible(_plan, plan_fields)
        except _Unsupported as exc:
            return UnsupportedCase(name, raw["source"], file, f"cannot be expressed: {exc}", group)
        try:
            check_plan(model, system, plan)
        # a run that ran is evidence against the rule: report it, run the others
        except InputError as exc:
            return UnsupportedCase(
                name, raw["source"], file, f"plan refused by paraplan's rules: {exc}", group
            )
    except (InputError, UnitError) as exc:
        raise InputError(f"{label}: {exc}") from None
    return Case(
        name,
        raw["source"],
        file,
        model,
        system,
        plan,
        measured,
        scope=raw.get("scope", SCOPE_STAGE),
        framework=raw.get("framework"),
        group=group,
        outside_allocator_bytes=outside,
    )


def load_cases(paths: Iterable[str | Path] | None = None) -> list[Case | UnsupportedCase]:
    """Cases from the given files, or from the bundled case files when ``paths`` is None/empty."""
    files = [Path(p) for p in paths] if paths else bundled_case_files()
    cases: list[Case | UnsupportedCase] = []
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
def predicted_metrics(
    est: Estimate, scope: str, outside_allocator_bytes: float | None = None
) -> dict[str, Any]:
    """Predicted values on stage 0; memory of the comparison ``scope`` plus the whole-stage values, and what
    PyTorch's caching allocator counts of the predicted peak (the figures measured memory is compared on).
    ``peak_allocated_gib`` (torch.cuda.max_memory_allocated): the peak less the runtime's non-allocator
    reserves (StageMemory.reserved_bytes, specs.framework.FrameworkSpec.reserved_bytes: CUDA context and
    kernel images, NCCL / framework communication buffers, allocator fragmentation), which that counter does
    not see (PyTorch docs, "CUDA semantics: memory management": memory_allocated counts tensors only; the
    cached but unused blocks are memory_reserved). ``peak_reserved_gib`` (torch.cuda.max_memory_reserved,
    memory_stats "reserved_bytes.all.peak"), where the case's profile gives ``outside_allocator_bytes``: the
    allocated peak plus the cached but unused blocks (the profile's allocator_fragmentation share of HBM),
    i.e. the peak less what the allocator never holds, the CUDA context and kernel images and the
    communication library's own buffers (FrameworkSpec.cuda_context + communication_buffers; NCCL allocates
    its buffers with cudaMalloc outside PyTorch's caching allocator)."""
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
        "peak_allocated_gib": (first.peak_bytes - first.reserved_bytes) / GiB,
        "fits": est.fits,
        "mfu": est.mfu,
        "stage_weights_and_optimizer_gib": stage_states,
        "stage_activations_gib": stage_acts,
        **(
            {"peak_reserved_gib": (first.peak_bytes - outside_allocator_bytes) / GiB}
            if outside_allocator_bytes is not None
            else {}
        ),
    }


def error_pct(predicted: float, measured: float) -> float:
    """Signed relative error in percent: 100 · (predicted / measured − 1)."""
    return 100.0 * (predicted / measured - 1.0)


def case_role(case: Case | UnsupportedCase) -> str:
    """``"calibration"`` when a fitted constant was fitted on the case's file or group, else ``"held_out"``."""
    from paraplan.validate.fitted import calibration_sets

    sets = calibration_sets()
    return "calibration" if case.file in sets or case.group in sets else "held_out"


def run_case(case: Case | UnsupportedCase) -> dict:
    """The report entry of one case (format in the module docstring); unsupported cases carry a reason."""
    base = {
        "name": case.name,
        "source": case.source,
        "group": case.cv_group,
        "role": case_role(case),
    }
    if isinstance(case, UnsupportedCase):
        return {**base, "status": "unsupported", "reason": case.reason}
    try:
        est = estimate(case.model, case.system, case.plan)
    except (InputError, UnitError) as exc:
        return {**base, "status": "unsupported", "reason": f"estimate failed: {exc}"}
    predicted = predicted_metrics(est, case.scope, case.outside_allocator_bytes)
    errors = {k: error_pct(predicted[k], v) for k, v in case.measured.items()}
    return {
        **base,
        "status": "ok",
        "scope": case.scope,
        "framework": case.framework,
        "predicted": predicted,
        "measured": dict(case.measured),
        "error_pct": errors,
    }


def mape(values: list[float]) -> float | None:
    """Mean absolute percentage error of signed errors in %: Σ|e| / n (None without any)."""
    return sum(abs(v) for v in values) / len(values) if values else None


def _subset_summary(entries: list[dict]) -> dict[str, Any]:
    """Case counts and MAPE per metric (when measured) of some scored entries."""
    out: dict[str, Any] = {
        "cases": len(entries),
        "step_time_cases": sum(1 for e in entries if "step_time_s" in e["error_pct"]),
    }
    for metric in METRICS:
        errs = [e["error_pct"][metric] for e in entries if metric in e["error_pct"]]
        if metric == "step_time_s" or errs:
            out[f"{metric}_mape_pct"] = mape(errs)
        if metric in ("peak_allocated_gib", "peak_reserved_gib") and errs:
            out[f"{metric}_cases"] = len(errs)
    steps = [abs(e["error_pct"]["step_time_s"]) for e in entries if "step_time_s" in e["error_pct"]]
    out["step_time_max_abs_error_pct"] = max(steps) if steps else None
    out["names"] = [e["name"] for e in entries]
    return out


def summarize(entries: list[dict], files: list[str]) -> dict:
    """MAPE per metric, the largest absolute error, per-source-file / per-group / calibration vs
    held-out summaries, and the unsupported cases."""
    scored = [e for e in entries if e.get("status", "ok") == "ok"]
    summary: dict[str, Any] = {"cases": len(scored)}
    for metric in METRICS:
        errs = [e["error_pct"][metric] for e in scored if metric in e["error_pct"]]
        summary[f"{metric}_mape_pct"] = mape(errs)
        summary[f"{metric}_cases"] = len(errs)
    worst = (None, None, 0.0)
    for e in scored:
        for metric, err in e["error_pct"].items():
            if worst[0] is None or abs(err) > abs(worst[2]):
                worst = (e["name"], metric, err)
    summary["max_abs_error_pct"] = abs(worst[2]) if worst[0] is not None else None
    summary["max_abs_error_case"] = worst[0]
    summary["max_abs_error_metric"] = worst[1]
    by_source: dict[str, dict] = {}
    for file in dict.fromkeys(files):
        mine = [e for e, f in zip(entries, files) if f == file and e.get("status", "ok") == "ok"]
        group = _subset_summary(mine)
        group["unsupported"] = sum(
            1 for e, f in zip(entries, files) if f == file and e.get("status") == "unsupported"
        )
        by_source[file] = group
    summary["by_source"] = by_source
    summary["by_group"] = {
        g: _subset_summary([e for e in scored if e.get("group") == g])
        for g in dict.fromkeys(e.get("group") for e in scored)
    }
    for role in ("calibration", "held_out"):
        summary[role] = _subset_summary([e for e in scored if e.get("role") == role])
    unsupported = [e for e in entries if e.get("status") == "unsupported"]
    summary["unsupported"] = len(unsupported)
    summary["unsupported_cases"] = [{"name": e["name"], "reason": e["reason"]} for e in unsupported]
    return summary


def run_cases(cases: list[Case | UnsupportedCase]) -> dict:
    """``{"cases": [...], "summary": {...}}`` for the given cases, in order."""
    entries = [run_case(c) for c in cases]
    return {"cases": entries, "summary": summarize(entries, [c.file for c in cases])}


def summary_mapes(summary: dict) -> dict[str, float]:
    """Every MAPE in a summary (overall and per source) that has a value, by a readable key."""
    out = {k: v for k, v in summary.items() if k.endswith("_mape_pct") and v is not None}
    for file, group in summary.get("by_source", {}).items():
        out.update(
            {
                f"{file}.{k}": v
                for k, v in group.items()
                if k.endswith("_mape_pct") and v is not None
            }
        )
    return out
