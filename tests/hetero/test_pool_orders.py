"""Issue 31: ``search --cluster`` listed every pool order (``itertools.permutations``) before its time
budget applied: eleven pools ran out of memory. The orders are now listed lazily, interchangeable pools
once, and counted in closed form (search.staged.pool_orders, hetero.cluster_space_size)."""

from __future__ import annotations

import itertools
import json
import math
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.staged.hetero import (
    HeteroProblem,
    _degrees,
    cluster_space_size,
    search_cluster,
    searched_modes,
)
from paraplan.search.staged.pool_orders import pool_kinds, pool_order_count, pool_orders
from paraplan.specs.model import ModelSpec

SYSTEMS = ("aws-p3.8xlarge", "aws-g4dn.12xlarge", "dgx-a100-80gb")
TINY = ModelSpec(layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=8000, max_position=512)


def _cluster(kinds: list[int], links: bool = False):
    pools = [
        {"name": f"p{i}", "system": SYSTEMS[k], "nodes": 1, "gpus": 2} for i, k in enumerate(kinds)
    ]
    data = {"pools": pools}
    if links and len(pools) > 1:
        data["links"] = [{"pools": ["p0", "p1"], "bandwidth": "1 GB/s"}]
    return cluster_from_dict(data)


def _canonical(cluster, order):
    """An order with each pool replaced by its kind: the orders that relabel one another."""
    kind_of = {name: i for i, kind in enumerate(pool_kinds(cluster)) for name in kind}
    return tuple(kind_of[name] for name in order)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=6), st.booleans())
def test_the_orders_are_the_distinct_permutations_and_the_count_is_their_number(kinds, links):
    cluster = _cluster(kinds, links)
    names = [p.name for p in cluster.pools]
    listed = list(pool_orders(cluster))
    assert len(listed) == len(set(listed)) == pool_order_count(cluster)
    every = {_canonical(cluster, o) for o in itertools.permutations(names)}
    assert {_canonical(cluster, o) for o in listed} == every
    assert len(every) == pool_order_count(cluster)


def test_distinct_pools_keep_itertools_order_and_linked_pools_are_their_own_kind():
    distinct = _cluster([0, 1, 2])
    assert list(pool_orders(distinct)) == list(itertools.permutations(("p0", "p1", "p2")))
    assert pool_order_count(_cluster([0, 0, 0, 0])) == 1
    linked = _cluster([0, 0, 0, 0], links=True)  # p0 and p1 named by a link: each its own kind
    assert pool_kinds(linked) == [("p0",), ("p1",), ("p2", "p3")]
    assert pool_order_count(linked) == math.factorial(4) // math.factorial(2) == 12


def test_sixteen_pools_are_counted_without_listing_and_listed_one_at_a_time():
    sixteen = _cluster([0, 1] * 8)
    assert pool_order_count(sixteen) == math.comb(16, 8) == 12870
    tracemalloc.start()
    first = next(pool_orders(sixteen))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert first == tuple(f"p{i}" for i in (*range(0, 16, 2), *range(1, 16, 2)))
    assert peak < 1_000_000


def test_the_space_size_is_orders_times_degrees_times_modes():
    problem = HeteroProblem(TINY, _cluster([0, 1, 0, 1]), 8, 128)
    degrees = sum(1 for _ in _degrees(problem))
    assert cluster_space_size(problem) == 6 * degrees * len(searched_modes(problem))


def test_one_order_per_kind_sequence_finds_the_plans_every_order_finds():
    """Swapping two interchangeable pools relabels a plan: the distinct orders give the step times
    of all 4! orders (each best time once, where every order repeats it up to 2!·2! times)."""
    cluster = _cluster([0, 1, 0, 1])
    problem = HeteroProblem(TINY, cluster, 8, 128)
    every = list(itertools.permutations([p.name for p in cluster.pools]))
    full = search_cluster(problem, top_k=40, orders=every)
    distinct = search_cluster(problem, top_k=10)
    assert len(every) == 24 and pool_order_count(cluster) == 6
    full_times = sorted({round(c.step_time_s, 12) for c in full.plans})
    assert [round(c.step_time_s, 12) for c in distinct.plans] == full_times[:10]


