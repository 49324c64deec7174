"""Issue 31 (speed): the AMP-style search (``search --cluster``) bounds every candidate from its stages' blocks
alone (search.staged.splits.bound_s, step.per_stage.stage_block_work_s), solves the split of candidates in bound
order only until the k-th best step found reaches the next bound, and works a split's memory out first
(splits.any_split: no split fits, no work or tail matrices). Exact: on small random problems, dense and
mixture-of-experts, it returns the same top k (plans, step times) as solving every candidate's split with no
pruning, and every bound is at most its candidate's priced step."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from paraplan.catalog import load_model
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.staged import hetero
from paraplan.search.staged.balance import balance_split
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.splits import any_split, bound_s, split_stages
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import stage_plan_to_dict
from paraplan.step.blocks import attached_blocks, model_blocks
from paraplan.step.compose import BLOCK_TERM_NAMES
from paraplan.step.per_stage import stage_units
from paraplan.step.stage_blocks import distinct_blocks, per_block_parts

TINY = ModelSpec(layers=4, hidden=512, heads=8, ffn_hidden=2048, vocab=8000, max_position=512)
SYSTEMS = ("aws-p3.8xlarge", "aws-g4dn.12xlarge", "dgx-a100-40gb")
MOE_POOLS = {
    "h100": {"name": "h100", "system": "dgx-h100-80gb", "nodes": 1},
    "a100": {"name": "a100", "system": "dgx-a100-80gb", "nodes": 1},
}


def _dense_problem(seed: int) -> HeteroProblem:
    """A tiny dense model on two or three small pools of random systems, batch and sequence, and random
    run-wide axes (cp, the schedules, offload: search.staged.axes)."""
    rng = random.Random(seed)
    pools = [
        {"name": f"p{i}", "system": rng.choice(SYSTEMS), "nodes": 1, "gpus": rng.choice((2, 4))}
        for i in range(rng.choice((2, 3)))
    ]
    cluster = cluster_from_dict({"pools": pools})
    axes = {
        "cps": rng.choice(((1,), (1, 2))),
        "schedules": rng.choice((None, ("1f1b", "zb-h1"), ("gpipe",))),
        "vary_offload": rng.random() < 0.3,
        "micro_batches": (1, 2),
    }
    return HeteroProblem(
        TINY, cluster, rng.choice((4, 8, 16)), rng.choice((128, 256)), "fp16", **axes
    )


def _moe_problem(seed: int) -> HeteroProblem:
    """Qwen3-30B-A3B on one H100 node or on an H100 and an A100 node, or Mixtral 8x7B on both, the axes kept
    small (a search well under a second), a random set of dispatchers."""
    rng = random.Random(seed)
    name, pools, axes = rng.choice(
        (
            ("qwen3-30b-a3b", ("h100",), {"tps": (1, 2, 4), "pps": (1, 2), "ep": (2, 4, 8)}),
            ("qwen3-30b-a3b", ("h100", "a100"), {"tps": (2, 4), "pps": (2,), "ep": (4, 8)}),
            ("mixtral-8x7b", ("h100", "a100"), {"tps": (4,), "pps": (2,), "ep": (8,)}),
        )
    )
    dispatchers = rng.choice((None, ("alltoall",), ("allgather", "deepep")))
    cluster = cluster_from_dict({"pools": [MOE_POOLS[p] for p in pools]})
    fields = axes | {"recompute": ("none",), "dispatchers": dispatchers, "micro_batches": (2,)}
    return HeteroProblem(load_model(name), cluster, 16, 2048, **fields)


def _unpruned(problem: HeteroProblem, top_k: int) -> list:
    """The k best of every candidate of the search (its list, no budget), each split solved with no cutoff,
    ranked as the search ranks (step, bound, place in the list); every bound checked against its step."""
    stream = hetero._candidates(
        problem,
        hetero.pool_orders(problem.cluster),
        list(hetero._degrees(problem)),
        math.inf,
        [0, 0],
    )
    rows = []
    for index, (settings, m, order, priced) in enumerate(stream):
        bound = bound_s(priced, settings)
        found = split_stages(priced, settings, m)
        if found is None:
            continue
        assert bound <= found.step_s * (1 + 1e-12)
        rows.append((found.step_s, bound, index, settings, found.bounds, m, order, priced))
    rows.sort(key=lambda r: r[:3])
    return rows[:top_k]


def _same_top_k(problem: HeteroProblem, top_k: int) -> None:
    expected = _unpruned(problem, top_k)
    got = search_cluster(problem, top_k=top_k)
    assert expected and not got.stopped
    assert len(got.plans) == len(expected)
    for c, (step, _, _, settings, bounds, m, order, priced) in zip(got.plans, expected):
        assert c.step_time_s == pytest.approx(step, rel=1e-12, abs=0)
        plan = hetero._plan_from(priced, settings, bounds, m)
        assert stage_plan_to_dict(c.plan) == stage_plan_to_dict(plan)
        assert c.label.startswith(hetero._label(settings, bounds, order))


@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow) for s in (2, 3))])
def test_dense_search_returns_the_unpruned_top_k(seed):
    _same_top_k(_dense_problem(seed), top_k=4)


@pytest.mark.parametrize("seed", range(3))
def test_moe_search_returns_the_unpruned_top_k(seed):
    _same_top_k(_moe_problem(seed), top_k=4)


def test_a_stage_over_pools_that_rank_its_blocks_differently_is_bounded_admissibly():
    """A B200, two H200s and an MI300X (one GPU each but the H200s): at pp 1 one stage spans all three
    pools, which rank its blocks differently (the attention at sequence 8192 against the GEMMs), so each
    block's slowest pool summed (Σ_k max_p: 1.0359 s) exceeds the priced stage, the pool slowest over the
    whole range (max_p Σ_k: 0.9935 s), and the search returned a 1.0085 s plan; bounded by one pool's row
    (step.per_stage.stage_block_work_s) every bound is at most its step and the top k is the unpruned one."""
    model = ModelSpec(
        layers=4, hidden=768, heads=16, ffn_hidden=2304, vocab=50000, max_position=8192
    )
    pools = [
        {"name": "p0", "system": "dgx-b200", "nodes": 1, "gpus": 1},
        {"name": "p1", "system": "dgx-h200", "nodes": 1, "gpus": 2},
        {"name": "p2", "system": "mi300x-8", "nodes": 1, "gpus": 1},
    ]
    problem = HeteroProblem(
        model,
        cluster_from_dict({"pools": pools}),
        256,
        8192,
        "bf16",
        pps=(1, 2),
        tps=(1,),
        micro_batches=(1,),
        recompute=("full", "selective", "none"),
    )
    _same_top_k(problem, top_k=2)


def test_any_split_finds_a_split_exactly_where_the_dp_does():
    """splits.any_split on random allowed ranges agrees with search.staged.balance.balance_split on times set
    where allowed (None there exactly when no split has every range allowed)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        stages, n = rng.integers(1, 4), rng.integers(2, 7)
        oks = [np.triu(rng.random((n + 1, n + 1)) < 0.4, k=1) for _ in range(stages)]
        oks[0][1:, :] = False
        oks[-1][:, :n] = False
        times = np.where(np.array(oks), rng.random((stages, n + 1, n + 1)), np.inf)
        assert any_split(oks) == (balance_split(times, 3) is not None)


