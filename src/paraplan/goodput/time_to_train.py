"""Expected time-to-train with failures, checkpoints and restarts, for any work and checkpoint size
(``time_to_train``); ``goodput.plan.plan_goodput`` feeds it one plan's estimate."""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.goodput import closed_forms as cf
from paraplan.goodput.checkpoint import CheckpointCost
from paraplan.goodput.inputs import SECONDS_PER_DAY, GoodputInputs
from paraplan.goodput.montecarlo import DEFAULT_SAMPLES, DEFAULT_SEED, sample_wall_time


@dataclass(frozen=True)
class TimeToTrain:
    """Expected seconds of a run and where they go (badput by cause sums to wall_s - useful_s)."""

    useful_s: float
    wall_s: float  # expected, start-up included
    mtbf_s: float
    interval_s: float
    interval_steps: int
    restart_s: float
    expected_failures: float
    badput_s: dict[str, float]
    p10_s: float
    p50_s: float
    p90_s: float

    @property
    def effective_training_time_ratio(self) -> float:
        """ETTR = useful training time / wall-clock time (Kokolis et al. 2025, HPCA, §V)."""
        return self.useful_s / self.wall_s

    @property
    def lost_s(self) -> float:
        return self.badput_s["lost_progress_s"]

    @property
    def idle_s(self) -> float:
        """Badput spent waiting rather than recomputing: saves, restarts, start-up."""
        return self.wall_s - self.useful_s - self.lost_s


def _best_steps(cost, low: int, high: int) -> int:
    """The whole number k in [low, high] minimising the unimodal ``cost(k)`` (integer ternary search)."""
    while high - low > 2:
        a = low + (high - low) // 3
        b = high - (high - low) // 3
        if cost(a) <= cost(b):
            high = b
        else:
            low = a
    return min(range(low, high + 1), key=cost)


def checkpoint_interval_s(
    inputs: GoodputInputs,
    stall_s: float,
    persist_s: float,
    mtbf_s: float,
    step_s: float,
    useful_s: float,
    restart_s: float,
) -> float:
    """The interval between checkpoints, a whole number of steps between one step (or, asynchronously,
    the time a save takes to become durable: the next snapshot waits for it) and the whole run.
    ``optimal``: the one minimising Daly's expected wall time (closed_forms.expected_wall_s, unimodal
    in tau); ``daly``: Daly 2006 eq. (37); ``young``: Young 1974; a number: those seconds."""
    choice = inputs.checkpoint.interval
    floor = max(step_s, persist_s - stall_s if inputs.checkpoint.mode == "async" else 0.0)
    low = max(1, math.ceil(floor / step_s - 1e-9))
    high = max(low, math.ceil(useful_s / step_s))
    if choice == "optimal":

        def wall(k: int) -> float:
            return cf.expected_wall_s(useful_s, k * step_s, stall_s, restart_s, mtbf_s)

        return step_s * _best_steps(wall, low, high)
    if choice == "daly":
        tau = cf.daly_interval_s(stall_s, mtbf_s)
    elif choice == "young":
        tau = cf.young_interval_s(stall_s, mtbf_s)
    else:
        tau = float(choice)
    k = round(tau / step_s) if math.isfinite(tau) else high
    return step_s * min(max(k, low), high)


