"""The interpolation rule of measured kernel tables (cost.kernel_tables): a rate over log2 shape coordinates.

A Scatter holds measured points as log2 coordinates and the log2 ratio of each point's achieved rate (work /
measured time) to a prior, a relative rate the analytical form gives the shape (None: 1, the rate itself
interpolated). At a query point the ratio is interpolated and multiplied by the prior there:

- one coordinate: linear interpolation of the log2 ratio over the log2 coordinate;
- several: inverse-distance weighting of the log2 ratio over the ``IDW_NEIGHBOURS`` nearest measured points
  in log2 coordinates, weight 1/d²; a measured point returns its own ratio (rows of one shape, e.g. under
  other transposes, one point at the geometric mean of their rates), so a measured shape returns its rate.

Outside the measured box each coordinate of the ratio's lookup is clamped to the nearest measured edge: the
ratio is held there while the prior follows the shape (no raw time is extrapolated), and the time scales with
the work (time = work / rate). A predicted log2 rate is a weighted mean of measured log2 rates with weights
fixed by shape, so a slower measured kernel never makes any prediction faster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

IDW_NEIGHBOURS = 4


@dataclass(frozen=True)
class Scatter:
    """Measured points: log2 shape coordinates (N×D), log2 rates over the prior (N), the fastest time, and
    the prior: a relative rate of the shape (linear units; None: 1 everywhere, a rate interpolated as is)."""

    coords: np.ndarray
    log_rate: np.ndarray
    floor_s: float
    prior: Callable[[tuple[float, ...]], float] | None = None

    def rate(self, point: tuple[float, ...]) -> float:
        """Rate at ``point`` (linear units): prior(point) × 2^r, r the log2 ratio measured / prior
        interpolated at the point clamped into the measured box (D = 1: linear over log2 shape;
        D > 1: inverse-distance weights over the nearest points); outside the box the ratio is held
        at the nearest edge while the prior follows the shape."""
        q = np.log2(np.asarray(point, float))
        q = np.clip(q, self.coords.min(axis=0), self.coords.max(axis=0))
        scale = 1.0 if self.prior is None else self.prior(tuple(point))
        if self.coords.shape[1] == 1:
            order = np.argsort(self.coords[:, 0], kind="stable")
            x, y = self.coords[order, 0], self.log_rate[order]
            return scale * float(2.0 ** np.interp(q[0], x, y))
        dist = np.sqrt(((self.coords - q) ** 2).sum(axis=1))
        nearest = np.argsort(dist, kind="stable")[:IDW_NEIGHBOURS]
        if dist[nearest[0]] < 1e-9:
            return scale * float(2.0 ** self.log_rate[nearest[0]])
        w = 1.0 / dist[nearest] ** 2
        return scale * float(2.0 ** (np.sum(w * self.log_rate[nearest]) / np.sum(w)))

    def time_s(self, work: float, point: tuple[float, ...]) -> float:
        """max(work / rate(point), floor_s)."""
        return max(work / self.rate(point), self.floor_s)


def scatter(
    points: list[tuple[float, ...]],
    works: list[float],
    times: list[float],
    prior: Callable[[tuple[float, ...]], float] | None = None,
) -> Scatter:
    """Measured points as a Scatter of log2(rate / prior(point)) (``prior`` None: of log2 rate); rows
    measured at the same shape (a benchmark timing one shape under several transposes, DeepBench) are
    one point at the geometric mean of their rates."""
    coords = np.log2(np.asarray(points, float)).reshape(len(points), -1)
    log_rates = np.log2(np.asarray(works, float) / np.asarray(times, float))
    if prior is not None:
        log_rates = log_rates - np.log2([prior(tuple(p)) for p in points])
    unique, index = np.unique(coords, axis=0, return_inverse=True)
    if len(unique) < len(coords):
        index = index.reshape(-1)
        log_rates = np.bincount(index, log_rates) / np.bincount(index)
        coords = unique
    return Scatter(coords, log_rates, float(min(times)), prior)


def leave_one_out(points, works, times, floor_s: float | None = None, prior=None) -> list[float]:
    """Each row's time predicted by the interpolant of the other rows (this module's rule, over
    ``prior`` where given: Scatter): how well a table predicts a shape it was not measured at.
    ``floor_s`` replaces the other rows' smallest time as the floor where given (attention: 0;
    copies: every row's smallest time)."""
    out = []
    for i in range(len(points)):
        keep = [j for j in range(len(points)) if j != i]
        s = scatter(
            [points[j] for j in keep], [works[j] for j in keep], [times[j] for j in keep], prior
        )
        out.append(max(works[i] / s.rate(points[i]), s.floor_s if floor_s is None else floor_s))
    return out
