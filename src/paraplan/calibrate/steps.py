"""Step-time constants fitted to measured steps (``paraplan calibrate --steps``): the overlap costs of both
tiers and the in-step GEMM shares no kernel table shows, by Gauss-Newton on the estimator's own step times,
with a leave-one-out error (docs/calibration.md "How each constant is fitted")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.calibrate.fit import (
    EFF,
    NIC_OVERLAP,
    NVLINK_OVERLAP,
    PEAK_SLACK,
    FitPart,
    _residual,
    with_values,
)
from paraplan.cost import kernel_tables
from paraplan.cost.comm_contention import tier_overlap_costs
from paraplan.cost.compute import table_in_step_share
from paraplan.io.terminal import printable
from paraplan.specs.errors import InputError
from paraplan.specs.fields import get_in
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec, gemm_cap_key


# ---- step times -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StepRun:
    name: str
    model: ModelSpec
    plan: PlanSpec
    step_time_s: float


def _predict(run: StepRun, system: SystemSpec) -> float:
    from paraplan.step.estimate import estimate

    return estimate(run.model, system, run.plan).step_time_s


@dataclass(frozen=True)
class StepParam:
    """A constant fitted to step times, as the variable x the fit moves within [lo, hi]: an overlap cost
    itself; an in-step GEMM share or cap as its inverse (a GEMM's time is linear in 1/share), with the
    ``dtype`` of the runs' GEMMs it prices (None for an overlap cost)."""

    path: str
    inverse: bool
    lo: float
    hi: float
    dtype: str | None = None

    def field(self, x: float) -> float:
        return 1.0 / x if self.inverse else x


MIN_IN_STEP_SHARE = 0.3  # the lowest in-step GEMM share or cap a step fit may reach


def step_params(
    runs: list[StepRun], system: SystemSpec, in_step_share: bool = False
) -> list[StepParam]:
    """The overlap costs of both tiers; with ``in_step_share``, then per GEMM cap the runs use (gemm_cap_key
    of their dtypes) the in-step share: ``table_in_step_share.<cap>`` where the attached table has GEMM rows
    of that dtype (cost.compute.table_in_step_share), else the cap itself (docs/calibration.md)."""
    params = [StepParam(NVLINK_OVERLAP, False, 0.0, 1.0), StepParam(NIC_OVERLAP, False, 0.0, 1.0)]
    if not in_step_share:
        return params
    acc = system.accelerator
    for dtype in sorted({r.plan.dtype for r in runs}, key=gemm_cap_key):
        key = gemm_cap_key(dtype)
        table = acc.kernel_tables and kernel_tables.has_gemm_rows(
            acc.kernel_tables, acc.l2_cache, dtype
        )
        path = f"{EFF}.table_in_step_share.{key}" if table else f"{EFF}.{key}"
        if path not in {p.path for p in params}:
            params.append(StepParam(path, True, 1.0, 1.0 / MIN_IN_STEP_SHARE, dtype))
    return params


def param_start(params: list[StepParam], system: SystemSpec) -> np.ndarray:
    """The system's values of ``params`` as the fit's variables (a missing share is 1)."""
    acc = system.accelerator
    out = []
    for p in params:
        if p.path.startswith(f"{EFF}.table_in_step_share."):
            value = table_in_step_share(acc, p.dtype)
        elif p.inverse:
            value = acc.gemm_efficiency_cap(p.dtype)
        else:
            value = get_in(system.model_dump(), p.path.split("."))
            if value is None:  # an overlap cost the system leaves to the NCCL-CTA share
                # of an all-reduce over the whole domain (its D - 1 peers)
                peers = system.node.gpus_per_domain - 1
                costs = tier_overlap_costs("all_reduce", p.path == NIC_OVERLAP, system, peers)
                value = (
                    costs.sm_out + costs.hbm_out
                    if p.path == NIC_OVERLAP
                    else costs.sm_in + costs.hbm_in
                )
        out.append(1.0 / value if p.inverse else value)
    return np.clip(np.array(out, float), [p.lo for p in params], [p.hi for p in params])


def _predict_all(runs, system, costs: np.ndarray, params: list[StepParam]):
    fitted = with_values(system, {p.path: p.field(float(x)) for p, x in zip(params, costs)})
    return np.array([_predict(r, fitted) for r in runs])


def _jacobian(runs, system, costs: np.ndarray, pred: np.ndarray, params: list[StepParam]):
    """d step / d variable by finite differences (a step of 0.05 towards the inside of [lo, hi])."""
    cols = []
    for j, p in enumerate(params):
        step = 0.05 if costs[j] <= (p.lo + p.hi) / 2 else -0.05
        moved = costs.copy()
        moved[j] += step
        cols.append((_predict_all(runs, system, moved, params) - pred) / step)
    return np.column_stack(cols)


def _clip(x: np.ndarray, params: list[StepParam]) -> np.ndarray:
    return np.clip(x, [p.lo for p in params], [p.hi for p in params])


def _fit_costs(runs, system, meas: np.ndarray, start: np.ndarray, params: list[StepParam]):
    """Step-time constants (``step_params``) minimising the relative step-time error (Gauss-Newton: linear
    least squares on the local slopes, repeated; the overlap costs interact through the overlap windows),
    clipped to their bounds. Returns (variables, identified): one no run depends on keeps its start."""
    costs = start.astype(float).copy()
    identified = np.zeros(len(params), bool)
    for _ in range(20):
        pred = _predict_all(runs, system, costs, params)
        jac = _jacobian(runs, system, costs, pred, params)
        identified = np.abs(jac).max(axis=0) > 1e-9 * np.abs(pred).max()
        if not identified.any():
            break
        delta, *_ = np.linalg.lstsq(
            jac[:, identified] / meas[:, None], (meas - pred) / meas, rcond=None
        )
        new = costs.copy()
        new[identified] = costs[identified] + np.nan_to_num(delta[: identified.sum()])
        new = _clip(new, params)
        if np.max(np.abs(new - costs)) < 1e-9:
            costs = new
            break
        costs = new
    return costs, identified


def _leave_one_out(runs, system, meas: np.ndarray, costs: np.ndarray, params) -> list[float]:
    """Each run's step time predicted by the constants fitted without it, in work linear in the runs
    (issue 37: a full refit per run made ``calibrate --steps`` quadratic, 80 runs 69 s).

    The refit without run i is one Gauss-Newton step from the all-runs optimum ``costs``: the
    slopes there (one Jacobian) with row i dropped, solved by least squares on the relative error and
    clipped as in ``_fit_costs``; then run i is estimated there (N estimates). A step time is linear
    in each overlap cost between overlap-window kinks and in each inverse share, so the one step
    lands where the refit converges unless dropping the run crosses a kink."""
    if len(runs) < 2:
        return [float(p) for p in _predict_all(runs, system, costs, params)]
    pred = _predict_all(runs, system, costs, params)
    jac = _jacobian(runs, system, costs, pred, params)
    identified = np.abs(jac).max(axis=0) > 1e-9 * np.abs(pred).max()
    rows = jac[:, identified] / meas[:, None]
    rel = (meas - pred) / meas
    out = []
    for i, run in enumerate(runs):
        c = costs.copy()
        if identified.any():
            keep = np.arange(len(runs)) != i
            delta, *_ = np.linalg.lstsq(rows[keep], rel[keep], rcond=None)
            c[identified] = costs[identified] + np.nan_to_num(delta)
            c = _clip(c, params)
        out.append(float(_predict_all([run], system, c, params)[0]))
    return out


def fit_steps(
    runs: list[StepRun], system: SystemSpec, source: str, in_step_share: bool = False
) -> tuple[FitPart, dict]:
    """Overlap costs and in-step GEMM shares (``step_params``) from measured step times, their residuals,
    and the leave-one-out error."""
    from paraplan.step.estimate import estimate

    part = FitPart()
    meas = np.array([r.step_time_s for r in runs])
    for r in runs:  # a step cannot beat its model FLOPs at every GPU's peak (MFU above 1)
        est = estimate(r.model, system, r.plan)
        ideal = est.model_flops_per_step / (est.gpus * est.peak_flops_per_gpu)
        if r.step_time_s * PEAK_SLACK < ideal:
            raise InputError(
                f"--steps: {source}: run {printable(r.name)}: step_time_s {r.step_time_s:g} is "
                f"{ideal / r.step_time_s:.3g}× faster than the system's peak FLOP/s (MFU above "
                f"{PEAK_SLACK}); check the unit (seconds) and the system"
            )
    params = step_params(runs, system, in_step_share)
    costs, identified = _fit_costs(runs, system, meas, param_start(params, system), params)
    for i, p in enumerate(params):
        if identified[i]:
            part.values[p.path] = p.field(float(costs[i]))
            if p.inverse:
                part.notes[p.path] = (
                    f"fitted to the step times of {source} (validate.fitted's kind of constant: the "
                    "in-step GEMM share no kernel table shows), within "
                    f"[{MIN_IN_STEP_SHARE}, 1]; leave-one-out error below"
                )
        else:
            part.notes[p.path] = "not identified by the measured runs; base value kept" + (
                "" if p.inverse else " (no measured run overlaps communication on this tier)"
            )
    pred = _predict_all(runs, system, costs, params)
    part.residuals.append(_residual(source, "step times", pred, meas))
    loo = [
        {
            "run": r.name,
            "measured_s": r.step_time_s,
            "predicted_s": p,
            "error": p / r.step_time_s - 1.0,
        }
        for r, p in zip(runs, _leave_one_out(runs, system, meas, costs, params))
    ]
    errors = np.array([row["error"] for row in loo])
    summary = {
        "runs": loo,
        "mean_abs_error": float(np.mean(np.abs(errors))),
        "max_abs_error": float(np.max(np.abs(errors))),
        "refit_per_run": len(runs) > 1,
    }
    return part, summary
