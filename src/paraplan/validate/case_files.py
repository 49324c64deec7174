"""Validation cases: the schema of a case file and its reading (``load_cases``), the half of
``paraplan validate`` that turns published runs into (model, system, plan, measured) cases
(validate.run compares them with predictions). Cases come from the bundled
``paraplan/validate/cases/*.json`` or from user files (JSON or YAML, schema in MISSION.md,
"Validation-case schema").

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
configuration leaves off, cited in its notes. ``gpus_per_domain_used`` states how the run's launcher placed it
(``job_system``): the GPUs of each NVLink domain its ranks occupy, where the launcher fills only part of each
domain (Megatron-Bridge's performance launcher asks Slurm for ``--segment`` of 16 four-GPU trays on NVL72 racks of
18, so each rack holds 64 of the job's ranks); the case's system is priced with that domain size. Measured keys in
``DOC_METRICS`` (``tflops_per_gpu``, ...) are accepted and not compared.
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
from paraplan.specs.errors import InputError, UnknownNameError
from paraplan.specs.fields import with_fields
from paraplan.specs.framework import FrameworkSpec
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_input_error
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import check_plan
from paraplan.units import UnitError

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
OPTIONAL_KEYS = ("framework", "framework_overrides", "gpus_per_domain_used", "scope", *DOC_KEYS)

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


def job_system(system: SystemSpec, used: Any) -> SystemSpec:
    """The system as the run's job sees it: where its launcher placed ``used`` ranks in each NVLink domain
    (``gpus_per_domain_used``, at most the domain's GPUs), every scale-up group of the job spans domains of
    ``used`` GPUs, so node.gpus_per_domain = ``used`` (the CLI's ``--set node.gpus_per_domain=N``); None: the
    job fills whole domains (module docstring)."""
    if used is None:
        return system
    domain = system.node.gpus_per_domain
    if isinstance(used, bool) or not isinstance(used, int) or not 0 < used <= domain:
        raise InputError(
            f"gpus_per_domain_used: {used!r} is not allowed; give a whole number of GPUs from 1 to the "
            f"system's node.gpus_per_domain ({domain})"
        )
    return with_fields(system, {"node.gpus_per_domain": used})


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
            system = job_system(system, raw.get("gpus_per_domain_used"))
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
