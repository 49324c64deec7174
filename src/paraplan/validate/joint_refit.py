"""Joint refit of the step-time constants on their calibration cases (``python -m
paraplan.validate.joint_refit``).

The constants of ``validate.fitted`` that act on uniform cases (every one but the pipeline-runtime
constants and those of AMP's per-stage clusters, which ``paraplan validate --hetero`` fits) are refitted
together by ``validate.fitted.refit`` (coordinate descent, golden-section inside each constant's bounds),
from their catalog values, minimising the mean over the calibration sets of each set's step-time MAPE
(the objective the shipped values were fitted with). Held-out cases are never fitted on; their sets' MAPEs
before and after are printed beside the calibration sets', so that a refit which improves one set and
worsens another (a regression, not a gain) shows as one. ``--hold NAME``
(repeatable) keeps a constant at its catalog value, e.g. one a component measurement pins. It prints each
constant's catalog and refitted value and each set's MAPE before and after; writing the
refitted values into the catalog files (each system carrying the constant) is left to the person who
reads the table, with the date and case sets in the value's source note.

``--elasticity NAME`` refits nothing: it prints each set's mean elasticity of the predicted step time to
that constant, d ln T / d ln c (``elasticity``); for a GEMM cap, whose GEMMs take a time ∝ 1/cap, minus
the elasticity is the share of the predicted step spent in the GEMMs it prices (how much of a set a change
of the constant moves). ``--hold`` goes with a refit only: beside ``--elasticity`` it is refused
(a one-line error, exit 2), as is any argument the parser does not know.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, NoReturn

from paraplan.validate.case_files import Case, load_cases
from paraplan.validate.cv import step_error
from paraplan.validate.fitted import (
    FITTED_CONSTANTS,
    EngineConstant,
    FittedConstant,
    refit,
)
from paraplan.validate.run import case_role

HETERO_ONLY = ("aws-g4dn.12xlarge", "aws-p3.8xlarge")  # AMP's clusters: validate --hetero


def uniform_constants() -> list[FittedConstant]:
    return [
        k
        for k in FITTED_CONSTANTS
        if not isinstance(k, EngineConstant) and not set(k.systems) <= set(HETERO_ONLY)
    ]


def timed_cases() -> list[Case]:
    """The bundled uniform cases with a measured step time, read once; ``calibration_cases`` and
    ``held_out_cases`` split them by role (validate.run.case_role)."""
    return [
        case for case in load_cases() if isinstance(case, Case) and "step_time_s" in case.measured
    ]


def calibration_cases(timed: list[Case] | None = None) -> dict[str, list[Case]]:
    """Timed uniform calibration cases (of ``timed``, default ``timed_cases()``) by calibration set
    (their group, else their file stem)."""
    sets: dict[str, list[Case]] = {}
    fitted_on = {s for k in uniform_constants() for s in k.fitted_on}
    for case in timed_cases() if timed is None else timed:
        if case_role(case) == "calibration":
            name = case.group if case.group in fitted_on else case.file
            sets.setdefault(name, []).append(case)
    return sets


def held_out_cases(timed: list[Case] | None = None) -> dict[str, list[Case]]:
    """Timed uniform held-out cases (of ``timed``, default ``timed_cases()``) by source (file stem, as
    ``paraplan validate`` groups them)."""
    sets: dict[str, list[Case]] = {}
    for case in timed_cases() if timed is None else timed:
        if case_role(case) == "held_out":
            sets.setdefault(case.file, []).append(case)
    return sets


def case_error(case: Case, values: dict[FittedConstant, float], memo: dict) -> float:
    """``case``'s signed step-time error (%) with the constants at ``values`` (validate.cv.step_error),
    kept in ``memo`` by the values of the constants acting on the case: a case whose system carries
    none of the moved constants is estimated once."""
    key = (
        case.file,
        case.name,
        tuple((k.name, v) for k, v in values.items() if case.system.name in k.systems),
    )
    if key not in memo:
        memo[key] = step_error(case, values)
    return memo[key]


def set_mapes(
    sets: dict[str, list[Case]], values: dict[FittedConstant, float], memo: dict | None = None
) -> dict[str, float]:
    """Each set's step-time MAPE with the constants at ``values`` (validate.cv.step_error); ``memo``
    keeps each case's error by the values of the constants acting on it, so a coordinate step
    re-estimates only the cases its constant moves."""
    memo = {} if memo is None else memo
    return {
        name: sum(abs(case_error(c, values, memo)) for c in cases) / len(cases)
        for name, cases in sets.items()
    }


def joint_refit(sweeps: int = 2, hold: tuple[str, ...] = ()) -> dict[str, Any]:
    """Catalog and refitted values, each calibration set's MAPE before and after (``before``,
    ``after``) and each held-out set's (``held_out_before``, ``held_out_after``: never fitted on);
    the constants named in ``hold`` keep their catalog values (a value a component measurement pins)."""
    constants = uniform_constants()
    unknown = set(hold) - {k.name for k in constants}
    if unknown:
        raise ValueError(
            f"--hold: {', '.join(map(repr, sorted(unknown)))} is not a fitted constant of the "
            "uniform cases"
        )
    timed = timed_cases()
    sets, held_out = calibration_cases(timed), held_out_cases(timed)
    start = {k: k.catalog_value() for k in constants}

    memo: dict = {}

    def objective(values: dict[FittedConstant, float]) -> float:
        mapes = set_mapes(sets, values, memo)
        return sum(mapes.values()) / len(mapes)

    free = [k for k in constants if k.name not in hold]
    values = refit(objective, free, start, sweeps=sweeps)
    return {
        "constants": {k.name: (start[k], values[k]) for k in constants},
        "before": set_mapes(sets, start, memo),
        "after": set_mapes(sets, values, memo),
        "held_out_before": set_mapes(held_out, start, memo),
        "held_out_after": set_mapes(held_out, values, memo),
    }


def elasticity(
    case: Case, const: FittedConstant, step: float = 0.01, memo: dict | None = None
) -> float:
    """d ln T / d ln c of ``case``'s predicted step time T to ``const`` at its catalog value c, by a
    forward difference of ``step`` (relative): ln(T(c·(1+step)) / T(c)) / ln(1 + step); 0 without an
    estimate where the case's system does not carry the constant. Errors are kept in ``memo``
    (``case_error``)."""
    if case.system.name not in const.systems:
        return 0.0
    memo = {} if memo is None else memo
    base = 1.0 + case_error(case, {}, memo) / 100.0
    moved = 1.0 + case_error(case, {const: const.catalog_value() * (1.0 + step)}, memo) / 100.0
    return math.log(moved / base) / math.log1p(step)


def set_elasticities(name: str) -> dict[str, float]:
    """Each calibration and held-out set's mean ``elasticity`` to the uniform constant ``name``."""
    const = next((k for k in uniform_constants() if k.name == name), None)
    if const is None:
        raise ValueError(f"--elasticity: {name!r} is not a fitted constant of the uniform cases")
    timed = timed_cases()
    sets = {**calibration_cases(timed), **held_out_cases(timed)}
    memo: dict = {}
    return {
        s: sum(elasticity(c, const, memo=memo) for c in cases) / len(cases)
        for s, cases in sets.items()
    }


