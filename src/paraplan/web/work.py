"""What a worker process runs for the page: a search (its ranked plans, the explanation and the
scatter's points), a cluster-of-pools search and a sweep, all through ``paraplan.api`` only.

The scatter: without ``all=1`` it draws the feasible plans the exact search evaluated (its
``evaluated_sink``: the pruned search's candidates, the ranked ones among them); with ``all=1`` every
feasible plan of the space is evaluated (``paraplan search --csv-all``'s scan). Both are drawn by
this stated rule (:class:`Aggregate`), so millions of plans stay far fewer points (the README
search's 32 million feasible plans: 291,594 points, benchmarks/web_speed.py): one point per
cell of (tp×pp, step time in 1 % steps, peak memory in 0.5 GiB steps), the plan with the best
objective in the cell, with the number of plans it stands for; the best-ranked plan of a cell is
its point (no plan in the cell has a better objective), marked with its rank. With the robust and the
time-to-train objectives (which rank the ranked plans only: by their error bands, by goodput) the
scatter draws the ranked plans.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from paraplan import api
from paraplan.web.params import Problem

TIME_STEP = math.log(1.01)  # a cell is 1 % of step time wide
MEMORY_STEP_GIB = 0.5  # and 0.5 GiB of peak memory tall
METRICS = ("step_time_s", "tokens_per_s", "objective", "peak_memory_gib")


class Aggregate:
    """A feasible-plan sink (api.search's ``feasible_sink``) that keeps one plan per scatter cell
    (module doc) and counts every plan it sees. A cell holds [objective, chunk, row, plans]: its
    best plan is row ``row`` of the rows kept from chunk ``chunk`` (each call keeps only the best
    row of each of its cells, by numpy indexing); plans become dicts only in :meth:`points`, for the
    cells' winners (building a dict per improving row cost the README search 0.45 s)."""

    def __init__(self) -> None:
        self.cells: dict[tuple, list] = {}
        self.chunks: list[dict] = []
        self.kept = 0  # rows held in self.chunks
        self.plans = 0

    COMPACT_ABOVE = 100_000  # rows kept beyond 4 per cell before _compact

    def __call__(self, columns: dict) -> None:
        step, memory = columns["step_time_s"], columns["peak_memory_gib"]
        objective = columns["objective"]
        colour = columns["tp"] * columns["pp"]
        keys = np.stack(
            [colour, np.floor(np.log(step) / TIME_STEP), np.floor(memory / MEMORY_STEP_GIB)]
        ).astype(np.int64)
        self.plans += len(step)
        order = np.lexsort((objective, keys[2], keys[1], keys[0]))  # best objective first per cell
        sorted_keys = keys[:, order]
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = np.any(sorted_keys[:, 1:] != sorted_keys[:, :-1], axis=0)
        counts = np.diff(np.append(np.flatnonzero(starts), len(order)))  # plans per cell, one sort
        best = order[starts]
        chunk = len(self.chunks)
        self.chunks.append({k: np.asarray(v)[best] for k, v in columns.items()})
        self.kept += len(best)
        cells = self.cells
        values = np.asarray(objective)[best].tolist()
        for row, (key, n, value) in enumerate(
            zip(map(tuple, keys[:, best].T.tolist()), counts.tolist(), values)
        ):
            held = cells.get(key)
            if held is None:
                cells[key] = [value, chunk, row, n]
            elif value < held[0]:
                held[0], held[1], held[2], held[3] = value, chunk, row, held[3] + n
            else:
                held[3] += n
        if self.kept > 4 * len(cells) + self.COMPACT_ABOVE:
            self._compact()

    def _compact(self) -> None:
        """Keep only the cells' winning rows (one chunk), so a scan of millions of plans holds
        about one row per cell."""
        refs = list(self.cells.values())
        by_chunk: dict[int, list] = {}
        for ref in refs:
            by_chunk.setdefault(ref[1], []).append(ref)
        parts, row = [], 0
        for chunk, held in by_chunk.items():
            rows = np.array([ref[2] for ref in held], dtype=np.int64)
            parts.append({k: v[rows] for k, v in self.chunks[chunk].items()})
            for ref in held:
                ref[1], ref[2], row = 0, row, row + 1
        self.chunks = (
            [{k: np.concatenate([p[k] for p in parts]) for k in parts[0]}] if parts else []
        )
        self.kept = row

    def _winners(self) -> dict[tuple, dict]:
        """Every cell's winning plan as a scatter point with the number of plans in the cell: the
        winning rows compacted into one chunk (:meth:`_compact`), turned into Python values at once."""
        self._compact()
        if not self.chunks:
            return {}
        columns = {k: v.tolist() for k, v in self.chunks[0].items()}
        names = [k for k in columns if k not in METRICS]
        held = [None] * self.kept
        for key, ref in self.cells.items():
            held[ref[2]] = (key, ref[3])
        out = {}
        for i, (key, plans) in enumerate(held):
            plan = {k: columns[k][i] for k in names}
            step, memory = columns["step_time_s"][i], columns["peak_memory_gib"][i]
            out[key] = _point(plan, float(step), float(memory), float(columns["objective"][i]))
            out[key]["plans"] = plans
        return out

    def points(self, ranked: list[dict] = ()) -> list[dict]:
        """The cells' points by objective; the best-ranked plan of a cell (``ranked``: a search
        document's ``plans``, in rank order) is its point, with its ``rank``."""
        cells = self._winners()
        for item in ranked:
            point = _ranked_point(item)
            key = _cell(point["plan"], point["step_time_s"], point["peak_memory_gib"])
            held = cells.get(key)
            if held is not None and "rank" in held:  # a better ranked plan holds the cell
                continue
            point["plans"] = held["plans"] if held else 1
            cells[key] = point
        return sorted(cells.values(), key=lambda p: (p["objective"], p.get("rank", math.inf)))


def _cell(plan: dict, step: float, memory: float) -> tuple[int, int, int]:
    """The scatter cell of a plan (module doc): (tp×pp, 1 % of step time, 0.5 GiB of peak memory)."""
    return (
        int(plan["tp"] * plan["pp"]),
        int(np.floor(np.log(step) / TIME_STEP)),
        int(np.floor(memory / MEMORY_STEP_GIB)),
    )


def _ranked_point(item: dict) -> dict:
    """A search document's ranked plan as a scatter point."""
    point = _point(item["plan"], item["step_time_s"], item["peak_memory_gib"], item["objective"])
    point["rank"] = item["rank"]
    return point


def _point(plan: dict, step: float, memory: float, objective: float) -> dict:
    return {
        "step_time_s": step,
        "peak_memory_gib": memory,
        "objective": objective,
        "tp_pp": f"tp{plan.get('tp')}×pp{plan.get('pp')}",
        "plan": plan,
        "plans": 1,
    }


def shared_fields(points: list[dict]) -> dict:
    """The plan fields every point shares, taken out of each point's ``plan`` (in place): a point's
    plan is ``{**scatter_base, **point["plan"]}``. The README search's 5,645 points carried 5.3 MB of
    mostly equal fields (benchmarks/web_speed.py); the page merges them back when a point is opened."""
    if not points:
        return {}
    first = points[0]["plan"]
    base = {k: v for k, v in first.items() if all(k in p["plan"] for p in points)}
    for point in points[1:]:
        plan = point["plan"]
        base = {k: v for k, v in base.items() if plan[k] == v}
    for point in points:
        point["plan"] = {k: v for k, v in point["plan"].items() if k not in base}
    return base


def warm_up() -> None:
    """Load what every search reads (the catalog, the cost tables, the validation residuals of the
    error bands) with a small search, so a worker's first job does not pay for it."""
    found = api.search("gpt3-13b", "dgx-a100-80gb", 8, global_batch=64, tp=(1, 8), pp=(1,), top=1)
    found.to_dict()
    api.explain(found)


def run_search(problem: Problem, progress: Callable) -> dict:
    """The search's ``--json`` document (api.SearchResults.to_dict) with ``explain`` (why the best
    wins) and ``scatter`` (the points of the Pareto view, module doc); a cluster of pools: the
    AMP-style search's ``--json`` document (api.search_cluster), ``kind`` "cluster"."""
    if problem.cluster is not None:
        return run_cluster(problem, progress)
    ranked_only = problem.kwargs.get("objective") not in api.PLAN_OBJECTIVES
    sink = None if ranked_only and not problem.all_plans else Aggregate()
    found = api.search(
        problem.model,
        problem.system,
        problem.gpus,
        progress=progress,
        feasible_sink=sink if problem.all_plans else None,
        evaluated_sink=None if problem.all_plans else sink,
        **problem.kwargs,
    )
    doc = found.to_dict(tokens=problem.tokens)
    progress(1, 1, "explaining")
    doc["explain"] = api.explain(found)
    if sink is not None:
        points = sink.points(doc["plans"])
        rule = "aggregated" if problem.all_plans else "evaluated"
        doc["scatter_plans"] = sink.plans
    else:
        points, rule = [_ranked_point(item) for item in doc["plans"]], "ranked"
    doc["scatter_base"] = shared_fields(points)
    doc["scatter"], doc["scatter_rule"] = points, rule
    doc["kind"] = "search"
    return doc


def run_cluster(problem: Problem, progress: Callable) -> dict:
    """``paraplan search --cluster --json`` for the pasted cluster of pools (api.search_cluster)."""
    progress(0, None, "cluster search")
    kwargs = dict(problem.kwargs)
    batch = kwargs.pop("global_batch")
    doc = api.search_cluster(problem.model, problem.cluster, batch, **kwargs)
    doc["kind"] = "cluster"
    return doc


def run_sweep(definition: dict | str, progress: Callable) -> dict:
    """The sweep.json document of a sweep definition (api.sweep, catalog names only), progress
    after each point."""
    return api.sweep(definition, progress, catalog_only=True)
