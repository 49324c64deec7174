"""paraplan.goodput (issue 36): closed forms against hand-computed values, the Monte Carlo's mean against
the closed form, monotonicity of the expected time-to-train, and the plan-dependent checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_model, load_system
from paraplan.goodput import closed_forms as cf
from paraplan.goodput.checkpoint import CheckpointCost, checkpoint_cost, write_time_s
from paraplan.goodput.inputs import FailureInputs, default_inputs
from paraplan.goodput.montecarlo import Draws, sample_wall_time
from paraplan.goodput.plan import plan_goodput
from paraplan.goodput.time_to_train import time_to_train
from paraplan.specs.plan_fields import plan_from_fields
from paraplan.step.estimate import estimate

DAY = 86400.0


def test_job_failure_rate_adds_gpus_and_servers():
    failures = FailureInputs(
        gpu_failures_per_day=0.01, server_failures_per_day=0.1, gpus_per_server=8
    )
    # 16 GPUs on 2 servers: 16 * 0.01 + 2 * 0.1 = 0.36 per day; 17 GPUs take 3 servers
    assert cf.job_failure_rate_per_s(16, failures) == pytest.approx(0.36 / DAY)
    assert cf.job_failure_rate_per_s(17, failures) == pytest.approx(0.47 / DAY)


def test_probability_of_a_failure_hand_computed():
    # 1,024 GPUs at 1 %/year over 30 days: 1 - exp(-1024 * 0.01 / 365 * 30) = 1 - exp(-0.8416438)
    rate = 1024 * cf.annual_rate_to_per_day(0.01) / DAY
    assert cf.prob_at_least_one_failure(rate, 30 * DAY) == pytest.approx(0.5689986, abs=1e-6)


def test_young_and_daly_hand_computed():
    # delta 60 s, M 3600 s: Young sqrt(2 * 60 * 3600) = 657.267; Daly 657.267 * (1 + sqrt(1/120)/3
    # + 1/1080) - 60 = 617.876
    assert cf.young_interval_s(60, 3600) == pytest.approx(657.26707, abs=1e-4)
    assert cf.daly_interval_s(60, 3600) == pytest.approx(617.87565, abs=1e-4)
    assert cf.daly_interval_s(8000, 3600) == 3600  # delta >= 2M: tau = M
    assert cf.daly_interval_s(60, math.inf) == math.inf


def test_expected_wall_hand_computed_and_failure_free_limit():
    # M 1e4, R 100, tau 1000, delta 10, T_s 1e5: 1e4 e^0.01 (e^0.101 - 1) * 100
    assert cf.expected_wall_s(1e5, 1000, 10, 100, 1e4) == pytest.approx(107344.74, abs=0.01)
    assert cf.expected_wall_s(1e5, 1000, 10, 100, math.inf) == pytest.approx(1e5 * 1010 / 1000)


def test_spare_wait_hand_computed():
    assert cf.expected_spare_wait_s(1e-5, 1000.0, None) == 0.0
    assert cf.expected_spare_wait_s(1e-5, 1000.0, 0) == 1000.0
    # m = 5e-4 * 1000 = 0.5 servers in repair; one spare busy with P = 1 - e^-0.5; wait t/2
    expected = (1 - math.exp(-0.5)) * 1000.0 / 2
    assert cf.expected_spare_wait_s(5e-4, 1000.0, 1) == pytest.approx(expected)


@settings(max_examples=15, deadline=None)
@given(
    mtbf_s=st.floats(2_000, 50_000),
    interval_s=st.floats(100, 5_000),
    save_s=st.floats(0, 200),
    restart_s=st.floats(0, 2_000),
    segments=st.integers(5, 200),
)
def test_monte_carlo_mean_matches_daly(mtbf_s, interval_s, save_s, restart_s, segments):
    useful = segments * interval_s
    mc = sample_wall_time(useful, interval_s, save_s, restart_s, mtbf_s, Draws(4000, 7))
    closed = cf.expected_wall_s(useful, interval_s, save_s, restart_s, mtbf_s)
    stderr = mc.wall_s.std() / math.sqrt(len(mc.wall_s))
    assert abs(mc.wall_s.mean() - closed) <= 5 * stderr + 1e-9 * closed
    # failures arrive at rate 1/M over the whole wall time (Wald): E[N] = E[T_w] / M
    n_err = mc.failures.std() / math.sqrt(len(mc.failures)) + 1e-12
    assert abs(mc.failures.mean() - closed / mtbf_s) <= 5 * n_err + 1e-6


def test_monte_carlo_is_reproducible_and_ordered():
    a = sample_wall_time(1e6, 1000, 10, 600, 2e4, Draws(500, 3))
    b = sample_wall_time(1e6, 1000, 10, 600, 2e4, Draws(500, 3))
    assert np.array_equal(a.wall_s, b.wall_s)
    assert a.percentile_s(10) <= a.percentile_s(50) <= a.percentile_s(90)
    assert a.wall_s.min() >= 1e6 + 1000 * 10  # never faster than the failure-free run


def _ckpt(write_bw: float = 2e12, rank: float = 4e9, total: float = 5.67e12, host: float = 50e9):
    write = write_time_s(rank, total, write_bw, host)
    return CheckpointCost(rank, total, write, write, write)


def _wall(inputs, ckpt=None, gpus=16384) -> float:
    return time_to_train(30 * DAY, 6.0, gpus, ckpt or _ckpt(), inputs, draws=Draws(50)).wall_s


@settings(max_examples=20, deadline=None)
@given(scale=st.floats(1.0, 20.0), gpus=st.sampled_from([64, 1024, 16384, 100_000]))
def test_monotone_in_failure_rate_storage_restart_and_spares(scale, gpus):
    base = default_inputs()
    f = base.failures
    worse_rate = base.with_changes(
        failures={
            "gpu_failures_per_day": f.gpu_failures_per_day * scale,
            "server_failures_per_day": f.server_failures_per_day * scale,
        }
    )
    assert _wall(worse_rate, gpus=gpus) >= _wall(base, gpus=gpus)
    assert _wall(base, _ckpt(2e12 / scale), gpus) >= _wall(base, _ckpt(2e12), gpus)
    slower_restart = base.with_changes(restart={"detect_s": base.restart.detect_s * scale})
    assert _wall(slower_restart, gpus=gpus) >= _wall(base, gpus=gpus)
    spares = [_wall(base.with_changes(restart={"spare_servers": s}), gpus=gpus) for s in range(6)]
    assert all(a >= b for a, b in zip(spares, spares[1:]))
    assert spares[-1] >= _wall(base, gpus=gpus)  # None = ample spares: the shortest


def test_ettr_and_badput_add_up():
    run = time_to_train(54 * DAY, 6.2, 16384, _ckpt(), default_inputs(), draws=Draws(200))
    assert sum(run.badput_s.values()) == pytest.approx(run.wall_s - run.useful_s)
    assert 0.9 < run.effective_training_time_ratio < 1.0
    assert run.interval_s == pytest.approx(run.interval_steps * 6.2)


def test_async_checkpoint_stalls_less_than_sync():
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    plan = plan_from_fields({"gpus": 8, "global_batch": 8})
    est = estimate(model, system, plan)
    sync = checkpoint_cost(est, model, system, plan, default_inputs().checkpoint)
    slow = default_inputs().with_changes(checkpoint={"storage_write_bandwidth": "1 GB/s"})
    asynchronous = slow.with_changes(checkpoint={"mode": "async"}).checkpoint
    a = checkpoint_cost(est, model, system, plan, asynchronous)
    s = checkpoint_cost(est, model, system, plan, slow.checkpoint)
    assert a.stall_s < s.stall_s == pytest.approx(s.persist_s)
    assert a.persist_s == pytest.approx(s.persist_s)
    # 1.3B parameters * (2 + 12) B in all; one GPU per replica holds all weights and optimizer state
    params = sync.total_bytes / 14
    assert 1.2e9 < params < 1.5e9
    assert sync.rank_bytes == pytest.approx(sync.total_bytes, rel=1e-6)


def test_zero_sharding_shrinks_the_checkpoint_per_rank():
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    ckpt = default_inputs().checkpoint
    sizes = {}
    for zero in (0, 1, 3):
        plan = plan_from_fields({"gpus": 8, "global_batch": 8, "zero": zero})
        sizes[zero] = checkpoint_cost(estimate(model, system, plan), model, system, plan, ckpt)
    assert sizes[0].rank_bytes > sizes[1].rank_bytes > sizes[3].rank_bytes
    # weights 2 B + optimizer 12 B per parameter: ZeRO-1 over 8 keeps 2 + 12/8, ZeRO-3 (2 + 12)/8
    total = sizes[0].total_bytes
    assert sizes[1].rank_bytes == pytest.approx(total * (2 + 12 / 8) / 14, rel=1e-6)
    assert sizes[3].rank_bytes == pytest.approx(total / 8, rel=1e-6)
    assert len({s.total_bytes for s in sizes.values()}) == 1


def test_plan_goodput_energy_and_fields():
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    plan = plan_from_fields({"gpus": 8, "global_batch": 8})
    est = estimate(model, system, plan)
    out = plan_goodput(est, model, system, plan, 1e10, price_per_gpu_hour=2.0).to_dict()
    for key in ("effective_training_time_ratio", "checkpoint_interval_s", "expected_failures"):
        assert out[key] > 0
    assert out["days_p10"] <= out["days_p50"] <= out["days_p90"]
    assert out["useful_days"] <= out["expected_days"]
    # energy never below the GPUs at their waiting power for the failure-free time, never above
    # everything at peak for the expected wall time (PUE included)
    wall_s = out["expected_days"] * DAY
    assert out["energy_mwh"] * 3.6e9 <= out["peak_mw"] * 1e6 * wall_s * (1 + 1e-9)
    assert out["energy_mwh"] * 3.6e9 >= 8 * 200 * out["useful_days"] * DAY
    assert out["tokens_per_joule"] == pytest.approx(1e10 / (out["energy_mwh"] * 3.6e9))
    unknown = system.model_copy(
        update={"accelerator": system.accelerator.model_copy(update={"name": "X"})}
    )
    none = plan_goodput(est, model, unknown, plan, 1e10).to_dict()
    assert none["energy_mwh"] is None and none["cost_usd"] is None


def test_defaults_carry_a_source_for_every_section():
    inputs = default_inputs()
    for section in ("failures", "checkpoint", "restart", "energy"):
        for name in type(getattr(inputs, section)).model_fields:
            assert f"{section}.{name}" in inputs.sources, f"{section}.{name} has no source"


@pytest.mark.parametrize("gpus", [1024, 16384, 98304])
def test_badput_parts_are_never_negative(gpus):
    run = time_to_train(30 * DAY, 6.0, gpus, _ckpt(), default_inputs(), draws=Draws(50))
    assert all(v >= 0 for v in run.badput_s.values()), run.badput_s
    # restarts: rollbacks * M (e^(R/M) - 1), hand-assembled from the closed forms
    rolled = cf.expected_rollbacks(30 * DAY, run.interval_s, _ckpt().stall_s, run.mtbf_s)
    expected = rolled * run.mtbf_s * math.expm1(run.restart_s / run.mtbf_s)
    assert run.badput_s["restart_s"] == pytest.approx(expected)


def test_offloaded_state_is_checkpointed_as_resident_state():
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    ckpt = default_inputs().checkpoint
    sizes = []
    for extra in ({}, {"offload_optimizer": True, "offload_activations": True}):
        plan = plan_from_fields({"gpus": 8, "global_batch": 8, **extra})
        est = estimate(model, system, plan)
        sizes.append(checkpoint_cost(est, model, system, plan, ckpt).rank_bytes)
    assert sizes[0] == pytest.approx(sizes[1])


@pytest.mark.parametrize("gpus,zero", [(8, 0), (8, 3), (64, 1)])
def test_wall_lower_bound_holds_for_plans(gpus, zero):
    from paraplan.goodput.checkpoint import total_state_bytes
    from paraplan.goodput.bounds import Fleet, wall_lower_bound_factor

    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    inputs = default_inputs().with_changes(
        failures={"gpu_failures_per_day": 0.05, "server_failures_per_day": 0.2}
    )
    plan = plan_from_fields({"gpus": gpus, "global_batch": gpus, "zero": zero})
    est = estimate(model, system, plan)
    good = plan_goodput(est, model, system, plan, 1e11, inputs)
    host = system.accelerator.host_bandwidth
    factor = wall_lower_bound_factor(
        Fleet(gpus, total_state_bytes(model, system, plan.dtype, plan), host, inputs)
    )
    assert factor > 1.0
    bound = factor * good.time.useful_s + inputs.restart.startup_s
    assert good.time.wall_s >= bound * (1 - 1e-9)
