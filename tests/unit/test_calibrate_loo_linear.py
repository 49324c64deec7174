"""Issue 37: ``calibrate --steps`` was quadratic in the runs (a full refit per left-out run)."""

import numpy as np

from paraplan.calibrate import fit, steps
from paraplan.calibrate.synthetic import step_runs, true_system


def _runs(n: int) -> list[steps.StepRun]:
    base = step_runs(true_system())
    rng = np.random.default_rng(0)
    return [
        steps.StepRun(f"{r.name}-{k}", r.model, r.plan, r.step_time_s * (1 + 0.05 * rng.normal()))
        for k in range(n // len(base) + 1)
        for r in base
    ][:n]


def test_step_fit_with_leave_one_out_costs_estimates_linear_in_the_runs(monkeypatch):
    calls = [0]
    predict = steps._predict

    def counted(run, system):
        calls[0] += 1
        return predict(run, system)

    monkeypatch.setattr(steps, "_predict", counted)
    system = fit.with_values(true_system(), {fit.NVLINK_OVERLAP: 0.3, fit.NIC_OVERLAP: 0.7})
    n = 20
    part, loo = steps.fit_steps(_runs(n), system, "steps.yaml")
    assert len(loo["runs"]) == n
    # the fit itself: at most 20 Gauss-Newton rounds of 3 N estimates; leave-one-out: 4 N.
    # A refit per left-out run cost 5,869 estimates here.
    assert calls[0] <= (20 * 3 + 3 + 1 + 1) * n
    assert all(np.isfinite(row["predicted_s"]) for row in loo["runs"])


def test_leave_one_out_matches_a_full_refit_per_run():
    system = fit.with_values(true_system(), {fit.NVLINK_OVERLAP: 0.3, fit.NIC_OVERLAP: 0.7})
    runs = _runs(5)
    meas = np.array([r.step_time_s for r in runs])
    start = np.array([system.node.nvlink_overlap_cost, system.network.overlap_cost])
    params = steps.step_params(runs, system)
    _, loo = steps.fit_steps(runs, system, "steps.yaml")
    for i, row in enumerate(loo["runs"]):
        keep = [j for j in range(len(runs)) if j != i]
        c = steps._fit_costs([runs[j] for j in keep], system, meas[keep], start, params)[0]
        exact = float(steps._predict_all([runs[i]], system, c, params)[0])
        assert abs(row["predicted_s"] / exact - 1) < 1e-4
