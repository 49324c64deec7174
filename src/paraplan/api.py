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
from paraplan.specs.errors import InputError, input_error_from_pydantic
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec

DEFAULT_SEQ_LENGTH = 2048
DEFAULT_MICRO_BATCH = 1


def default_global_batch(fields: dict[str, Any]) -> int:
    """Smallest global batch the plan accepts: dp·micro_batch, times pp when the schedule is
    interleaved (it needs the micro-batch count to be a multiple of pp).

    When dp cannot be inferred (gpus not divisible by tp·pp·cp) this returns micro_batch, so that
    the plan's own check reports the real problem (``plan.gpus``) instead of the batch."""
    tp, pp, cp = (int(fields.get(k) or 1) for k in ("tp", "pp", "cp"))
    micro_batch = int(fields.get("micro_batch") or DEFAULT_MICRO_BATCH)
    gpus = fields.get("gpus")
    dp = fields.get("dp") or 0
    if not dp and isinstance(gpus, int) and gpus > 0 and gpus % (tp * pp * cp) == 0:
        dp = gpus // (tp * pp * cp)
    if not dp or dp < 0 or micro_batch < 1:
        return max(1, micro_batch)
    batch = dp * micro_batch
    interleaved = fields.get("schedule") == "interleaved" or (fields.get("schedule") is None and int(fields.get("vpp") or 1) > 1)
    if interleaved and pp > 1:
        batch *= pp
    return batch


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


def plan_input_error(exc: ValidationError) -> InputError:
    """One-line InputError for a rejected plan. Rules checked on the whole plan (placement, schedule
    with vpp) name the plan itself; their message already names the field, so the plan's dict of
    values is left out instead of being printed as the offending value."""
    err = input_error_from_pydantic(exc, "plan")
    first = err.violations[0] if err.violations else None
    if first is not None and first.field == "plan" and isinstance(first.value, dict):
        more = f" (and {len(err.violations) - 1} more)" if len(err.violations) > 1 else ""
        return InputError(f"plan: {first.rule}{more}", err.violations)
    return err


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