@pytest.mark.parametrize("pools", [16, 24])
def test_the_cli_searches_many_pools_of_1024_gpus_within_its_budget(tmp_path, capsys, pools):
    from paraplan.cli import main

    kinds = ("dgx-a100-80gb", "dgx-h100-80gb", "dgx-a100-40gb")
    path = tmp_path / "many.json"
    nodes = 1024 // 8 // pools or 1
    specs = [{"name": f"p{i}", "system": kinds[i % 3], "nodes": nodes} for i in range(pools)]
    path.write_text(json.dumps({"pools": specs}))
    argv = ["search", "-m", "gpt3-1.3b", "--cluster", str(path), "--global-batch", "256"]
    t0 = time.perf_counter()
    with pytest.raises(SystemExit) as info:
        main([*argv, "--seq-length", "1024", "--time-budget", "2", "--json"])
    assert time.perf_counter() - t0 < 2 + 8
    assert info.value.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["plans"] and "pool orders enumerated" in doc["stopped"]


def _brute_force_space(problem) -> int:
    """Every (pool order, tp, pp, micro-batch, recompute mode) of the AMP-style search before the
    per-stage rules, by nested loops over every integer and every permutation of the pools, orders
    that relabel one another (interchangeable pools swapped) counted once."""
    from paraplan.specs.rules import batch_rule, tp_rules
    from paraplan.step.blocks import model_blocks

    cluster, batch = problem.cluster, problem.global_batch
    n, node = cluster.gpus, min(p.gpus_per_node for p in cluster.pools)
    names = [p.name for p in cluster.pools]
    orders = len({_canonical(cluster, o) for o in itertools.permutations(names)})
    degrees = 0
    for tp in range(1, n + 1):
        if tp & (tp - 1) or tp > node or n % tp or tp_rules(problem.model, tp):
            continue
        for pp in range(1, min(n // tp, len(model_blocks(problem.model))) + 1):
            dp = n // tp // pp
            if (n // tp) % pp or batch_rule(batch, dp, 1):
                continue
            degrees += sum(
                1
                for mb in range(1, batch // dp + 1)
                if not mb & (mb - 1) and not batch_rule(batch, dp, mb)
            )
    return orders * degrees * len(searched_modes(problem))


@pytest.mark.parametrize(
    "kinds, batch", [([0], 8), ([0, 1], 8), ([0, 1, 0, 1], 16), ([0, 0, 1, 2], 4), ([2, 2, 2], 6)]
)
def test_the_space_size_matches_brute_force_enumeration_and_the_candidate_stream(
    monkeypatch, kinds, batch
):
    """cluster_space_size against nested loops (_brute_force_space) and against the candidates the
    search lists before the per-stage rules (those rules switched off): every order of the n! the
    full permutation list gives counted once per relabelling (Π c! times)."""
    from paraplan.search.staged import hetero

    problem = HeteroProblem(TINY, _cluster(kinds), batch, 128)
    assert cluster_space_size(problem) == _brute_force_space(problem) > 0
    monkeypatch.setattr(hetero, "_stage_ok", lambda *args: True)
    monkeypatch.setattr(hetero, "launchable", lambda *args: True)
    listed, degrees = [0, 0], list(hetero._degrees(problem))
    for _ in hetero._candidates(problem, pool_orders(problem.cluster), degrees, math.inf, listed):
        pass
    assert listed == [pool_order_count(problem.cluster), cluster_space_size(problem)]
    every = list(itertools.permutations([p.name for p in problem.cluster.pools]))
    relabellings = math.prod(math.factorial(len(k)) for k in pool_kinds(problem.cluster))
    counted = [0, 0]
    for _ in hetero._candidates(problem, every, degrees, math.inf, counted):
        pass
    assert counted[1] == cluster_space_size(problem) * relabellings


def test_the_result_reports_the_space_and_whether_the_search_finished():
    problem = HeteroProblem(TINY, _cluster([0, 1]), 8, 128)
    done = search_cluster(problem, top_k=1)
    stopped = search_cluster(problem, top_k=1, time_budget_s=0.0)
    assert done.space == stopped.space == cluster_space_size(problem) > 0
    assert done.to_dict()["finished"] is True and "stopped" not in done.to_dict()
    assert stopped.to_dict()["finished"] is False and stopped.to_dict()["space"] == done.space


def test_the_cli_says_the_cluster_search_finished(tmp_path, capsys):
    from paraplan.cli import main

    path = tmp_path / "two.json"
    pools = [p.model_dump() for p in _cluster([0, 1]).pools]
    path.write_text(json.dumps({"pools": pools}))
    argv = ["search", "-m", "gpt3-125m", "--cluster", str(path), "--global-batch", "8"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--seq-length", "128", "--time-budget", "60", "--width", "400"])
    assert info.value.code in (0, None)
    last = capsys.readouterr().out.splitlines()[-1]
    space = cluster_space_size(HeteroProblem(TINY, _cluster([0, 1]), 8, 128))
    assert last.startswith(
        f"finished: the search ran to the end of its space ({space:,} candidates"
    )
    assert last.endswith(
        "candidates before the per-stage rules); the plans above are the best of all"
    )
