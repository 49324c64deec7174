"""``--goodput`` of ``paraplan estimate``: the plan's time-to-train with failures, checkpoints, restarts
and energy (paraplan.goodput), as a JSON-ready dict; report.goodput_view renders it."""

from __future__ import annotations

from dataclasses import dataclass

import typer

from paraplan.cli.declare import optional, switch
from paraplan.report.goodput_view import goodput_lines, recovery_text
from paraplan.specs.errors import InputError, input_error_from_pydantic

__all__ = [
    "GoodputChanges",
    "GoodputSetOption",
    "GridIntensityOption",
    "goodput_dict",
    "goodput_lines",
]

GoodputOption = switch(
    "--goodput",
    help="with --tokens: time-to-train with failures, checkpoints, restarts and energy "
    "(sweep: each point's best plan, sweep.csv columns and a goodput plot; docs/goodput.md)",
)
GridIntensityOption = optional(
    float,
    "--grid-intensity",
    help="with --goodput / a time-to-train objective: grid carbon intensity in gCO2/kWh for "
    "emissions (default 436, the 2022 world average, Ember; goodput/defaults.yaml)",
    min=0,
)
GoodputSetOption = optional(
    list[str],
    "--goodput-set",
    help="change a goodput input, SECTION.FIELD=VALUE (restart.policy=ft-dp, "
    "restart.spare_servers=4, checkpoint.mode=async, failures.planned_per_day=0; "
    "goodput/defaults.yaml); repeat for more",
)


@dataclass(frozen=True)
class GoodputChanges:
    """Changes to the default goodput inputs (goodput/defaults.yaml) that estimate, search and sweep
    take together: --grid-intensity and --goodput-set (an option group, cli.options.option_groups)."""

    grid_intensity: GridIntensityOption = None
    goodput_set: GoodputSetOption = None

    def inputs(self):
        """The default goodput inputs with these changes (goodput_inputs)."""
        return goodput_inputs(self.grid_intensity, self.goodput_set)

    def sweep_inputs(self, goodput: bool) -> dict | None:
        """``sweep --goodput``'s inputs as plain data for the points (None without --goodput): the
        defaults with the changes, without their sources."""
        if not goodput:
            if self.grid_intensity is not None or self.goodput_set:
                raise InputError("--goodput-set: needs --goodput")
            return None
        return self.inputs().model_dump(exclude={"sources"})


def goodput_inputs(grid_intensity: float | None = None, sets: list[str] | None = None):
    """The default goodput inputs (goodput/defaults.yaml) with ``--goodput-set`` changes and
    ``--grid-intensity``; InputError (one line) for an unknown field or a value it refuses."""
    from pydantic import ValidationError

    from paraplan.goodput.inputs import GoodputInputs, default_inputs

    inputs = default_inputs()
    changes: dict[str, dict] = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        fields = getattr(inputs, section, None) if dot and sep else None
        if not hasattr(fields, "model_fields") or name not in type(fields).model_fields:
            raise InputError(
                f"--goodput-set: {item!r} is not SECTION.FIELD=VALUE of a goodput input "
                "(failures, checkpoint, restart, energy; goodput/defaults.yaml)"
            )
        changes.setdefault(section, {})[name] = _value(value.strip())
    if grid_intensity is not None:
        changes.setdefault("energy", {})["grid_gco2_per_kwh"] = grid_intensity
    if not changes:
        return inputs
    try:
        return inputs.with_changes(**changes)
    except ValidationError as exc:  # every field refused, a union's branches as one (specs.errors)
        raise input_error_from_pydantic(exc, "--goodput-set", GoodputInputs) from None


