"""``--goodput`` of ``paraplan estimate``: the plan's time-to-train with failures, checkpoints, restarts
and energy (paraplan.goodput), as a JSON-ready dict; report.goodput_view renders it."""

from __future__ import annotations

from paraplan.report.goodput_view import goodput_lines
from paraplan.specs.errors import InputError

__all__ = ["goodput_dict", "goodput_lines"]


def goodput_dict(est, model_spec, system_spec, plan, tokens: float | None, price) -> dict:
    """goodput.plan.plan_goodput(...).to_dict() over ``tokens`` (required) at ``price`` USD per
    GPU-hour (default: the system's), with the checkpoint mode the lines name."""
    from paraplan.goodput.inputs import default_inputs
    from paraplan.goodput.plan import plan_goodput

    if tokens is None:
        raise InputError("--goodput: needs --tokens (the run length, e.g. 15T)")
    price = price if price is not None else system_spec.price_per_gpu_hour
    return plan_goodput(
        est, model_spec, system_spec, plan, tokens, default_inputs(), price
    ).to_dict()


def validate_goodput(cases, as_json: bool) -> None:
    """``paraplan validate --goodput [--cases FILE] [--json]``: the goodput cases' predictions against
    their published values; exit status 1 when any case is not reproduced."""
    import json

    import typer

    from paraplan.report.goodput_view import goodput_validation_lines
    from paraplan.validate.goodput import load_goodput_cases, run_goodput_cases

    if cases and len(cases) > 1:
        raise InputError("--cases: --goodput takes one case file")
    report = run_goodput_cases(load_goodput_cases(cases[0] if cases else None))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(goodput_validation_lines(report)))
    if report["summary"]["failed"]:
        raise typer.Exit(1)
