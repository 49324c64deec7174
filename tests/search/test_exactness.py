"""The fast search is exact: its top K equals ``exhaustive_search``'s (same plans, same canonical
keys, same order, tie-breaks and groups of equivalent plans included), with step times and objectives equal to 1e-9 relative.

Every problem is restricted so that the scalar exhaustive path (every candidate through
``estimate``) takes a few seconds. The exhaustive top 20 of each problem is computed once; the
top K for K < 20 is its prefix (both paths rank by search.ranking, and the exhaustive pool keeps
every candidate up to the K-th group's objective, so a prefix is exact).

The fast path evaluates rows in chunks of ``CHUNK_CANDIDATES`` (search.row_scan) candidates and only prunes between
chunks; these problems fit in one default chunk, so each is also run with tiny chunks, which makes
the bound pruning (and the K-th-best threshold with ties) actually decide what is skipped.

Cost: the exhaustive path runs ``estimate`` on every candidate (~2 ms each), so the problems are
kept to ~25,000 candidates in all. They were 4x larger; each was cut along an axis its feature does
not need (the comment on each problem says which), and ``test_problem_features_are_exercised`` checks
that every problem still exercises its feature (ties, pp, CP, batch choice, offload, placements,
uneven splits) and that tiny chunks prune. Overlap switches stay varied in three problems.

Scheduling (pytest-xdist ``--dist loadgroup``): every test of one problem carries the problem's
``xdist_group``, so its exhaustive reference is computed once, on one worker, while the other
problems run on the other worker; the reference is cached per process (``functools.cache``).
"""

from __future__ import annotations

import functools
import math

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.search import row_scan
from paraplan.search.ranking import non_default_knobs, offloads, tie_value
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem

K_MAX = 20
KS = (1, 5, 20)
CHUNKS = (None, 1, 500)  # None: the default chunk size (no pruning on these small problems)


def problem(model: str, system: str, **fields) -> SearchProblem:
    return SearchProblem(model=load_model(model), system=load_system(system), **fields)