def _value(text: str):
    """A --goodput-set value: null/none, a number (int or float), or the text (a quantity like
    "500 GB/s", a choice like "ft-dp")."""
    if text.lower() in ("null", "none"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def goodput_dict(
    est, model_spec, system_spec, plan, tokens: float | None, price, inputs=None
) -> dict:
    """goodput.plan.plan_goodput(...).to_dict() over ``tokens`` (required) at ``price`` USD per
    GPU-hour (default: the system's), with ``inputs`` (default: goodput/defaults.yaml)."""
    from paraplan.goodput.plan import plan_goodput

    if tokens is None:
        raise InputError("--goodput: needs --tokens (the run length, e.g. 15T)")
    price = price if price is not None else system_spec.price_per_gpu_hour
    return plan_goodput(
        est, model_spec, system_spec, plan, tokens, inputs or goodput_inputs(), price
    ).to_dict()


def validate_goodput(cases, as_json: bool) -> None:
    """``paraplan validate --goodput [--cases FILE] [--json]``: the goodput cases' predictions against
    their published values; exit status 1 when any case is not reproduced."""
    import json

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


def time_to_train_objective(objective: str, tokens: float | None, exhaustive: bool, csv_all) -> str:
    """The time-to-train objective asked for (search.time_to_train.OBJECTIVES: time-to-train,
    time-to-train-p90, cost-to-train, cost-to-train-p90), or "" for another objective; InputError
    when it lacks --tokens or comes with --exhaustive / --csv-all (goodput is computed for the
    ranked plans only)."""
    from paraplan.search.space import OBJECTIVES as SEARCH_OBJECTIVES

    if objective in SEARCH_OBJECTIVES:  # the goodput package loads for its objectives only
        return ""
    from paraplan.search.time_to_train import OBJECTIVES

    if objective not in OBJECTIVES:
        return ""
    if tokens is None:
        raise InputError(f"--objective: {objective} needs --tokens (the run length, e.g. 15T)")
    if exhaustive or csv_all is not None:
        raise InputError(
            f"--objective: {objective} ranks the plans a time search returns; "
            "--exhaustive and --csv-all are not available with it"
        )
    return objective


def ttt_search(
    problem, tokens: float, top: int, run_search, workers, progress, objective="", inputs=None
):
    """search.time_to_train.time_to_train_search with the CLI's search options: (result, the
    ``time_to_train`` JSON object: what ranks, whether exactly, and each plan's goodput)."""
    from paraplan.search.time_to_train import ranked_search

    objective = objective or "time-to-train"
    inputs = inputs or goodput_inputs()
    return ranked_search(
        problem, tokens, top, run_search, objective, inputs, workers=workers, progress=progress
    )


def ttt_title(info: dict) -> str:
    """The plans table's title when a time-to-train objective ranks them."""
    from paraplan.search.time_to_train import OBJECTIVES

    what = OBJECTIVES[info.get("objective", "time-to-train")]
    return f"Plans that fit (ranked by {what} for --tokens, badput included)"


def ttt_lines(info: dict) -> list[str]:
    """Under the plans table: each plan's expected days, P10-P90 and effective training time."""
    from paraplan.search.time_to_train import OBJECTIVES

    what = OBJECTIVES[info.get("objective", "time-to-train")]
    lines = [f"time-to-train (objective column: {what}, badput included):"]
    for rank, g in enumerate(info["goodput"], start=1):
        cost = "" if g["cost_usd"] is None else f", ${g['cost_usd'] / 1e6:.4g} M"
        lines.append(
            f"  {rank}: {g['expected_days']:.2f} days (P10 {g['days_p10']:.2f}, P90 "
            f"{g['days_p90']:.2f}){cost}, failure-free {g['useful_days']:.2f}, effective training "
            f"time {g['effective_training_time_ratio']:.1%}, checkpoint "
            f"{g['checkpoint']['rank_gib']:.3g} GiB per rank every "
            f"{g['checkpoint_interval_steps']} steps, recovery {recovery_text(g['recovery'])}"
        )
    if not info["exact"]:
        lines.append("  ranking over the fastest plans by failure-free time only (MAX_TIME_GROUPS)")
    return lines
