"""Leave-one-group-out cross-validation of the fitted constants (``paraplan validate --cv`` and
``paraplan validate --hetero --cv``).

For each case group (a case's ``group`` field, default its file stem): refit the fitted constants
that apply to the group (paraplan.validate.fitted: its systems', and for a per-stage case its
pipeline runtime's) on the step times of every *other* calibration group (the sets the constants are
fitted on, ``case_role``; held-out sets are never fitted on, in the shipped constants or here), then
predict the group's step times with the refitted values. A constant no remaining case constrains
falls back to its schema default (``EfficiencySpec``, ``NetworkSpec``, ``EngineRules``), not to its
catalog value, which was fitted with the group in. The cross-validated MAPE is the honest error of a
new group of runs of the same kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from paraplan.step.estimate import estimate
from paraplan.step.engines import EngineRules, engine_rules_of
from paraplan.specs.system import EfficiencySpec, SystemSpec
from paraplan.validate.fitted import (
    FITTED_CONSTANTS,
    EngineConstant,
    FittedConstant,
    refit,
    with_constants,
    with_engine_constants,
)
from paraplan.validate.case_files import Case, UnsupportedCase
from paraplan.validate.run import case_role, error_pct


def step_error(case: Case, values: dict[FittedConstant, float]) -> float:
    """Signed step-time error (%) of ``case`` with the fitted constants at ``values``."""
    system = with_constants(case.system, values)
    return error_pct(
        estimate(case.model, system, case.plan).step_time_s, case.measured["step_time_s"]
    )


def _prior(const: FittedConstant) -> float:
    """Schema default of a constant's field (no calibration), used when nothing constrains it; an efficiency
    field without a default (the fp8 caps) takes the bf16 cap's default."""
    if isinstance(const, EngineConstant):
        return float(EngineRules.__dataclass_fields__[const.path[-1]].default)
    model: Any = SystemSpec
    for part in const.path[:-1]:
        model = model.model_fields[part].annotation
    default = model.model_fields[const.path[-1]].default
    return float(default) if default is not None else EfficiencySpec.model_fields["gemm"].default


def leave_one_group_out(
    cases: Sequence[Any],
    constants: Sequence[FittedConstant],
    applies: Callable[[FittedConstant, Any], bool],
    step_error: Callable[[Any, dict[FittedConstant, float]], float],
    trains: Callable[[Any], bool] = lambda case: True,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """The procedure of the module docstring over ``cases`` (each with ``name``, ``cv_group``): ``applies(k, c)``
    says whether constant k acts on case c, ``step_error(c, values)`` is c's signed step-time error (%) with the
    constants at ``values``, ``trains(c)`` whether c may be fitted on; ``progress(group, done, total)`` is called
    before each group is refitted and once at the end (group "")."""
    groups: dict[str, list[Any]] = {}
    for case in cases:
        groups.setdefault(case.cv_group, []).append(case)
    report: dict[str, Any] = {"groups": {}, "cases": []}
    all_errors: list[float] = []
    for done, (group, held) in enumerate(groups.items()):
        if progress is not None:
            progress(group, done, len(groups))
        mine = [k for k in constants if any(applies(k, c) for c in held)]
        train = [
            c
            for c in cases
            if c.cv_group != group and trains(c) and any(applies(k, c) for k in mine)
        ]
        start = {k: k.catalog_value() for k in mine}
        free = [k for k in mine if any(applies(k, t) for t in train)]
        fixed = {k: _prior(k) for k in mine if k not in free}
        start.update(fixed)

        def objective(values: dict[FittedConstant, float]) -> float:
            errs = [abs(step_error(t, values)) for t in train]
            return sum(errs) / len(errs)

        values = refit(objective, free, start) if free and train else start
        errors = {c.name: step_error(c, values) for c in held}
        all_errors += list(errors.values())
        in_sample = [abs(step_error(c, {k: k.catalog_value() for k in mine})) for c in held]
        report["groups"][group] = {
            "cases": len(held),
            "cv_step_time_mape_pct": sum(abs(e) for e in errors.values()) / len(errors),
            "in_sample_step_time_mape_pct": sum(in_sample) / len(in_sample),
            "refitted": {c.name: values[c] for c in mine},
            "prior_only": sorted(c.name for c in fixed),
            "training_cases": len(train),
        }
        report["cases"] += [
            {"name": n, "group": group, "cv_error_pct": e} for n, e in errors.items()
        ]
    if progress is not None:
        progress("", len(groups), len(groups))
    report["cv_step_time_mape_pct"] = (
        sum(abs(e) for e in all_errors) / len(all_errors) if all_errors else None
    )
    report["cv_step_time_max_abs_error_pct"] = max((abs(e) for e in all_errors), default=None)
    return report


def cross_validate(
    cases: list[Case | UnsupportedCase], constants=FITTED_CONSTANTS, progress=None
) -> dict[str, Any]:
    """Per held-out group of uniform cases: refitted constants, predictions and MAPE; overall LOGO MAPE."""
    scored = [c for c in cases if isinstance(c, Case) and "step_time_s" in c.measured]
    return leave_one_group_out(
        scored,
        constants,
        lambda k, c: c.system.name in k.systems,
        step_error,
        lambda c: case_role(c) == "calibration",
        progress,
    )


def _hetero_applies(const: FittedConstant, case: Any) -> bool:
    """A system constant acts on a per-stage case through any of its pools, a runtime constant through its engine."""
    if isinstance(const, EngineConstant):
        return case.plan.engine_stack == const.stack
    return any(pool.system.name in const.systems for pool in case.cluster.pools)


def hetero_step_error(case: Any, values: dict[FittedConstant, float]) -> float:
    """Signed step-time error (%) of a per-stage case (validate.hetero.HeteroCase) with the fitted constants at
    ``values``: its pools' systems through ``with_constants``, its runtime's rules through ``with_engine_constants``."""
    from paraplan.step.per_stage import estimate_stage_plan

    pools = tuple(
        p.model_copy(update={"system": with_constants(p.system, values)})
        for p in case.cluster.pools
    )
    cluster = case.cluster.model_copy(update={"pools": pools})
    rules = with_engine_constants(engine_rules_of(case.plan.engine, case.plan.engine_stack), values)
    return error_pct(
        estimate_stage_plan(case.model, cluster, case.plan, rules).step_time_s,
        case.measured["step_time_s"],
    )


def cross_validate_hetero(
    cases: Sequence[Any], constants=FITTED_CONSTANTS, progress=None
) -> dict[str, Any]:
    """As ``cross_validate`` over heterogeneous / per-stage cases (validate.hetero.HeteroCase): the groups are
    the cases' ``group`` (AMP's amp-mixed and amp-t4), every timed case is a calibration case."""
    return leave_one_group_out(
        [c for c in cases if "step_time_s" in c.measured],
        constants,
        _hetero_applies,
        hetero_step_error,
        progress=progress,
    )