PROBLEMS = {
    # small dense model on one node; zero 1 / 2 and offload-free variants tie exactly; overlap switches
    # varied. micro_batch (2, 4) and recompute none/selective (19,752 -> 5,604 candidates): the space
    # keeps every tp/cp/pp, ZeRO 0-3 and the overlap switches, and its top 20 still has ties
    "gpt3-1.3b-8xa100-80": dict(
        model="gpt3-1.3b",
        system="dgx-a100-80gb",
        gpus=8,
        global_batch=32,
        seq_length=2048,
        micro_batch=(2, 4),
        recompute=("none", "selective"),
        vary_placement=False,
        vary_offload=False,
    ),
    # 13B on four 40 GB nodes: needs model parallelism, pp allowed (pp=2 plans reach the top 20);
    # overlap switches fixed on (varied in three other problems): 23,568 -> 4,336 candidates
    "gpt3-13b-32xa100-40-pp": dict(
        model="gpt3-13b",
        system="dgx-a100-40gb",
        gpus=32,
        global_batch=64,
        seq_length=2048,
        tp=(2, 4, 8),
        micro_batch=(1, 2),
        recompute=("none", "full"),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
    ),
    # long sequences with context parallelism, batch from --max-global-batch; overlap fixed on:
    # 11,772 -> 2,644 candidates
    "llama3-8b-16xh100-cp-maxgb": dict(
        model="llama3-8b",
        system="dgx-h100-80gb",
        gpus=16,
        seq_length=8192,
        max_global_batch=64,
        tp=(1, 2, 4),
        micro_batch=(1, 2),
        recompute=("none", "full"),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
    ),
    # MFU objective with a batch that differs between plans (64 or 96 under max 100); overlap fixed
    # on: 13,200 -> 2,920 candidates
    "gpt3-2.7b-16xh100-mfu": dict(
        model="gpt3-2.7b",
        system="dgx-h100-80gb",
        gpus=16,
        seq_length=2048,
        max_global_batch=100,
        objective="mfu",
        tp=(1, 2, 4),
        micro_batch=(1, 2, 4),
        recompute=("none", "selective"),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
    ),
    # cost objective at a price, offloads varied (free offload variants tie with the plain plan);
    # no recompute (the top 20 had none) and overlap fixed on: 26,656 -> 3,984 candidates
    "llama2-7b-8xh200-cost-offload": dict(
        model="llama2-7b",
        system="dgx-h200",
        gpus=8,
        seq_length=4096,
        global_batch=16,
        objective="cost",
        price_per_gpu_hour=2.5,
        micro_batch=(1, 2),
        recompute=("none",),
        zero=(0, 1, 3),
        vary_placement=False,
        vary_overlap=False,
    ),
    # placements varied on a multi-node cluster; micro batch 2 only: 5,376 -> 2,688 candidates
    "gpt3-350m-32xa100-40-placement": dict(
        model="gpt3-350m",
        system="dgx-a100-40gb",
        gpus=32,
        global_batch=64,
        seq_length=2048,
        micro_batch=(2,),
        recompute=("none",),
        zero=(0, 1),
        vary_offload=False,
        vary_overlap=False,
    ),
    # uneven pipeline splits: 12 layers on 8 stages, 24 layers on 16 stages (overlap varied)
    "gpt3-125m-16xa100-40-pp8-uneven": dict(
        model="gpt3-125m",
        system="dgx-a100-40gb",
        gpus=16,
        global_batch=64,
        seq_length=2048,
        pp=(8,),
        vary_placement=False,
        vary_offload=False,
    ),
    # the tensor-parallel layouts (1d, 2D SUMMA grids, 2d-seq): at 32k tokens a 4 x 2 grid beats 1D tp 8
    "gpt3-2.7b-16xa100-tp-layouts": dict(
        model="gpt3-2.7b",
        system="dgx-a100-80gb",
        gpus=16,
        seq_length=32768,
        global_batch=4,
        tp=(8, 16),
        micro_batch=(1,),
        recompute=("none", "full"),
        zero=(1, 3),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
        tp_layouts=("1d", "2d", "2d-seq"),
    ),
    "gpt3-1.3b-32xh100-pp16-uneven": dict(
        model="gpt3-1.3b",
        system="dgx-h100-80gb",
        gpus=32,
        global_batch=64,
        seq_length=2048,
        pp=(16,),
        tp=(1, 2),
        micro_batch=(1, 2),
        vary_placement=False,
        vary_offload=False,
    ),
    # every layer split of the accounting switches with every schedule (--vary-split) on a dense model
    "gpt3-1.3b-16xh100-splits": dict(
        model="gpt3-1.3b",
        system="dgx-h100-80gb",
        gpus=16,
        global_batch=64,
        seq_length=2048,
        pp=(4, 8),
        tp=(1, 2),
        micro_batch=(1, 2),
        recompute=("none",),
        schedules=("1f1b", "gpipe"),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
        vary_split=True,
    ),
}


def grouped(names) -> list:
    """``names`` as parameters, each in its problem's xdist group (one worker computes its reference)."""
    return [pytest.param(name, marks=pytest.mark.xdist_group(f"exact-{name}")) for name in names]


@functools.cache
def exhaustive(name: str):
    """The problem and its exhaustive top K_MAX, computed once per process."""
    p = problem(**PROBLEMS[name])
    return p, exhaustive_search(p, top_k=K_MAX)


