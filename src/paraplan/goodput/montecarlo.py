"""A seeded Monte Carlo over failure arrivals: the distribution of wall time behind
``closed_forms.expected_wall_s`` (the same renewal model, sampled instead of averaged).

The work is cut into segments of tau seconds of training plus delta of save; a failure inside a segment
loses the segment so far and costs a restart of R seconds, which restarts again when a failure hits it.
Per segment the failed tries are geometric with success probability e^(-s/M), so the failed tries of n
equal segments are negative binomial (n, e^(-s/M)); each failed try lasts an exponential time truncated
to the segment, drawn by inverting its CDF: x = -M ln(1 - u (1 - e^(-s/M)))."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from paraplan.goodput import closed_forms as cf

DEFAULT_SAMPLES = 2000
DEFAULT_SEED = 36
MAX_PAUSE_GENERATIONS = 64  # pauses arriving during pauses, and so on (x^64: nothing left)


class Draws(NamedTuple):
    """How the Monte Carlo draws: ``samples`` runs from numpy's PCG64 seeded with ``seed``; one value
    passed from time_to_train down to sample_wall_time."""

    samples: int = DEFAULT_SAMPLES
    seed: int = DEFAULT_SEED


DEFAULT_DRAWS = Draws()
EXACT_DRAWS = 2_000_000  # truncated-exponential draws sampled one by one, in all samples


@dataclass(frozen=True)
class WallTimeSamples:
    wall_s: np.ndarray  # one expected-training wall time per sample
    failures: np.ndarray  # interruptions per sample
    planned: np.ndarray | None = None  # planned interruptions per sample

    def percentile_s(self, q: float) -> float:
        if np.isfinite(self.wall_s).all():
            return float(np.percentile(self.wall_s, q))
        ordered = np.sort(self.wall_s)  # runs that never finish: the nearest rank, no interpolation
        return float(ordered[round(q / 100 * (len(ordered) - 1))])


def truncated_exponential_moments(limit_s: float, mtbf_s: float) -> tuple[float, float]:
    """Mean and variance of an exponential of mean M truncated to [0, L]: with q = 1 / (e^(L/M) - 1),
    E[X] = M - L q and E[X^2] = 2 M^2 - (L^2 + 2 L M) q."""
    q = 1.0 / math.expm1(limit_s / mtbf_s)
    mean = mtbf_s - limit_s * q
    second = 2.0 * mtbf_s**2 - (limit_s**2 + 2.0 * limit_s * mtbf_s) * q
    return mean, max(0.0, second - mean**2)


def _truncated_exponential_sum(
    rng: np.random.Generator, counts: np.ndarray, limit_s: float, mtbf_s: float
) -> np.ndarray:
    """Per sample, the sum of counts[i] draws of an exponential of mean M truncated to [0, limit_s];
    beyond EXACT_DRAWS draws in all, the sums' normal limit (central limit theorem) with the moments of
    truncated_exponential_moments."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(len(counts))
    if total > EXACT_DRAWS:
        mean, var = truncated_exponential_moments(limit_s, mtbf_s)
        normal = rng.standard_normal(len(counts))
        return np.maximum(0.0, counts * mean + np.sqrt(counts * var) * normal)
    u = rng.random(total)
    draws = -mtbf_s * np.log1p(-u * -math.expm1(-limit_s / mtbf_s))
    owner = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(owner, weights=draws, minlength=len(counts))


def _segments_time(
    rng, segments: float, segment_s: float, restart_s: float, mtbf_s: float, samples: int
) -> tuple[np.ndarray, np.ndarray]:
    """(wall seconds, failures) per sample of ``segments`` segments of ``segment_s`` each."""
    if segments <= 0 or segment_s <= 0:
        return np.zeros(samples), np.zeros(samples, dtype=int)
    whole = int(segments)
    wall = np.full(samples, segments * segment_s)
    failed = np.zeros(samples, dtype=np.int64)
    parts = [(whole, segment_s)] if whole else []
    if segments > whole:  # the last, shorter segment
        parts.append((1, (segments - whole) * segment_s))
    for count, length in parts:
        tries = rng.negative_binomial(count, math.exp(-length / mtbf_s), samples)
        wall += _truncated_exponential_sum(rng, tries, length, mtbf_s)
        failed += tries
    if restart_s > 0:  # every failure is followed by a restart, which may fail in turn
        extra, more = _restarts(rng, failed, restart_s, mtbf_s)
        wall += extra
        failed = failed + more
    return wall, failed


