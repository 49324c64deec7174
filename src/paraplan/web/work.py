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
    (module doc) and counts every plan it sees."""

    def __init__(self) -> None:
        self.cells: dict[tuple, dict] = {}
        self.plans = 0

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
        for i, n in zip(order[starts], counts):
            key = tuple(int(k) for k in keys[:, i])
            held = self.cells.get(key)
            if held is None or objective[i] < held["objective"]:
                plan = {k: _plain(v[i]) for k, v in columns.items() if k not in METRICS}
                point = _point(plan, float(step[i]), float(memory[i]), float(objective[i]))
                point["plans"] = int(n) + (held["plans"] if held else 0)
                self.cells[key] = point
            else:
                held["plans"] += int(n)

    def points(self, ranked: list[dict] = ()) -> list[dict]:
        """The cells' points by objective; the best-ranked plan of a cell (``ranked``: a search
        document's ``plans``, in rank order) is its point, with its ``rank``."""
        cells = dict(self.cells)
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


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def _point(plan: dict, step: float, memory: float, objective: float) -> dict:
    return {
        "step_time_s": step,
        "peak_memory_gib": memory,
        "objective": objective,
        "tp_pp": f"tp{plan.get('tp')}×pp{plan.get('pp')}",
        "plan": plan,
        "plans": 1,
    }


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