def assert_same_top(fast, reference, k: int) -> None:
    expected = reference.plans[:k]
    assert len(fast.plans) == len(expected) == k
    assert [r.plan.model_dump() for r in fast.plans] == [r.plan.model_dump() for r in expected]
    assert [r.key for r in fast.plans] == [r.key for r in expected]
    assert [r.rank for r in fast.plans] == list(range(1, k + 1))
    assert [[q.model_dump() for q in r.equivalents] for r in fast.plans] == [
        [q.model_dump() for q in r.equivalents] for r in expected
    ]
    for got, want in zip(fast.plans, expected):
        assert math.isclose(got.objective, want.objective, rel_tol=1e-9), (
            got.key,
            got.objective,
            want.objective,
        )
        assert math.isclose(got.estimate.step_time_s, want.estimate.step_time_s, rel_tol=1e-9)
        assert math.isclose(
            got.estimate.peak_stage.peak_bytes, want.estimate.peak_stage.peak_bytes, rel_tol=1e-9
        )
        assert got.estimate.fits


@pytest.mark.parametrize("name", grouped(PROBLEMS))
def test_fast_top_k_equals_exhaustive(name, monkeypatch):
    p, reference = exhaustive(name)
    assert len(reference.plans) == K_MAX
    for chunk in CHUNKS:
        if chunk is not None:
            monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", chunk)
        for k in KS:
            fast = search(p, top_k=k)
            assert_same_top(fast, reference, k)
            assert fast.candidates == reference.candidates  # the same canonical space
            assert fast.rows == reference.rows
            assert fast.candidates >= fast.evaluated >= fast.feasible
        monkeypatch.undo()


@pytest.mark.parametrize("name", grouped(PROBLEMS))
def test_collect_all_counts_match_exhaustive(name):
    """Without pruning, the vectorised path evaluates and accepts exactly the candidates the scalar one does."""
    p, reference = exhaustive(name)
    fast = search(p, top_k=K_MAX, collect_all=True)
    assert fast.evaluated == fast.candidates == reference.evaluated
    assert fast.feasible == reference.feasible == len(fast.all_feasible)
    assert_same_top(fast, reference, K_MAX)


@pytest.mark.xdist_group("exact-gpt3-13b-32xa100-40-pp")
def test_small_chunks_prune(monkeypatch):
    """With small chunks the bound really skips rows, and the answer is still exact."""
    p, reference = exhaustive("gpt3-13b-32xa100-40-pp")
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast = search(p, top_k=5)
    assert fast.evaluated < fast.candidates
    assert fast.rows_evaluated < fast.rows
    assert_same_top(fast, reference, 5)


@pytest.mark.parametrize(
    "name",
    grouped(["gpt3-1.3b-8xa100-80", "llama2-7b-8xh200-cost-offload", "llama3-8b-16xh100-cp-maxgb"]),
)
def test_ties_are_broken_by_the_ranking_key(name, monkeypatch):
    """These problems have equal objectives inside the top 20 (e.g. ZeRO-1 vs ZeRO-2, an offload
    that costs nothing); both paths order each tie by search.ranking: fewer offloads, then fewer
    non-default knobs, then lower peak memory, then canonical key (row, grid)."""
    p, reference = exhaustive(name)
    objectives = [tie_value(r.objective) for r in reference.plans]
    tied = [i for i in range(1, len(objectives)) if objectives[i] == objectives[i - 1]]
    assert tied, (
        f"no tie in the top {K_MAX} of {name}: the test data no longer exercises tie-breaking"
    )
    keys = [
        (
            offloads(r.plan),
            non_default_knobs(r.plan),
            tie_value(r.estimate.peak_stage.peak_bytes),
            r.key,
        )
        for r in reference.plans
    ]
    for i in tied:
        assert keys[i - 1] < keys[i]
    assert any(keys[i - 1][:3] != keys[i][:3] for i in tied)  # not the canonical order alone
    # a cut through a run of ties: the K-th and (K+1)-th plans have the same objective
    for i in tied:
        for chunk in (None, 1):
            if chunk is not None:
                monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", chunk)
            assert_same_top(search(p, top_k=i), reference, i)
            monkeypatch.undo()


