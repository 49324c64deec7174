"""Lower bounds on any plan's time-to-train from its GPU count and the model's state alone, for the
exact re-ranking of ``search --objective time-to-train`` (search.time_to_train; docs/goodput.md).

Every plan of N GPUs saves S_total bytes in all and its busiest rank holds at least S_total / N, so
its save stall is at least delta_min (sync: max(S_total / B_write, S_total / (N B_host)); async:
S_total / (N B_host)) and its reload at least the same bound reading; a restart at least R_min =
closed_forms.restart_time_s with that reload."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from paraplan.goodput import closed_forms as cf
from paraplan.goodput.inputs import SECONDS_PER_DAY, GoodputInputs


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


@dataclass(frozen=True)
class Fleet:
    """What every plan of ``gpus`` GPUs shares: the model state it saves (``total_bytes`` in all),
    the host link each rank saves over, the goodput inputs, and the NVLink domain size (failures of a
    domain's switch tray, goodput.closed_forms.failure_rates_per_s)."""

    gpus: int
    total_bytes: float
    host_bandwidth: float
    inputs: GoodputInputs
    gpus_per_domain: int | None = None


def _least_terms(fleet: Fleet):
    """(delta_min, R_min, planned restart min): the module docstring's bounds."""
    gpus, inputs = fleet.gpus, fleet.inputs
    ck = inputs.checkpoint
    share = fleet.total_bytes / gpus / fleet.host_bandwidth
    stall = (
        max(fleet.total_bytes / ck.storage_write_bandwidth, share) if ck.mode == "sync" else share
    )
    load = max(fleet.total_bytes / ck.storage_read_bandwidth, share)
    servers = cf.servers_for(gpus, inputs.failures.gpus_per_server)
    server_rate = servers * inputs.failures.server_failures_per_day / SECONDS_PER_DAY
    restart = cf.restart_time_s(gpus, inputs.restart, load, server_rate)
    return stall, restart, cf.planned_restart_s(gpus, inputs.restart, load)


def _kind_sets(rates: dict, inputs: GoodputInputs) -> list[tuple[str, ...]]:
    """Every set of failure kinds a plan's ft-dp might absorb (rollback: the empty set only)."""
    if inputs.restart.policy != "ft-dp":
        return [()]
    kinds = [k for k in cf.FAILURE_KINDS if rates[k] > 0]
    return [c for n in range(len(kinds) + 1) for c in itertools.combinations(kinds, n)]


def wall_lower_bound_factor(fleet: Fleet) -> float:
    """c with T_wall >= c * T_s + t_startup for every plan of the fleet:
    the minimum over the kind sets ft-dp may absorb of [min over continuous tau of Daly's
    expected_wall_s per useful second at the rollback rate, delta_min and R_min] / (1 - x_min), x_min
    the pauses' growth (closed_forms.pause_growth) with the planned restart at its least and every
    absorbed failure at its least, the survivors' pause t_detect + t_reconfigure (the in-flight loss
    is at least 0, whole steps only restrict tau); 1 without failures or pauses."""
    inputs = fleet.inputs
    rates = cf.failure_rates_per_s(fleet.gpus, inputs.failures, fleet.gpus_per_domain)
    stall, restart, planned = _least_terms(fleet)
    pause = inputs.restart.detect_s + inputs.restart.reconfigure_s
    best = math.inf
    for absorbed in _kind_sets(rates, inputs):
        rate = sum(r for k, r in rates.items() if k not in absorbed)
        mtbf = 1.0 / rate if rate > 0 else math.inf
        pauses = [(inputs.failures.planned_per_day / SECONDS_PER_DAY, planned)]
        pauses += [(rates[k], pause) for k in absorbed]
        growth = cf.pause_growth(pauses, restart, mtbf)
        daly = (
            1.0
            if math.isinf(mtbf)
            else _min_over_interval(
                lambda tau, m=mtbf: cf.expected_wall_s(1.0, tau, stall, restart, m)
            )
        )
        best = min(best, cf.with_pauses_s(daly, growth))
    return best


P90_BOUND_LEVEL = 0.85  # below 0.9 by > 5 standard errors of a 2,000-sample P90's level (0.0067)


def p90_lower_bound_s(useful_s: float, fleet: Fleet) -> float:
    """A bound below the Monte Carlo's P90 wall time of any plan of the fleet with T_s >=
    ``useful_s``: the failures arriving in the first T_s seconds are Poisson(lambda T_s) and each costs
    at least c_min (R_min on rollback, the survivors' pause under ft-dp), so W >= T_s + t_startup +
    c_min * N, and the sample P90 is at least T_s + t_startup + c_min * q, q the Poisson quantile at
    P90_BOUND_LEVEL (the margin covers the sample quantile's spread)."""
    inputs = fleet.inputs
    rate = cf.job_failure_rate_per_s(fleet.gpus, inputs.failures, fleet.gpus_per_domain)
    _, restart, _ = _least_terms(fleet)
    least = restart
    if inputs.restart.policy == "ft-dp":
        least = min(restart, inputs.restart.detect_s + inputs.restart.reconfigure_s)
    count = cf.poisson_quantile(rate * useful_s, P90_BOUND_LEVEL)
    return useful_s + inputs.restart.startup_s + least * count
