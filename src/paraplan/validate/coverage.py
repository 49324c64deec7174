"""Held-out coverage of the error bands (``paraplan validate``: ``error_band`` per case and
``summary.band_coverage``).

For each scored case with a measured step time, its group is left out: the band is built by
validate.band.error_band from the residuals of every *other* group only (as a new run would see
them), around the case's prediction. The case counts as covered when its cross-validated error (the
case predicted with the fitted constants refitted without its group, validate.residuals) lies inside
the band's error range; a case the residuals do not hold (a user's case file) is judged on its error
with the shipped constants. The coverage reached is reported per group, per stack and overall, beside
the coverage the band claims (validate.band.CLAIMED_COVERAGE_PCT).

One caveat: the other groups' residuals were themselves cross-validated with the held-out group among
the fitted ones (a nested refit per pair of groups would cost one cross-validation per group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from paraplan.catalog import framework_stack
from paraplan.validate.band import CLAIMED_COVERAGE_PCT, error_band
from paraplan.validate.residuals import (
    Residual,
    cv_errors_of,
    residual_records,
    validation_residuals,
)


def _rate(flags: list[bool]) -> dict[str, Any]:
    return {
        "cases": len(flags),
        "covered": sum(flags),
        "coverage_pct": 100.0 * sum(flags) / len(flags) if flags else None,
    }


def attach_bands(
    report: dict[str, Any], cases: Sequence[Any], residuals: Sequence[Residual]
) -> dict[str, Any]:
    """Add ``error_band`` and ``band_check`` to each scored entry of ``report`` (``run_cases`` of
    ``cases``, in order) and ``summary.band_coverage``; returns the coverage summary."""
    by_case = {(r.group, r.case): r for r in residuals}
    flags: dict[str, list[tuple[str, bool]]] = {}
    for case, entry in zip(cases, report["cases"]):
        if entry.get("status") != "ok" or "step_time_s" not in entry["error_pct"]:
            continue
        others = [r for r in residuals if r.group != case.cv_group]
        band = error_band(
            case.model,
            case.system,
            case.plan,
            entry["predicted"]["step_time_s"],
            case.framework,
            residuals=others,
        )
        own = by_case.get((case.cv_group, case.name))
        err = own.error_pct if own is not None else entry["error_pct"]["step_time_s"]
        # measured / held-out prediction − 1: inside the band's range ⇔ measured inside the band around it
        measured_pct = 100.0 * (1.0 / (1.0 + err / 100.0) - 1.0)
        inside = band.low_pct <= measured_pct <= band.high_pct
        entry["error_band"] = band.to_dict()
        entry["band_check"] = {
            "held_out_error_pct": err,
            "measured_vs_held_out_pct": measured_pct,
            "in_band": inside,
        }
        stack = own.keys.stack if own is not None else framework_stack(case.framework)
        flags.setdefault(case.cv_group, []).append((stack, inside))
    every = [f for group in flags.values() for _, f in group]
    stacks: dict[str, list[bool]] = {}
    for group in flags.values():
        for stack, inside in group:
            stacks.setdefault(stack, []).append(inside)
    coverage = {
        "claimed_pct": CLAIMED_COVERAGE_PCT,
        **_rate(every),
        "mean_over_groups_pct": (
            sum(_rate([f for _, f in g])["coverage_pct"] for g in flags.values()) / len(flags)
            if flags
            else None
        ),
        "by_group": {name: _rate([f for _, f in g]) for name, g in flags.items()},
        "by_stack": {name: _rate(f) for name, f in stacks.items()},
    }
    report["summary"]["band_coverage"] = coverage
    return coverage


def with_bands(report: dict[str, Any], cases: Sequence[Any]) -> dict[str, Any]:
    """``attach_bands`` with the residuals of this report's cross-validation when it has one
    (``--cv``), else the package's (validate.residuals); returns ``report``."""
    cv = report.get("cross_validation")
    residuals = (
        validation_residuals()
        if cv is None
        else residual_records(cases, report["cases"], cv_errors_of(cv))
    )
    attach_bands(report, cases, residuals)
    return report
