"""Thin Python API: the same entry points as the CLI, returning plain data objects.

>>> from paraplan.api import estimate
>>> est = estimate("llama3-8b", "dgx-h100-80gb", gpus=8, seq_length=8192)
>>> round(est.mfu, 2)  # doctest: +SKIP

Models and systems may be catalog names, paths to YAML/JSON files (a model may also be a Hugging
Face ``config.json``), dicts, or already-built specs. Plan fields are :class:`PlanSpec` fields;
``seq_length`` and ``global_batch`` get the CLI's defaults when omitted (see :func:`plan_from_fields`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from paraplan.catalog import load_model, load_system
from paraplan.estimate import estimate as _estimate
from paraplan.report.result import Estimate
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import derive_dp
from paraplan.specs.plan import PlanSpec, min_global_batch, plan_input_error  # noqa: F401 (re-exported)
from paraplan.specs.system import SystemSpec

DEFAULT_SEQ_LENGTH = 2048
DEFAULT_MICRO_BATCH = 1


def default_global_batch(fields: dict[str, Any]) -> int:
    """Smallest global batch the plan accepts (specs.plan.min_global_batch).

    When dp cannot be inferred (gpus not divisible by tp·pp·cp) this returns micro_batch, so that
    the plan's own check reports the real problem (``plan.gpus``) instead of the batch."""
    micro_batch = int(fields.get("micro_batch") or DEFAULT_MICRO_BATCH)
    gpus = fields.get("gpus")
    dp = fields.get("dp") or 0
    if not dp and isinstance(gpus, int) and gpus > 0:
        dp = derive_dp(gpus, {k: fields.get(k) for k in ("tp", "pp", "cp")}) or 0
    if not dp or dp < 0 or micro_batch < 1:
        return max(1, micro_batch)
    schedule = fields.get("schedule")
    interleaved = schedule == "interleaved" or (schedule is None and int(fields.get("vpp") or 1) > 1)
    return min_global_batch(dp, micro_batch, int(fields.get("pp") or 1), interleaved)


def plan_from_fields(fields: dict[str, Any]) -> PlanSpec:
    """Build a :class:`PlanSpec`, filling ``seq_length`` (2048) and ``global_batch``
    (:func:`default_global_batch`) when absent; pydantic errors become one-line InputErrors."""
    data = {k: v for k, v in fields.items() if v is not None}
    data.setdefault("seq_length", DEFAULT_SEQ_LENGTH)
    if "global_batch" not in data:
        data["global_batch"] = default_global_batch(data)
    try:
        return PlanSpec.model_validate(data)
    except ValidationError as exc:
        raise plan_input_error(exc) from None


def estimate(
    model: str | Path | dict | ModelSpec,
    system: str | Path | dict | SystemSpec,
    plan: PlanSpec | dict | None = None,
    *,
    with_ops: bool = False,
    **plan_fields: Any,
) -> Estimate:
    """Estimate one plan. ``plan`` (a PlanSpec or dict) and keyword plan fields are merged, the
    keywords winning; raises :class:`~paraplan.specs.errors.InputError` on bad input."""
    model_spec = load_model(str(model) if isinstance(model, Path) else model)
    system_spec = load_system(str(system) if isinstance(system, Path) else system)
    if isinstance(plan, PlanSpec) and not plan_fields:
        plan_spec = plan
    else:
        base = plan.model_dump(exclude_unset=True) if isinstance(plan, PlanSpec) else dict(plan or {})
        if isinstance(plan, PlanSpec) and "dp" not in plan_fields and {"gpus", "tp", "pp", "cp"} & set(plan_fields):
            base.pop("dp", None)  # re-infer dp from the new degrees
        base.update(plan_fields)
        plan_spec = plan_from_fields(base)
    return _estimate(model_spec, system_spec, plan_spec, with_ops=with_ops)


def validate(cases: Iterable[str | Path] | None = None) -> dict:
    """Run the bundled validation cases (or the given case files) and return the report dict
    ``{"cases": [...], "summary": {...}}`` (format in :mod:`paraplan.validate.run`)."""
    from paraplan.validate.run import load_cases, run_cases

    return run_cases(load_cases(cases))
