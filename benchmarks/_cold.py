"""One cold search for the benchmarks: every cost cache cleared first (stages.COLD_CACHES, search.blocks.SEARCH_CACHES),
on a fresh copy of the problem (its per-problem memos empty too)."""

from __future__ import annotations

import time
from dataclasses import replace

from paraplan.search.bounds.blocks import SEARCH_CACHES
from paraplan.search.run import search
from paraplan.step.build import COLD_CACHES


def cold_search(problem, **options):
    """(wall seconds, SearchResult) of ``search(problem, **options)`` with every cost cache cleared before it."""
    problem = replace(problem)  # SearchProblem._memo starts empty
    for cached in COLD_CACHES + SEARCH_CACHES:
        cached.cache_clear()
    start = time.perf_counter()
    result = search(problem, **options)
    return time.perf_counter() - start, result
