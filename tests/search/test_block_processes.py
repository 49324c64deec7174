"""search.block_processes: forked workers, the shared threshold, the split by costing class, the default count."""

from __future__ import annotations

import math
import threading
import time

import pytest

from paraplan.search.bounds import block_processes


def test_a_failing_search_worker_is_reported():
    """An exception in a forked worker reaches the caller as an error naming it, with the worker's traceback."""

    def task(part, shared):
        if part == ["second"]:
            raise ValueError("boom in the worker")
        return part

    with pytest.raises(RuntimeError, match="(?s)a search worker failed.*boom in the worker"):
        block_processes.run_parts(task, [["first"], ["second"]])
    assert block_processes.run_parts(
        lambda part, shared: (part, shared.get()), [[1], [2], [3]]
    ) == [([1], math.inf), ([2], math.inf), ([3], math.inf)]

    def parent_fails(part, shared):  # the workers' parts are not waited for: they are stopped
        if part == ["first"]:
            raise KeyError("boom here")
        time.sleep(60)

    started = time.perf_counter()
    with pytest.raises(KeyError, match="boom here"):
        block_processes.run_parts(parent_fails, [["first"], ["second"]])
    assert time.perf_counter() - started < 30


def test_the_shared_threshold_keeps_the_least_offer():
    shared = block_processes.SharedSearch(2).view(0)
    assert shared.get() == math.inf
    for offer, least in ((5.0, 5.0), (7.0, 5.0), (2.5, 2.5), (math.inf, 2.5)):
        shared.offer(offer)
        assert shared.get() == least


def test_auto_workers_forks_only_from_a_single_thread():
    assert 1 <= block_processes.auto_workers() <= block_processes.AUTO_WORKERS_MAX
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert block_processes.auto_workers() == 1
    finally:
        stop.set()
        other.join()


def test_the_split_keeps_a_class_together_and_alternates_neighbouring_classes():
    from collections import namedtuple

    Block = namedtuple("Block", "tp cp micro_batch offset")
    blocks = [
        Block(tp, cp, mb, i)
        for i, (tp, cp, mb) in enumerate(
            (tp, cp, mb) for tp in (1, 2) for cp in (1, 2, 4) for mb in (1, 2, 4, 8)
        )
    ]

    def tokens(
        b,
    ):  # the class: (tp, micro-batch tokens per cp rank), as search.blocks.costing_class
        return b.tp, 4096 * b.micro_batch // b.cp

    asked = []
    parts = block_processes.split_by_costing_class(
        blocks, 2, lambda b: asked.append(b) or tokens(b)
    )
    assert len(asked) == len({(b.tp, b.cp, b.micro_batch) for b in blocks})  # once per key
    assert sorted(b.offset for part in parts for b in part) == list(range(len(blocks)))
    assert all([b.offset for b in part] == sorted(b.offset for b in part) for part in parts)
    owner = {}
    for i, part in enumerate(parts):
        for b in part:
            assert owner.setdefault(tokens(b), i) == i  # a class in one part
    classes = sorted(owner, reverse=True)
    assert owner[classes[0]] != owner[classes[1]]  # the two largest classes in different parts
    loads = [
        sum(1 for _ in {(b.tp, b.cp, b.micro_batch) for b in part})
        + block_processes.SHARED_COST_KEYS * len({tokens(b) for b in part})
        for part in parts
    ]
    assert max(loads) - min(loads) <= block_processes.SHARED_COST_KEYS + 3
    assert block_processes.split_by_costing_class(blocks[:1], 4, lambda b: 0) == [blocks[:1]]


def test_a_threshold_a_worker_publishes_reaches_the_other_processes():
    def task(part, shared):
        if part == ["worker"]:
            shared.offer(3.0)
            return None
        deadline = time.monotonic() + 30
        while shared.get() != 3.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        return shared.get()

    assert block_processes.run_parts(task, [["parent"], ["worker"]]) == [3.0, None]


def test_the_best_groups_of_every_process_set_the_threshold_together():
    """offer_groups: with top_k = 3, one process found groups of objective 1 and 4, the other 2, 2 (one group twice:
    equal objective, step and memory) and 5: together their third group is 4, tighter than either's own (neither
    holds three groups). A group found by both counts once."""
    shared = block_processes.SharedSearch(2, top_k=3)
    first, second = shared.view(0), shared.view(1)
    first.offer_groups([1.0, 4.0], [10.0, 40.0], [1.0, 1.0])
    assert first.get() == math.inf  # two groups so far
    second.offer_groups([2.0, 2.0, 5.0], [20.0, 20.0, 50.0], [1.0, 1.0, 1.0])
    assert second.get() == 4.0
    second.offer_groups(
        [1.0, 2.0, 5.0], [10.0, 20.0, 50.0], [1.0, 1.0, 1.0]
    )  # the first's group 1 found again
    assert second.get() == 4.0
    assert (
        block_processes.SharedSearch(2).view(0).offer_groups([1.0], [1.0], [1.0]) is None
    )  # top_k 0: nothing shared


