"""Refit of the constants fitted on AMP's trials (``python -m paraplan.validate.hetero_refit``).

The constants of ``validate.fitted`` that act only on AMP's per-stage trials (those
``validate.joint_refit.uniform_constants`` leaves out: the T4's GEMM and HBM fractions, AMP's stack's host time
per layer, the p3.8xlarge network efficiency) were fitted jointly over AMP's 90 timed trials, minimising the
two groups' step-time MAPEs together (amp-mixed and amp-t4, validate/cases/hetero/amp2022.json;
docs/heterogeneous.md "Calibration"). This refits them the same way: ``validate.fitted.refit`` (coordinate
descent, golden-section inside each constant's bounds) from their catalog values, minimising the mean of the
two groups' MAPEs, each trial priced by ``validate.cv.hetero_step_error`` (the rules and systems
``paraplan validate --hetero`` and ``--hetero --cv`` price). ``--hold NAME`` (repeatable) keeps a constant at
its catalog value. It prints each constant's catalog and refitted value and each group's MAPE before and
after; writing a value back (``step.engines``, the catalog's system files) is left to the person who reads
the table, with the date in the value's note.
"""

from __future__ import annotations

import sys
from typing import Any

from paraplan.validate.cv import hetero_step_error
from paraplan.validate.fitted import FITTED_CONSTANTS, FittedConstant, refit
from paraplan.validate.hetero import load_hetero_cases
from paraplan.validate.joint_refit import refit_parser, uniform_constants


def amp_constants() -> list[FittedConstant]:
    """The fitted constants that act on AMP's trials only (every one ``uniform_constants`` leaves out)."""
    uniform = uniform_constants()
    return [k for k in FITTED_CONSTANTS if k not in uniform]


def group_mapes(groups: dict[str, list[Any]], values: dict[FittedConstant, float]) -> dict:
    """Each group's step-time MAPE (%) with the constants at ``values`` (validate.cv.hetero_step_error)."""
    return {
        name: sum(abs(hetero_step_error(c, values)) for c in cases) / len(cases)
        for name, cases in groups.items()
    }


def hetero_refit(sweeps: int = 2, hold: tuple[str, ...] = ()) -> dict[str, Any]:
    """Catalog and refitted values of ``amp_constants`` and each group's MAPE before and after; the
    constants named in ``hold`` keep their catalog values."""
    constants = amp_constants()
    unknown = set(hold) - {k.name for k in constants}
    if unknown:
        raise ValueError(
            f"--hold: {', '.join(map(repr, sorted(unknown)))} is not a constant fitted on AMP's trials"
        )
    groups: dict[str, list[Any]] = {}
    for case in load_hetero_cases():
        if "step_time_s" in case.measured:
            groups.setdefault(case.group, []).append(case)
    start = {k: k.catalog_value() for k in constants}

    def objective(values: dict[FittedConstant, float]) -> float:
        mapes = group_mapes(groups, values)
        return sum(mapes.values()) / len(mapes)

    free = [k for k in constants if k.name not in hold]
    values = refit(objective, free, start, sweeps=sweeps)
    return {
        "constants": {k.name: (start[k], values[k]) for k in constants},
        "before": group_mapes(groups, start),
        "after": group_mapes(groups, values),
    }


def main(argv: list[str] | None = None) -> None:
    parser = refit_parser(
        "python -m paraplan.validate.hetero_refit",
        "Refit the constants fitted on AMP's trials jointly (module docstring).",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = hetero_refit(hold=tuple(args.hold))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"{'constant':32} {'catalog':>12} {'refitted':>12}")
    for name, (was, now) in result["constants"].items():
        print(f"{name:32} {was:12.6g} {now:12.6g}")
    print(f"\n{'group':32} {'MAPE before %':>14} {'after %':>9}")
    for name, before in result["before"].items():
        print(f"{name:32} {before:14.3f} {result['after'][name]:9.3f}")


if __name__ == "__main__":
    main()
