"""The one ranking of search results, shared by the fast and the exhaustive search.

Order (``rank_key``): the objective, lower first; among equal objectives the plan with fewer offloads
(``offloads``: a plan that needs no host memory before one that does; an offload plan fits where a
simpler one does not, but at equal time it only adds PCIe traffic and a knob fewer frameworks run),
then the simpler plan (fewer knobs away from PlanSpec's defaults, ``non_default_knobs``), then the
lower peak memory per GPU; then the canonical order of the space (row, grid index), so the order is
total and both search paths give the same answer.

Equal means equal to ``TIE_DIGITS`` significant digits (``tie_value``): the fast path evaluates on
numpy arrays and the exhaustive path one plan at a time, so the same number may differ in its last
bits between them.

Groups (``top_groups``): candidates with the same objective, step time and peak memory differ only
in knobs that change neither time nor memory; they form one group, shown as one row whose first
member (by ``rank_key``) stands for the others. A top K is K groups, i.e. K different choices; the
searches keep every candidate up to the K-th group's objective (``kth_group_objective``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from paraplan.specs.plan import PLAN_COLUMNS, PlanSpec

TIE_DIGITS = 10
TIE_RTOL = 10.0 ** (
    1 - TIE_DIGITS
)  # relative slack that keeps every tie of the K-th objective in the pool


def tie_value(x):
    """``x`` rounded to TIE_DIGITS significant digits (floats or numpy arrays): the value ties compare."""
    values = np.asarray(x, dtype=float)
    magnitude = np.abs(values)
    exponent = np.floor(np.log10(np.where(magnitude > 0, magnitude, 1.0)))
    scale = 10.0 ** (exponent - (TIE_DIGITS - 1))
    out = np.round(values / scale) * scale
    return float(out) if out.ndim == 0 else out


def within(objective, threshold):
    """True (elementwise) where ``objective`` may still tie or beat ``threshold``: objective <=
    threshold + |threshold|·TIE_RTOL (the slack keeps ties that differ in the last bits)."""
    return np.asarray(objective) <= threshold + abs(threshold) * TIE_RTOL


def non_default_knobs(plan: PlanSpec) -> int:
    """How many plan fields differ from PlanSpec's defaults (dp, which follows from the others, and
    the schedule when it is the one the vpp implies are not counted): the simplicity tie-break."""
    count = 0
    for name in PLAN_COLUMNS:
        if name == "dp":
            continue
        value = getattr(plan, name)
        if name == "schedule":
            count += plan.pipeline_schedule != ("interleaved" if plan.vpp > 1 else "1f1b")
            continue
        count += value != PlanSpec.model_fields[name].default
    return count


@dataclass(frozen=True)
class Candidate:
    """A feasible candidate as the searches see it."""

    objective: float
    step_time_s: float
    peak_bytes: float
    plan: PlanSpec
    key: tuple[int, int]  # (row, grid index) in canonical order
    payload: Any = None  # whatever the search needs back (row, grid option)


def offloads(plan: PlanSpec) -> int:
    """How many of the weight, activation and optimizer offloads the plan turns on."""
    return int(plan.offload_weights) + int(plan.offload_activations) + int(plan.offload_optimizer)


def rank_key(c: Candidate) -> tuple:
    """(objective, offloads, non-default knobs, peak memory, canonical key), ties compared by
    ``tie_value``: at equal time the plan a user can act on first (issue 34)."""
    return (
        tie_value(c.objective),
        offloads(c.plan),
        non_default_knobs(c.plan),
        tie_value(c.peak_bytes),
        c.key,
    )


def group_key(
    objective: float, step_time_s: float, peak_bytes: float
) -> tuple[float, float, float]:
    """Candidates with equal (objective, step time, peak memory) are one choice."""
    return (tie_value(objective), tie_value(step_time_s), tie_value(peak_bytes))


def kth_group_objective(objectives, step_times, peaks, k: int) -> float:
    """The objective of the K-th best group among these candidates (inf when there are fewer than K
    groups): a top K of groups needs every candidate up to it.

    Only the candidates up to the m-th smallest objective are grouped (m = 4K, growing until they
    hold K groups): any other candidate has a larger objective, so cannot come before the K-th group."""
    objectives = np.asarray(objectives, dtype=float)
    n = len(objectives)
    if n == 0:
        return float("inf")
    step_times, peaks = np.asarray(step_times, dtype=float), np.asarray(peaks, dtype=float)
    m = min(n, 4 * k)
    while True:
        chosen = objectives <= np.partition(objectives, m - 1)[m - 1] if m < n else slice(None)
        triples = np.stack(
            [
                tie_value(objectives[chosen]),
                tie_value(step_times[chosen]),
                tie_value(peaks[chosen]),
            ],
            axis=1,
        )
        distinct = unique_rows(triples)  # sorted by objective first
        if len(distinct) >= k:
            return float(distinct[k - 1, 0])
        if m >= n:
            return float("inf")
        m = min(n, 4 * m)


def unique_rows(rows) -> np.ndarray:
    """The distinct rows of a 2-D array, sorted lexicographically (first column first): np.unique(rows, axis=0)
    without the masked-array module np.unique imports on its first call (~20 ms in every search process)."""
    rows = np.atleast_2d(np.asarray(rows, dtype=float))
    if len(rows) < 2:
        return rows
    rows = rows[np.lexsort(rows.T[::-1])]
    keep = np.ones(len(rows), dtype=bool)
    keep[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    return rows[keep]


def top_groups(candidates: list[Candidate], k: int) -> list[list[Candidate]]:
    """The K best groups, best first; each group's members in ``rank_key`` order (the first one
    represents the group)."""
    groups: dict[tuple, list[Candidate]] = {}
    for c in sorted(candidates, key=rank_key):
        groups.setdefault(group_key(c.objective, c.step_time_s, c.peak_bytes), []).append(c)
    return list(groups.values())[:k]
