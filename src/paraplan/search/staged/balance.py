"""AMP-style layer split: the contiguous split of a block list over pipeline stages that minimises the
pipeline's step time, found exactly by dynamic programming.

Written against an abstract per-stage cost (``times[i, a, b]``: seconds of one micro-batch's forward +
backward on stage i holding blocks [a, b); ``inf`` where the stage would not fit or is not allowed),
so the same code serves uniform and heterogeneous clusters: stage i's cost already knows its GPUs.

Objective (1F1B or GPipe with unequal stages, step.schedules.bubble_from_work_s): the slowest stage sets the
steady state and fill and drain pass once through every other stage,

    T(split) = Σ_i t_i + (m − 1) · max_i t_i  (+ max_i u_i, an optional per-stage tail such as the
                                                data-parallel gradient sync and optimizer step),

m micro-batches. AMP (Li et al. 2022, arXiv:2210.07297, §3.3) balances stages with the same kind of
dynamic program; here the max terms are handled exactly (the tail bound is scanned downwards the
same way, see ``balance_split``): for a bound τ on max_i t_i the DP
min Σ_i t_i over splits whose stages all satisfy t_i ≤ τ is a shortest path over (stage, boundary);
the optimum is min over candidate τ (the finite values of ``times``) of (m − 1)·τ + Σ_min(τ), and the
scan over τ in increasing order stops once (m − 1)·τ + Σ_min(∞) cannot beat the best found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Split:
    """Stage boundaries (stage i holds blocks [bounds[i], bounds[i+1])), stage times and the objective."""

    bounds: tuple[int, ...]
    stage_times: tuple[float, ...]
    objective: float


def pipeline_objective(stage_times, microbatches: int, tails=None) -> float:
    """Σ t_i + (m − 1)·max t_i (+ max u_i): 1F1B/GPipe step with unequal stages (module docstring)."""
    t = np.asarray(stage_times, dtype=float)
    extra = float(np.max(tails)) if tails is not None and len(tails) else 0.0
    return float(t.sum() + (microbatches - 1) * t.max() + extra)


def _min_sum(times: np.ndarray, allowed: np.ndarray) -> tuple[float, list[int] | None]:
    """min Σ_i times[i, b_i, b_{i+1}] over boundaries 0 = b_0 ≤ ... ≤ b_S = n with ``allowed`` entries."""
    stages, n1, _ = times.shape
    cost = np.where(allowed, times, np.inf)
    best = np.full(n1, np.inf)
    best[0] = 0.0
    arg = np.zeros((stages, n1), dtype=np.int64)
    for i in range(stages):
        total = best[:, None] + cost[i]  # [a, b]
        arg[i] = np.argmin(total, axis=0)
        best = total[arg[i], np.arange(n1)]
    if not np.isfinite(best[-1]):
        return np.inf, None
    bounds = [n1 - 1]
    for i in range(stages - 1, -1, -1):
        bounds.append(int(arg[i, bounds[-1]]))
    return float(best[-1]), bounds[::-1]


def _best_under(
    times: np.ndarray, allowed: np.ndarray, microbatches: int
) -> tuple[float, list[int] | None]:
    """Exact min over splits (restricted to ``allowed`` entries) of Σ t + (m − 1)·max t."""
    finite = np.isfinite(times) & allowed
    if not finite.any():
        return np.inf, None
    unconstrained, bounds = _min_sum(times, finite)
    if bounds is None:
        return np.inf, None
    if microbatches <= 1:
        return unconstrained, bounds
    taus = np.unique(times[finite])
    # smallest feasible bound by bisection (feasibility is monotone in τ)
    lo, hi = 0, len(taus) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _min_sum(times, finite & (times <= taus[mid]))[1] is not None:
            hi = mid
        else:
            lo = mid + 1
    # the unconstrained optimum of Σ t is a split too: any split whose max exceeds its max is worse
    stage_t0 = [times[i, bounds[i], bounds[i + 1]] for i in range(len(bounds) - 1)]
    best, best_bounds = unconstrained + (microbatches - 1) * max(stage_t0), bounds
    for tau in taus[lo:]:
        if (microbatches - 1) * tau + unconstrained >= best:
            break
        total, b = _min_sum(times, finite & (times <= tau))
        if b is None:
            continue
        stage_t = [times[i, b[i], b[i + 1]] for i in range(len(b) - 1)]
        value = total + (microbatches - 1) * max(stage_t)
        if value < best:
            best, best_bounds = value, b
    return best, best_bounds


def balance_split(times, microbatches: int, tails=None) -> Split | None:
    """The split minimising the objective (module docstring); None when no split has finite cost.

    ``times``: array [stages, n + 1, n + 1], entry [i, a, b] the cost of stage i holding blocks [a, b)
    (``inf`` for b < a, for stages that may not be empty, and where the stage does not fit).
    ``tails``: optional array of the same shape, a per-stage tail whose maximum adds to the step."""
    times = np.asarray(times, dtype=float)
    allowed = np.isfinite(times)
    if tails is None:
        value, bounds = _best_under(times, allowed, microbatches)
    else:
        tails = np.asarray(tails, dtype=float)
        allowed &= np.isfinite(tails)
        # Scan the tail bound downwards: with U the largest tail any split may use, G(U) = the best
        # Σ t + (m − 1)·max t over those splits only grows as U falls. The solution at U has some
        # largest tail u ≤ U; every split whose largest tail is ≥ u is no better than it (its G is no
        # smaller, its tail no smaller), so the next bound is anything below u. Stop when G alone
        # reaches the best value (tails are non-negative).
        value, bounds = np.inf, None
        mask = allowed
        while True:
            part, b = _best_under(times, mask, microbatches)
            if b is None or part >= value:
                break
            real_cap = max(tails[i, b[i], b[i + 1]] for i in range(len(b) - 1))
            if part + real_cap < value:
                value, bounds = part + real_cap, b
            mask = allowed & (tails < real_cap)
    if bounds is None:
        return None
    stage_t = tuple(float(times[i, bounds[i], bounds[i + 1]]) for i in range(len(bounds) - 1))
    return Split(tuple(bounds), stage_t, float(value))


def all_splits(n_blocks: int, stages: int, allow_empty: bool = False):
    """Every boundary tuple 0 = b_0 ≤ b_1 ≤ ... ≤ b_S = n (strictly increasing unless allow_empty)."""

    def rec(prefix: list[int], left: int):
        if left == 1:
            if allow_empty or prefix[-1] < n_blocks:
                yield (*prefix, n_blocks)
            return
        start = prefix[-1] + (0 if allow_empty else 1)
        stop = n_blocks - (0 if allow_empty else left - 1)
        for b in range(start, stop + 1):
            yield from rec([*prefix, b], left - 1)

    yield from rec([0], stages)


def brute_force_split(
    times, microbatches: int, tails=None, allow_empty: bool = True
) -> Split | None:
    """Exhaustive reference for ``balance_split`` (tests, small cases)."""
    times = np.asarray(times, dtype=float)
    stages, n1, _ = times.shape
    best = None
    for bounds in all_splits(n1 - 1, stages, allow_empty):
        t = [times[i, bounds[i], bounds[i + 1]] for i in range(stages)]
        if not np.all(np.isfinite(t)):
            continue
        u = None if tails is None else [tails[i, bounds[i], bounds[i + 1]] for i in range(stages)]
        if u is not None and not np.all(np.isfinite(u)):
            continue
        value = pipeline_objective(t, microbatches, u)
        if best is None or value < best.objective:
            best = Split(tuple(bounds), tuple(float(x) for x in t), value)
    return best