def _restarts(rng, failed: np.ndarray, restart_s: float, mtbf_s: float):
    """(wall seconds, failures) of the restarts that follow ``failed`` failures per sample: each
    lasts ``restart_s`` and restarts itself on a failure (negative binomial tries, truncated draws)."""
    restart_fails = rng.negative_binomial(np.maximum(failed, 1), math.exp(-restart_s / mtbf_s)) * (
        failed > 0
    )
    wall = failed * restart_s + _truncated_exponential_sum(rng, restart_fails, restart_s, mtbf_s)
    return wall, restart_fails


def _pause_segments(rng, counts: np.ndarray, length_s: float, restart_s: float, mtbf_s: float):
    """(wall seconds, rollback failures) per sample of counts[i] pauses of ``length_s``, each
    restarting from its start on a failure, as a segment of training does."""
    wall = counts * length_s
    if math.isinf(mtbf_s) or length_s <= 0:
        return wall.astype(float), np.zeros(len(counts), dtype=np.int64)
    tries = rng.negative_binomial(np.maximum(counts, 1), math.exp(-length_s / mtbf_s)) * (
        counts > 0
    )
    wall = wall + _truncated_exponential_sum(rng, tries, length_s, mtbf_s)
    if restart_s > 0:
        extra, more = _restarts(rng, tries, restart_s, mtbf_s)
        return wall + extra, tries + more
    return wall, tries


def _pauses_time(rng, exposure: np.ndarray, pauses, restart_s: float, mtbf_s: float):
    """(wall seconds, failures, planned interruptions) per sample of the pauses (rate per second,
    length, whether a failure) that arrive as Poisson processes over ``exposure`` seconds and over
    their own time in turn (generation after generation, MAX_PAUSE_GENERATIONS at most; the mean is
    closed_forms.with_pauses_s's W x / (1 - x))."""
    samples = len(exposure)
    total = np.zeros(samples)
    failures = np.zeros(samples, dtype=np.int64)
    planned = np.zeros(samples, dtype=np.int64)
    for _ in range(MAX_PAUSE_GENERATIONS):
        if not exposure.any():
            break
        new = np.zeros(samples)
        for rate_per_s, length_s, is_failure in pauses:
            counts = rng.poisson(rate_per_s * exposure)
            wall, failed = _pause_segments(rng, counts, length_s, restart_s, mtbf_s)
            new += wall
            failures += failed + (counts if is_failure else 0)
            planned += 0 if is_failure else counts
        total += new
        exposure = new
    return total, failures, planned


def sample_wall_time(
    useful_s: float,
    interval_s: float,
    save_s: float,
    restart_s: float,
    mtbf_s: float,
    draws: Draws = DEFAULT_DRAWS,
    pauses: tuple[tuple[float, float, bool], ...] = (),
) -> WallTimeSamples:
    """``draws.samples`` wall times (and interruption counts) of T_s = ``useful_s`` seconds of training,
    checkpointed every ``interval_s`` with a stall of ``save_s``, restarts of ``restart_s``, failures of
    mean interval ``mtbf_s`` (inf: none), and ``pauses`` (rate per second, length, whether a failure:
    planned interruptions, failures ft-dp absorbs) over the whole wall time; numpy's PCG64 seeded with
    ``draws.seed`` (reproducible)."""
    samples = draws.samples
    rng = np.random.default_rng(draws.seed)
    never = np.full(samples, math.inf)
    longest = max([interval_s + save_s, restart_s, *(length for _, length, _ in pauses)])
    growth = cf.pause_growth([(rate, length) for rate, length, _ in pauses], restart_s, mtbf_s)
    if longest / mtbf_s > 25 or growth >= 1:  # e^25 tries a segment, or pauses without end
        return WallTimeSamples(never, np.zeros(samples, dtype=int), np.zeros(samples, dtype=int))
    if math.isinf(mtbf_s):
        segments = useful_s / interval_s
        wall = np.full(samples, useful_s + segments * save_s)
        failed = np.zeros(samples, dtype=np.int64)
    else:
        wall, failed = _segments_time(
            rng, useful_s / interval_s, interval_s + save_s, restart_s, mtbf_s, samples
        )
    planned = np.zeros(samples, dtype=np.int64)
    if pauses:
        extra, more, planned = _pauses_time(rng, wall, pauses, restart_s, mtbf_s)
        wall, failed = wall + extra, failed + more
    return WallTimeSamples(wall, failed, planned)
