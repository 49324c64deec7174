"""One layout of the items a search keeps (search.result.PoolItem, issue 31 mends item 2): the fast path's pool
and the exhaustive search's are the same named tuple (objective, r, g, step, peak, row, option), read by name by
trim_pool, top_plans and scan_result (the fast path resolved (obj, r, g, row, option, step, peak) while the
exhaustive search built (obj, r, g, step, peak, row, option), and trim_pool read p[3], p[4] of both)."""

from __future__ import annotations

from paraplan.search import scan as scan_module
from paraplan.search.exhaustive import _exhaustive_part
from paraplan.search.result import FasterMiss, NearestMiss, PoolItem, top_plans, trim_pool
from paraplan.search.run import search


def test_trim_pool_reads_names_by_hand():
    """K = 1: the least objective and its ties stay; the threshold is that objective."""
    pool = [
        PoolItem(2.0, 0, 0, 1.0, 5.0),
        PoolItem(1.0, 0, 1, 1.0, 5.0),
        PoolItem(1.0, 1, 0, 1.0, 5.0),
    ]
    kept, threshold = trim_pool(pool, 1)
    assert threshold == 1.0
    assert kept == pool[1:]
    assert all(isinstance(p, PoolItem) and p.row is None for p in kept)


def test_resolved_and_nearer():
    item = PoolItem(1.0, 3, 4, 0.5, 7.0)
    assert item.resolved(("row", "option")) == (1.0, 3, 4, 0.5, 7.0, "row", "option")
    assert NearestMiss(1.0, 2, 0, 9.0).nearer(NearestMiss(1.0, 2, 1, 8.0))
    assert not NearestMiss(2.0, 0, 0, 9.0).nearer(NearestMiss(1.0, 5, 5, 8.0))


def test_both_paths_keep_the_one_layout(monkeypatch, small_problem):
    """The exhaustive part's pool holds resolved PoolItems; the fast path's scan holds PoolItems (and named
    misses); top_plans ranks the exhaustive pool to the fast search's plans."""
    problem = small_problem(micro_batch=(2,), vary_offload=False)
    pool = _exhaustive_part(problem, 3, 0, 1).pool
    assert pool and all(isinstance(p, PoolItem) and p.row is not None for p in pool)
    seen = []
    real = scan_module.Scan.evaluate

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        seen.append((list(self.pool), list(self.faster), self.nearest))

    monkeypatch.setattr(scan_module.Scan, "evaluate", spy)
    fast = search(problem, top_k=3, workers=1)
    assert seen
    for items, faster, nearest in seen:
        assert all(type(p) is PoolItem for p in items)
        assert all(type(f) is FasterMiss for f in faster)
        assert nearest is None or type(nearest) is NearestMiss
    ranked = top_plans(problem, trim_pool(pool, 3)[0], 3)
    assert [p.plan for p in ranked] == [p.plan for p in fast.plans]