def test_per_block_parts_lays_each_distinct_blocks_seconds_over_the_block_list():
    """step.stage_blocks.per_block_parts (each distinct block worked out once) equals the sum, block by block of
    the block list, of its own BlockTerms seconds and those of the blocks it brings (``attached_blocks``: a
    DeepSeek-V3 output block brings its MTP module, its MoE layers their routed experts)."""
    model = load_model("deepseek-v3")
    problem = HeteroProblem(model, cluster_from_dict({"pools": [MOE_POOLS["h100"]]}), 16, 4096)
    settings, _, _, priced = next(
        hetero._candidates(
            problem, [("h100",)], list(hetero._degrees(problem))[:1], math.inf, [0, 0]
        )
    )
    units = next(iter(stage_units(model, priced.cluster, priced.common, settings[0]).values()))
    index = {ref: d for d, ref in enumerate(distinct_blocks(model))}
    parts = per_block_parts(model, units)
    assert attached_blocks(model)
    for name in BLOCK_TERM_NAMES:
        for k, ref in enumerate(model_blocks(model)):
            own = getattr(units[index[ref]].terms, name)
            brought = [
                hosts.get(ref.kind, 0) * getattr(units[index[a]].terms, name)
                for a, hosts in attached_blocks(model)
            ]
            assert parts[name][k] == own + sum(brought)
    # memoised: neither the mapping nor its arrays can be changed by a caller
    with pytest.raises(TypeError):
        parts["forward"] = parts["forward"] * 0  # type: ignore[index]
    with pytest.raises(ValueError):
        parts["forward"][0] = 0.0
