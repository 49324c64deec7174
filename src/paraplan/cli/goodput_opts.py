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


def time_to_train_objective(
    objective: str, tokens: float | None, exhaustive: bool, csv_all
) -> bool:
    """Whether ``search --objective time-to-train`` was asked for; InputError when it lacks --tokens or
    comes with --exhaustive / --csv-all (goodput is computed for the ranked plans only)."""
    if objective != "time-to-train":
        return False
    if tokens is None:
        raise InputError("--objective: time-to-train needs --tokens (the run length, e.g. 15T)")
    if exhaustive or csv_all is not None:
        raise InputError(
            "--objective: time-to-train ranks the plans a time search returns; "
            "--exhaustive and --csv-all are not available with it"
        )
    return True


def ttt_search(problem, tokens: float, top: int, run_search, workers, progress):
    """search.time_to_train.time_to_train_search with the CLI's search options: (result, the
    ``time_to_train`` JSON object: what ranks, whether exactly, and each plan's goodput)."""
    from paraplan.search.time_to_train import time_to_train_search

    result, goods, exact = time_to_train_search(
        problem, tokens, top, run_search, workers=workers, progress=progress
    )
    info = {
        "ranked_by": "expected wall-clock seconds per token for --tokens, failures, checkpoints "
        "and restarts included (the plans' objective; docs/goodput.md)",
        "exact": exact,
        "goodput": goods,
    }
    return result, info


def ttt_lines(info: dict) -> list[str]:
    """Under the plans table: each plan's expected days, P10-P90 and effective training time."""
    lines = ["time-to-train (objective column: expected wall s per token, badput included):"]
    for rank, g in enumerate(info["goodput"], start=1):
        lines.append(
            f"  {rank}: {g['expected_days']:.2f} days (P10 {g['days_p10']:.2f}, P90 "
            f"{g['days_p90']:.2f}), failure-free {g['useful_days']:.2f}, effective training time "
            f"{g['effective_training_time_ratio']:.1%}, checkpoint {g['checkpoint']['rank_gib']:.3g} GiB "
            f"per rank every {g['checkpoint_interval_steps']} steps"
        )
    if not info["exact"]:
        lines.append("  ranking over the fastest plans by failure-free time only (MAX_TIME_GROUPS)")
    return lines
