"""Compare predictions with published measurements (``paraplan validate``).

Cases come from the bundled ``paraplan/validate/cases/*.json`` or from user files (JSON or YAML,
schema in MISSION.md, "Validation-case schema"). For each case the plan is estimated and the
predicted metrics are compared with the measured ones; the signed error is
``error_pct = 100 · (predicted / measured − 1)`` (positive = paraplan over-predicts).

The cases and their schema (memory scope, unsupported cases, documentation keys) live in
validate.case_files.

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

from typing import Any

from paraplan.specs.errors import InputError
from paraplan.step.estimate import estimate
from paraplan.step.result import Estimate
from paraplan.units import GiB, UnitError
from paraplan.validate.case_files import METRICS, SCOPE_TRANSFORMER, Case, UnsupportedCase


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
        "fit": est.fit,
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
