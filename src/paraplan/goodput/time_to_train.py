"""Expected time-to-train with failures, checkpoints and restarts, for any work and checkpoint size
(``time_to_train``); ``goodput.plan.plan_goodput`` feeds it one plan's estimate."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from paraplan.goodput import closed_forms as cf
from paraplan.goodput.checkpoint import CheckpointCost
from paraplan.goodput.inputs import SECONDS_PER_DAY, GoodputInputs
from paraplan.goodput.montecarlo import DEFAULT_DRAWS, Draws, sample_wall_time
from paraplan.goodput.recovery import BlastRadius, absorbed_cost_s


@dataclass(frozen=True)
class TimeToTrain:
    """Expected seconds of a run and where they go (badput by cause sums to wall_s - useful_s)."""

    useful_s: float
    wall_s: float  # expected, start-up included
    mtbf_s: float  # mean time between failures of every kind
    interval_s: float
    interval_steps: int
    restart_s: float
    expected_failures: float
    badput_s: dict[str, float]
    p10_s: float
    p50_s: float
    p90_s: float
    planned_interruptions: float = 0.0
    policy: str = "rollback"
    absorbed: tuple[str, ...] = ()  # failure kinds ft-dp drops replicas for (goodput.recovery)

    @property
    def effective_training_time_ratio(self) -> float:
        """ETTR = useful training time / wall-clock time (Kokolis et al. 2025, HPCA, §V)."""
        return self.useful_s / self.wall_s

    @property
    def lost_s(self) -> float:
        return self.badput_s["lost_progress_s"]

    @property
    def idle_s(self) -> float:
        """Badput spent waiting rather than recomputing: saves, restarts, start-up, pauses."""
        return self.wall_s - self.useful_s - self.lost_s


@dataclass(frozen=True)
class Recovery:
    """What the plan's placement gives the recovery: its blast radius (goodput.recovery), the rejoin
    time of a dropped unit, and the NVLink domain size (for domain failures)."""

    radius: BlastRadius | None = None
    rejoin_s: float = 0.0
    gpus_per_domain: int | None = None


NO_RECOVERY = Recovery()  # no blast radius known: every failure rolls back


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
    mode: str | None = None,
) -> float:
    """The interval between checkpoints, a whole number of steps between one step (or, asynchronously,
    the time a save takes to become durable: the next snapshot waits for it) and the whole run.
    ``optimal``: the one minimising Daly's expected wall time (closed_forms.expected_wall_s, unimodal
    in tau); ``daly``: Daly 2006 eq. (37); ``young``: Young 1974; a number: those seconds."""
    choice = inputs.checkpoint.interval
    mode = mode or inputs.checkpoint.mode
    floor = max(step_s, persist_s - stall_s if mode == "async" else 0.0)
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


def _absorbed_options(rates: dict, inputs: GoodputInputs, recovery: Recovery) -> list[tuple]:
    """The sets of failure kinds ft-dp may absorb (every subset of those it can: the policy drops
    replicas for a kind only when that is expected to be faster; rollback: none)."""
    radius = recovery.radius
    if inputs.restart.policy != "ft-dp" or radius is None:
        return [()]
    kinds = [k for k in cf.FAILURE_KINDS if rates[k] > 0 and radius.absorbable(k)]
    return [c for n in range(len(kinds) + 1) for c in itertools.combinations(kinds, n)]


def _expected(useful_s, step_s, gpus, ckpt, inputs, rates, recovery, absorbed) -> dict:
    """The expected wall time (start-up excluded) and its parts when the kinds ``absorbed`` are
    dropped-and-continued (ft-dp) and the others roll back: Daly's expected_wall_s at the rollback
    rate, grown by the pauses (planned interruptions, absorbed failures; closed_forms.with_pauses_s)."""
    rollback_rate = sum(r for k, r in rates.items() if k not in absorbed)
    mtbf = 1.0 / rollback_rate if rollback_rate > 0 else math.inf
    servers = cf.servers_for(gpus, inputs.failures.gpus_per_server)
    server_rate = servers * inputs.failures.server_failures_per_day / SECONDS_PER_DAY
    restart = cf.restart_time_s(gpus, inputs.restart, ckpt.load_s, server_rate)
    in_flight = ckpt.persist_s - ckpt.stall_s if ckpt.mode == "async" else 0.0
    rollback = restart + in_flight
    tau = checkpoint_interval_s(
        inputs, ckpt.stall_s, ckpt.persist_s, mtbf, step_s, useful_s, rollback, ckpt.mode
    )
    daly = cf.expected_wall_s(useful_s, tau, ckpt.stall_s, rollback, mtbf)
    planned = cf.planned_restart_s(gpus, inputs.restart, ckpt.load_s)
    pauses = [(inputs.failures.planned_per_day / SECONDS_PER_DAY, planned, False)]
    radius, pause_s = recovery.radius, inputs.restart.detect_s + inputs.restart.reconfigure_s
    for kind in absorbed:
        cost = absorbed_cost_s(radius.units_hit(kind), radius.units, pause_s, recovery.rejoin_s)
        pauses.append((rates[kind], cost, True))
    growth = [r * cf.expected_segment_s(c, rollback, mtbf) for r, c, _ in pauses]
    wall = cf.with_pauses_s(daly, sum(growth))
    return {
        "wall": wall,
        "daly": daly,
        "tau": tau,
        "mtbf": mtbf,
        "restart": restart,
        "rollback": rollback,
        "in_flight": in_flight,
        "pauses": tuple(pauses),
        "planned_s": wall * growth[0],
        "absorbed_s": wall * sum(growth[1:]),
    }


def time_to_train(
    useful_s: float,
    step_s: float,
    gpus: int,
    ckpt: CheckpointCost,
    inputs: GoodputInputs,
    draws: Draws = DEFAULT_DRAWS,
    recovery: Recovery = NO_RECOVERY,
) -> TimeToTrain:
    """Daly's expected wall time of ``useful_s`` seconds of training on ``gpus`` GPUs
    (closed_forms.expected_wall_s) with the pauses of planned interruptions and of the failures ft-dp
    absorbs (the kinds for which that is fastest), plus the job's start-up; the badput by cause, and
    P10/P50/P90 from the seeded Monte Carlo. An asynchronous save's write still in flight at a
    failure is lost too: its persist time beyond the stall is added to the restart (an upper bound)."""
    rates = cf.failure_rates_per_s(gpus, inputs.failures, recovery.gpus_per_domain)
    runs = [
        (_expected(useful_s, step_s, gpus, ckpt, inputs, rates, recovery, a), a)
        for a in _absorbed_options(rates, inputs, recovery)
    ]
    run, absorbed = min(runs, key=lambda item: item[0]["wall"])  # ties: the fewest kinds (first)
    wall, tau, mtbf, rollback = run["wall"], run["tau"], run["mtbf"], run["rollback"]
    save = useful_s / tau * ckpt.stall_s
    rolled = cf.expected_rollbacks(useful_s, tau, ckpt.stall_s, mtbf)
    restarting = rolled * (cf.expected_segment_s(rollback, 0.0, mtbf) - run["in_flight"])
    badput = {
        "startup_s": inputs.restart.startup_s,
        "checkpoint_save_s": save,
        "restart_s": restarting,
        "lost_progress_s": run["daly"] - useful_s - save - restarting,
        "planned_s": run["planned_s"],
        "degraded_s": run["absorbed_s"],
    }
    mc = sample_wall_time(useful_s, tau, ckpt.stall_s, rollback, mtbf, draws, pauses=run["pauses"])
    startup = inputs.restart.startup_s
    total_rate = sum(rates.values())
    return TimeToTrain(
        useful_s=useful_s,
        wall_s=wall + startup,
        mtbf_s=1.0 / total_rate if total_rate > 0 else math.inf,
        interval_s=tau,
        interval_steps=round(tau / step_s),
        restart_s=run["restart"],
        expected_failures=wall * total_rate,
        badput_s=badput,
        p10_s=mc.percentile_s(10) + startup,
        p50_s=mc.percentile_s(50) + startup,
        p90_s=mc.percentile_s(90) + startup,
        planned_interruptions=wall * inputs.failures.planned_per_day / SECONDS_PER_DAY,
        policy=inputs.restart.policy,
        absorbed=absorbed,
    )