def test_exhaustive_prefix_property():
    """The reference shortcut used above: exhaustive top K is the prefix of its top 20 (ties included).
    (Overlap switches fixed on: 2,802 -> 702 candidates, three exhaustive runs; the top 20 still ties.)"""
    p = problem(
        model="gpt3-350m",
        system="dgx-a100-80gb",
        gpus=8,
        global_batch=32,
        seq_length=2048,
        micro_batch=(1, 2),
        recompute=("none",),
        vary_placement=False,
        vary_offload=False,
        vary_overlap=False,
    )
    reference = exhaustive_search(p, top_k=K_MAX)
    assert len(reference.plans) == K_MAX
    objectives = [r.objective for r in reference.plans]
    assert len(set(objectives)) < len(objectives)  # ties inside the top 20
    for k in (1, 5):
        small = exhaustive_search(p, top_k=k)
        assert [r.plan.model_dump() for r in small.plans] == [
            r.plan.model_dump() for r in reference.plans[:k]
        ]
        assert [r.key for r in small.plans] == [r.key for r in reference.plans[:k]]
        assert_same_top(search(p, top_k=k), small, k)


def _uneven(p, plans) -> bool:
    return all(p.model.layers % r.plan.pp for r in plans)


def _tp_layouts(p, plans) -> bool:
    """A 2D SUMMA grid wins at 32k tokens, 1D tp reaches the top 20, both grids of tp 8 appear, and the
    2d-seq layout is in the space (if not in the top 20)."""
    return (
        plans[0].plan.tp_layout == "2d"
        and any(r.plan.tp_layout == "1d" for r in plans)
        and {r.plan.tp_rows for r in plans if r.plan.tp_layout == "2d"} == {2, 4}
        and ("2d-seq", None) in p.layouts(8, 2)
    )


FEATURES = {  # what each problem is there for, checked on its exhaustive top 20
    "gpt3-1.3b-8xa100-80": lambda p, plans: (
        len({r.plan.zero for r in plans}) > 1
        and len({(r.plan.overlap_param_gather, r.plan.overlap_dp_grad_reduce) for r in plans}) > 1
    ),
    "gpt3-13b-32xa100-40-pp": lambda p, plans: any(r.plan.pp > 1 for r in plans),
    "llama3-8b-16xh100-cp-maxgb": lambda p, plans: any(r.plan.cp > 1 for r in plans),
    "gpt3-2.7b-16xh100-mfu": lambda p, plans: (
        all(r.objective < 0 for r in plans)  # minus the MFU
        and len({r.plan.global_batch for r in plans}) > 1
    ),
    "llama2-7b-8xh200-cost-offload": lambda p, plans: any(
        r.plan.offload_weights or r.plan.offload_activations or r.plan.offload_optimizer
        for r in plans
    ),
    "gpt3-350m-32xa100-40-placement": lambda p, plans: len({r.plan.placement for r in plans}) > 1,
    "gpt3-125m-16xa100-40-pp8-uneven": _uneven,
    "gpt3-2.7b-16xa100-tp-layouts": _tp_layouts,
    "gpt3-1.3b-32xh100-pp16-uneven": _uneven,
    # a split of the accounting switches wins (not the default one), and the top 20 holds two of them
    "gpt3-1.3b-16xh100-splits": lambda p, plans: (
        (plans[0].plan.embedding_as_layer or plans[0].plan.loss_as_layer)
        and len({(r.plan.embedding_as_layer, r.plan.loss_as_layer) for r in plans}) > 1
    ),
}


@pytest.mark.parametrize("name", grouped(PROBLEMS))
def test_problem_features_are_exercised(name, monkeypatch):
    """Guard against the problems drifting into trivial ones: each exercises its feature in the top
    20, and with one-candidate chunks the bound skips candidates (so pruning is tested, not bypassed)."""
    assert set(FEATURES) == set(PROBLEMS)
    p, reference = exhaustive(name)
    assert FEATURES[name](p, reference.plans), (
        f"{name} no longer exercises its feature in the top {K_MAX}"
    )
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast = search(p, top_k=5)
    assert fast.evaluated < fast.candidates