def time_to_train(
    useful_s: float,
    step_s: float,
    gpus: int,
    ckpt: CheckpointCost,
    inputs: GoodputInputs,
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
) -> TimeToTrain:
    """Daly's expected wall time of ``useful_s`` seconds of training on ``gpus`` GPUs
    (closed_forms.expected_wall_s) plus the job's start-up, the badput by cause, and P10/P50/P90 from
    the seeded Monte Carlo. An asynchronous save's write still in flight at a failure is lost too: its
    persist time beyond the stall is added to the restart (an upper bound)."""
    rate = cf.job_failure_rate_per_s(gpus, inputs.failures)
    mtbf = 1.0 / rate if rate > 0 else math.inf
    servers = cf.servers_for(gpus, inputs.failures.gpus_per_server)
    server_rate = servers * inputs.failures.server_failures_per_day / SECONDS_PER_DAY
    restart = cf.restart_time_s(gpus, inputs.restart, ckpt.load_s, server_rate)
    in_flight = ckpt.persist_s - ckpt.stall_s if inputs.checkpoint.mode == "async" else 0.0
    rollback = restart + in_flight
    tau = checkpoint_interval_s(
        inputs, ckpt.stall_s, ckpt.persist_s, mtbf, step_s, useful_s, rollback
    )
    wall = cf.expected_wall_s(useful_s, tau, ckpt.stall_s, rollback, mtbf)
    save = useful_s / tau * ckpt.stall_s
    rolled = cf.expected_rollbacks(useful_s, tau, ckpt.stall_s, mtbf)
    restarting = rolled * (cf.expected_segment_s(rollback, 0.0, mtbf) - in_flight)
    badput = {
        "startup_s": inputs.restart.startup_s,
        "checkpoint_save_s": save,
        "restart_s": restarting,
        "lost_progress_s": wall - useful_s - save - restarting,
    }
    mc = sample_wall_time(useful_s, tau, ckpt.stall_s, rollback, mtbf, samples, seed)
    startup = inputs.restart.startup_s
    return TimeToTrain(
        useful_s=useful_s,
        wall_s=wall + startup,
        mtbf_s=mtbf,
        interval_s=tau,
        interval_steps=round(tau / step_s),
        restart_s=restart,
        expected_failures=wall / mtbf,
        badput_s=badput,
        p10_s=mc.percentile_s(10) + startup,
        p50_s=mc.percentile_s(50) + startup,
        p90_s=mc.percentile_s(90) + startup,
    )


def _min_over_interval(cost, low_s: float = 1e-3, high_s: float = 1e9) -> float:
    """min of a unimodal ``cost(tau)`` over [low_s, high_s] (ternary search on log tau)."""
    a, b = math.log(low_s), math.log(high_s)
    for _ in range(200):
        m1, m2 = a + (b - a) / 3, b - (b - a) / 3
        if cost(math.exp(m1)) <= cost(math.exp(m2)):
            b = m2
        else:
            a = m1
    return cost(math.exp((a + b) / 2))


def wall_lower_bound_factor(
    gpus: int, total_bytes: float, host_bandwidth: float, inputs: GoodputInputs
) -> float:
    """c with T_wall >= c * T_s + t_startup for every plan of ``gpus`` GPUs saving ``total_bytes`` of
    state: any plan's busiest rank holds at least total_bytes / gpus, so its stall is at least
    delta_min (sync: max(S_total / B_write, S_total / (N B_host)); async: S_total / (N B_host)) and its
    reload at least the same bound reading; the in-flight loss is at least 0, and whole steps only
    restrict tau, so c = min over continuous tau of M e^(R/M) (e^((tau + delta_min)/M) - 1) / tau
    (Daly's expected_wall_s per useful second); 1 without failures."""
    rate = cf.job_failure_rate_per_s(gpus, inputs.failures)
    if rate <= 0:
        return 1.0
    mtbf = 1.0 / rate
    ck = inputs.checkpoint
    share = total_bytes / gpus / host_bandwidth
    stall = max(total_bytes / ck.storage_write_bandwidth, share) if ck.mode == "sync" else share
    load = max(total_bytes / ck.storage_read_bandwidth, share)
    servers = cf.servers_for(gpus, inputs.failures.gpus_per_server)
    server_rate = servers * inputs.failures.server_failures_per_day / SECONDS_PER_DAY
    restart = cf.restart_time_s(gpus, inputs.restart, load, server_rate)
    return _min_over_interval(lambda tau: cf.expected_wall_s(1.0, tau, stall, restart, mtbf))