def _print_elasticities(name: str) -> None:
    values = set_elasticities(name)
    print(f"{'set':28} {'d ln T / d ln ' + name:>30}")
    for set_name, value in values.items():
        print(f"{set_name:28} {value:30.3f}")


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (exit 2), as every paraplan command does."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}\n")


def refit_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A refit command's parser (one-line errors) with its ``--hold NAME`` option (repeatable): this
    module's and validate.hetero_refit's."""
    parser = _OneLineParser(prog=prog, description=description)
    parser.add_argument(
        "--hold",
        action="append",
        default=[],
        metavar="NAME",
        help="keep this constant at its catalog value (repeatable)",
    )
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = refit_parser(
        "python -m paraplan.validate.joint_refit",
        "Refit the uniform step-time constants jointly (module docstring).",
    )
    parser.add_argument(
        "--elasticity",
        metavar="NAME",
        help="refit nothing: print each set's elasticity of the step time to this constant",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.elasticity is not None and args.hold:
        parser.error(
            "--hold goes with a refit and --elasticity refits nothing; give one of the two"
        )
    try:
        if args.elasticity is not None:
            _print_elasticities(args.elasticity)
        else:
            _print_refit(joint_refit(hold=tuple(args.hold)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _print_refit(result: dict[str, Any]) -> None:
    print(f"{'constant':28} {'catalog':>12} {'refitted':>12}")
    for name, (was, now) in result["constants"].items():
        print(f"{name:28} {was:12.6g} {now:12.6g}")
    for title, key in (("calibration set", ""), ("held-out set", "held_out_")):
        before, after = result[f"{key}before"], result[f"{key}after"]
        print(f"\n{title:28} {'MAPE before %':>14} {'after %':>9}")
        for name in before:
            print(f"{name:28} {before[name]:14.2f} {after[name]:9.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
