"""A plan from the fields a user gave: the CLI's and the API's defaults for what was left out."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from paraplan.specs.parallel import derive_dp
from paraplan.specs.plan import PlanSpec, plan_input_error
from paraplan.specs.rules import min_global_batch
from paraplan.specs.rules_schedule import SCHEDULE_RULES, default_schedule

DEFAULT_SEQ_LENGTH = 2048
DEFAULT_MICRO_BATCH = 1


def default_global_batch(fields: dict[str, Any]) -> int:
    """Smallest global batch the plan accepts (specs.rules.min_global_batch).

    When dp cannot be inferred (gpus not divisible by tp·pp·cp) this returns micro_batch, so that
    the plan's own check reports the real problem (``plan.gpus``) instead of the batch; likewise
    when a field it reads is not an integer (the plan's validation names that field)."""
    counts = [fields.get(k) for k in ("micro_batch", "dp", "pp", "vpp", "tp", "cp")]
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in counts):
        return 1
    micro_batch = int(fields.get("micro_batch") or DEFAULT_MICRO_BATCH)
    gpus = fields.get("gpus")
    dp = fields.get("dp") or 0
    if not dp and isinstance(gpus, int) and gpus > 0:
        dp = derive_dp(gpus, {k: fields.get(k) for k in ("tp", "pp", "cp")}) or 0
    if not dp or dp < 0 or micro_batch < 1:
        return max(1, micro_batch)
    schedule = fields.get("schedule") or default_schedule(int(fields.get("vpp") or 1))
    if (
        not isinstance(schedule, str) or schedule not in SCHEDULE_RULES
    ):  # another value: the plan's validation names it
        schedule = default_schedule(1)
    return min_global_batch(dp, micro_batch, int(fields.get("pp") or 1), schedule)


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