def test_a_scan_takes_a_lower_shared_threshold_between_batches():
    """search.run._Scan.refresh: a scan of a split search lowers its ceiling and threshold to what another process
    has published since the scan began (never raises them)."""
    from paraplan.catalog import load_model, load_system
    from paraplan.search.run import _Scan
    from paraplan.search.space import SearchProblem

    problem = SearchProblem(
        model=load_model("gpt3-125m"),
        system=load_system("dgx-a100-80gb"),
        gpus=8,
        seq_length=2048,
        global_batch=8,
    )
    shared = block_processes.SharedSearch(2)
    mine, other = shared.view(0), shared.view(1)
    scan = _Scan(problem, None, 1, None, 1.0, 1.0, False)
    scan.threshold, scan.ceiling = 9.0, 9.5
    scan.refresh()  # not in a split search: unchanged
    assert (scan.threshold, scan.ceiling) == (9.0, 9.5)
    scan.shared = mine
    other.offer(7.0)
    scan.refresh()
    assert (scan.threshold, scan.ceiling) == (7.0, 7.0)
    other.offer(8.0)  # a higher offer is not taken: the shared value stays the least
    scan.refresh()
    assert (scan.threshold, scan.ceiling) == (7.0, 7.0)


def test_handed_over_blocks_are_each_searched_once_by_some_process():
    """PartView.hand_over / take / help_until_done: nothing is handed over while no process waits; once one has
    finished its own part, the blocks another hands over are each searched exactly once (by either: the one that
    handed them over helps too once it finishes), and every process returns only when all have finished."""

    def task(part, shared):
        searched = []
        if part == ["owner"]:
            deadline = time.monotonic() + 30
            while not shared.waiting() and time.monotonic() < deadline:
                time.sleep(0.01)
            handed = [shared.hand_over(block, float(block)) for block in (7, 8, 9)]
            assert handed == [True, True, True]
            assert not shared.hand_over(10, 10.0)  # room for three: the caller searches it itself
        shared.help_until_done(lambda block, bound: searched.append((block, bound)))
        return searched

    owner, helper = block_processes.run_parts(task, [["owner"], ["helper"]], blocks=3)
    assert sorted(owner + helper) == [(7, 7.0), (8, 8.0), (9, 9.0)]
    alone = block_processes.SharedSearch(1, blocks=2).view(0)
    assert not alone.waiting() and not alone.hand_over(1, 1.0) and alone.take() is None
    alone.help_until_done(
        lambda block, bound: pytest.fail("nothing was handed over")
    )  # returns: all finished


def test_a_split_search_works_out_the_first_bounds_once_before_it_forks(monkeypatch):
    """search.run._FirstBounds: a split search works out every block's first bound once, in the parent, over all the
    blocks (its processes inherit them); each part's queue then starts from one process's bits (the affine floors
    fitted over every key, not the part's), and the plans are one process's."""
    from tests.search.test_moe_search import mixtral_problem

    from paraplan.search import run
    from paraplan.search.bounds import affine_floors as affine
    from paraplan.search.bounds.blocks import blocks

    run._block_search_code()  # the block search's names, bound in search.run when first used
    monkeypatch.setattr(affine, "AFFINE_MIN_KEYS", 1)  # the affine first bounds, however few keys
    problem = mixtral_problem(
        ep=(1, 2, 8), cp=(1, 2), micro_batch=(1, 2), global_batch=64, recompute=None
    )
    every = blocks(problem)
    alone = run._BlockQueue(problem, every, run._FirstBounds(problem, every))
    first = run._FirstBounds(problem, every)
    assert first.cheap and set(first.bounds) == {b.offset for b in every}
    part = every[1::2]
    queue = run._BlockQueue(problem, part, first)
    of_one = {every[i].offset: bound for bound, i, _ in alone.heap}
    assert {part[i].offset: bound for bound, i, _ in queue.heap} == {
        b.offset: of_one[b.offset] for b in part
    }
    assert queue.steps == alone.steps
    one = run.search(problem, top_k=10, blocks=True, workers=1)
    made = []

    class Spy(run._FirstBounds):
        def __init__(self, problem, parts, progress=None):
            made.append(len(parts))
            super().__init__(problem, parts, progress)

    monkeypatch.setattr(run, "_FirstBounds", Spy)
    monkeypatch.setattr(run, "PARALLEL_KEYS", 1)
    two = run.search(problem, top_k=10, blocks=True, workers=2)
    assert made == [len(every)]  # once, over every block: none in the processes
    assert [(r.key, r.objective) for r in two.plans] == [(r.key, r.objective) for r in one.plans]
